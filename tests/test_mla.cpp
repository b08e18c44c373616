// test_mla.cpp — multi-head latent attention (deepseek2, models/deepseek2.cpp) in the paged KV
// cache: the absorbed computation the model runs (Q's no-RoPE part through W_UKᵀ into latent
// space, paged attention of n_head query heads over one KV "head" [k_pe | latent] with V read
// as the latent inside the K row, each head's output through W_UV) equals the expanded one
// (k_nope = W_UK·c and v = W_UV·c per head and position, ordinary attention) over a long
// context (DeepSeek-V2 §2.1.2: W_UK absorbs into W_Q, W_UV into W_O); the KV cache keeps one row
// of n_rot + kv_lora_rank values per token and layer, which `kvrun info` reports; the types
// whose rows cannot hold the latent at an offset (fp8, nvfp4) and --kv-rotate are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "engine/context.h"
#include "engine/context_state.h"
#include "engine/model.h"
#include "eval/model_info.h"
#include "gguf.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "synth_util.h"
#include "test_util.h"

namespace kvrun {
namespace {

// A small MLA layer: 4 heads, nope 32 + rope 32, latent 64, V heads of 32 (tiny-deepseek2's).
constexpr int64_t kHeads = 4, kNope = 32, kRot = 32, kRank = 64, kHv = 32;
constexpr int64_t kHd = kNope + kRot, kRow = kRot + kRank, kBs = 16;

struct MlaCase {
  DType type;
  bool flash;
  int64_t n_q;  ///< query rows at the end of the context (1: decode)
  double tol;   ///< max |absorbed − expanded| / max |expanded|
};

/// Random N(0, sd²) floats.
std::vector<float> randn(std::mt19937& rng, size_t n, double sd) {
  std::normal_distribution<float> nd(0.0f, float(sd));
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

/// The step's page table over one sequence whose rows are positions pos0 … pos0 + n − 1 and whose
/// blocks are 0, 1, … (identity table).
struct OneSeq {
  std::vector<int32_t> seq_indptr, block_indptr, block_ids, last_len, pos;
  std::vector<int64_t> slot;
  PageTable pt;
  OneSeq(int64_t pos0, int64_t n) {
    const int64_t nb = (pos0 + n + kBs - 1) / kBs;
    seq_indptr = {0, int32_t(n)};
    block_indptr = {0, int32_t(nb)};
    for (int64_t b = 0; b < nb; ++b) block_ids.push_back(int32_t(b));
    last_len = {int32_t((pos0 + n - 1) % kBs + 1)};
    for (int64_t i = 0; i < n; ++i) {
      pos.push_back(int32_t(pos0 + i));
      slot.push_back(pos0 + i);
    }
    pt = {1,
          n,
          kBs,
          seq_indptr.data(),
          block_indptr.data(),
          block_ids.data(),
          last_len.data(),
          pos.data(),
          slot.data()};
  }
};

/// The expanded attention in double: per head h and position t, k_nope = W_UK[h]·c_t and v =
/// W_UV[h]·c_t from the rows [k_pe | c] (`rows`, [n_ctx][kRow]); query row r (at position
/// n_ctx − nq + r) attends causally with scores (q_nope·k_nope + q_pe·k_pe) · scale. Returns
/// [nq][kHeads][kHv].
std::vector<double> expanded_attention(const std::vector<float>& wuk, const std::vector<float>& wuv,
                                       const std::vector<float>& rows, const std::vector<float>& q,
                                       int64_t n_ctx, int64_t nq, float scale) {
  std::vector<double> out(size_t(nq * kHeads * kHv));
  std::vector<double> kn(size_t(n_ctx * kNope)), vv(size_t(n_ctx * kHv));
  std::vector<double> sc(static_cast<size_t>(n_ctx));
  auto up = [&](const std::vector<float>& w, int64_t h, int64_t i, int64_t m, const float* c) {
    double a = 0;
    for (int64_t j = 0; j < kRank; ++j) a += double(w[size_t((h * m + i) * kRank + j)]) * c[j];
    return a;
  };
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t t = 0; t < n_ctx; ++t) {
      const float* c = rows.data() + t * kRow + kRot;
      for (int64_t i = 0; i < kNope; ++i) kn[size_t(t * kNope + i)] = up(wuk, h, i, kNope, c);
      for (int64_t i = 0; i < kHv; ++i) vv[size_t(t * kHv + i)] = up(wuv, h, i, kHv, c);
    }
    for (int64_t r = 0; r < nq; ++r) {
      const float* qh = q.data() + (r * kHeads + h) * kHd;
      const int64_t n_see = n_ctx - nq + r + 1;
      double mx = -INFINITY, den = 0;
      for (int64_t t = 0; t < n_see; ++t) {
        double a = 0;
        for (int64_t i = 0; i < kNope; ++i) a += double(qh[i]) * kn[size_t(t * kNope + i)];
        for (int64_t i = 0; i < kRot; ++i) a += double(qh[kNope + i]) * rows[size_t(t * kRow + i)];
        sc[size_t(t)] = a * scale;
        mx = std::max(mx, sc[size_t(t)]);
      }
      for (int64_t t = 0; t < n_see; ++t) den += std::exp(sc[size_t(t)] - mx);
      for (int64_t i = 0; i < kHv; ++i) {
        double a = 0;
        for (int64_t t = 0; t < n_see; ++t)
          a += std::exp(sc[size_t(t)] - mx) * vv[size_t(t * kHv + i)];
        out[size_t((r * kHeads + h) * kHv + i)] = a / den;
      }
    }
  }
  return out;
}

/// Runs a context of n_ctx positions through the absorbed path (the seam ops of
/// mla_attention_block, without RoPE: k_pe and q_pe stand for already rotated values) and the
/// expanded one in double, and returns max |difference| / max |expanded| over the last n_q rows.
double absorbed_vs_expanded(const MlaCase& c, int64_t n_ctx, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t nq = c.n_q, p0 = n_ctx - nq;
  // Weights: attn_kv_b's K rows W_UK[h] (nope × r) and V rows W_UV[h] (hv × r).
  const std::vector<float> wuk = randn(rng, size_t(kHeads * kNope * kRank), 1.0 / 8);
  const std::vector<float> wuv = randn(rng, size_t(kHeads * kHv * kRank), 1.0 / 8);
  // The model's wk_b (per head the transpose of W_UK: r rows of nope) and wv_b (W_UV as it is).
  std::vector<float> wkb(wuk.size());
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t i = 0; i < kNope; ++i)
      for (int64_t j = 0; j < kRank; ++j)
        wkb[size_t((h * kRank + j) * kNope + i)] = wuk[size_t((h * kNope + i) * kRank + j)];
  std::vector<float> wvb = wuv;
  const Tensor wk_b = Tensor::contiguous(DType::F32, wkb.data(), kNope, kRank, kHeads);
  const Tensor wv_b = Tensor::contiguous(DType::F32, wvb.data(), kRank, kHv, kHeads);
  // Every position's cached row [k_pe | latent] and the queries [n_q, heads, nope + rope].
  const std::vector<float> rows = randn(rng, size_t(n_ctx * kRow), 1.0);
  const std::vector<float> q = randn(rng, size_t(nq * kHeads * kHd), 1.0);
  const float scale = 1.0f / std::sqrt(float(kHd));

  // The cache: one K row per position, V the latent inside it.
  const int64_t n_blocks = (n_ctx + kBs - 1) / kBs;
  KvLayer kv;
  kv.k_type = kv.v_type = c.type;
  kv.k_row_bytes = kv.v_row_bytes = kv_row_bytes(c.type, 1, kRow);
  kv.block_size = kBs;
  Buffer store(size_t(n_blocks * kBs * kv.k_row_bytes));
  kv.k = static_cast<uint8_t*>(store.data());
  kv.v = kv.k + kv_row_bytes(c.type, 1, kRot);
  kv.mla = true;
  PagedAttnParams ap;
  ap.attn = {kHeads, 1, kRow, kRank, scale};
  ap.flash = c.flash;
  auto be = cpu_device().make_backend(2);
  {  // the context before the queries, stored by an earlier step
    OneSeq s(0, p0);
    be->begin_step(s.pt);
    if (p0 > 0) be->kv_store(kv, ap, rows.data(), nullptr);
  }
  OneSeq s(p0, nq);
  be->begin_step(s.pt);
  be->kv_store(kv, ap, rows.data() + p0 * kRow, nullptr);
  // Absorbed: q_abs = wk_b · q_nope per head, query [q_pe | q_abs], attention, wv_b per head.
  std::vector<float> qn(size_t(nq * kHeads * kNope)), qabs(size_t(nq * kHeads * kRank));
  std::vector<float> qm(size_t(nq * kHeads * kRow)), lat(size_t(nq * kHeads * kRank));
  std::vector<float> out(size_t(nq * kHeads * kHv));
  std::vector<int32_t> ids(size_t(nq * kHeads));
  for (int64_t i = 0; i < nq * kHeads; ++i) ids[size_t(i)] = int32_t(i % kHeads);
  be->copy_strided(q.data(), kHd, qn.data(), kNope, nq * kHeads, kNope);
  be->matmul_id(wk_b, qn.data(), true, ids.data(), nullptr, nq, kHeads, qabs.data(), nullptr);
  be->copy_strided(q.data() + kNope, kHd, qm.data(), kRow, nq * kHeads, kRot);
  be->copy_strided(qabs.data(), kRank, qm.data() + kRot, kRow, nq * kHeads, kRank);
  be->paged_attention(kv, ap, qm.data(), lat.data());
  be->matmul_id(wv_b, lat.data(), true, ids.data(), nullptr, nq, kHeads, out.data(), nullptr);

  // Expanded, in double, over the rows as stored (decoded from the cache type).
  std::vector<float> dec(size_t(n_ctx * kRow));
  for (int64_t t = 0; t < n_ctx; ++t)
    kv_decode_row(c.type, 1, kRow, kv.k + t * kv.k_row_bytes, dec.data() + t * kRow);
  const std::vector<double> ref = expanded_attention(wuk, wuv, dec, q, n_ctx, nq, scale);
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(ref[i]));
    max_diff = std::max(max_diff, std::abs(ref[i] - double(out[i])));
  }
  return max_diff / max_ref;
}

std::string mla_case_name(const ::testing::TestParamInfo<MlaCase>& info) {
  const MlaCase& c = info.param;
  return std::string(kv_type_name(c.type)) + (c.flash ? "_flash_" : "_exact_") +
         std::to_string(c.n_q);
}

class MlaAbsorbed : public ::testing::TestWithParam<MlaCase> {};

// 1100 positions: two 512-position decode segments merged by their log-sum-exp and a partial
// third, 69 blocks; the last n_q positions are queries (1: decode; 3: a small flash tile; 40:
// the large-tile path), both softmax schemes. f32 and bf16 rows: only float summation order
// separates the two (measured ≤ 6.5e-7 relative, at every kernel level); f16 / q8_0 / q4_0 rows:
// the expanded side uses the stored (rounded) rows too, so what remains is the kernels' rounding
// of the absorbed query to K's dot type (f16: ≤ 2.4e-4; q8_0 blocks for a q8_0 / q4_0 K:
// ≤ 7.8e-3).
TEST_P(MlaAbsorbed, EqualsExpandedAttentionOverALongContext) {
  const MlaCase& c = GetParam();
  const double rel = absorbed_vs_expanded(c, 1100, 7);
  std::cout << "[ mla      ] " << mla_case_name({c, 0}) << ": max |absorbed − expanded| / max "
            << "|expanded| = " << rel << "\n";
  EXPECT_LT(rel, c.tol) << kv_type_name(c.type) << (c.flash ? " flash" : " exact") << " n_q "
                        << c.n_q;
}

INSTANTIATE_TEST_SUITE_P(
    Types, MlaAbsorbed,
    ::testing::Values(MlaCase{DType::F32, true, 1, 2e-6}, MlaCase{DType::F32, false, 1, 2e-6},
                      MlaCase{DType::F32, true, 3, 2e-6}, MlaCase{DType::F32, true, 40, 2e-6},
                      MlaCase{DType::F32, false, 40, 2e-6}, MlaCase{DType::F16, true, 1, 1e-3},
                      MlaCase{DType::F16, false, 1, 1e-3}, MlaCase{DType::F16, true, 40, 1e-3},
                      MlaCase{DType::BF16, true, 1, 2e-6}, MlaCase{DType::Q8_0, true, 1, 2e-2},
                      MlaCase{DType::Q8_0, false, 3, 2e-2}, MlaCase{DType::Q4_0, true, 1, 2e-2}),

    mla_case_name);

// A deepseek2 Hparams of DeepSeek-V2-Lite's attention shape (27 layers, 16 heads of 192 / 128,
// kv_lora_rank 512, 64 RoPE dims).
Hparams v2_lite() {
  Hparams hp;
  hp.arch = "deepseek2";
  hp.n_layer = 27;
  hp.n_embd = 2048;
  hp.n_head = hp.n_head_kv = 16;
  hp.head_dim = 192;
  hp.head_dim_v = 128;
  hp.rope.n_rot = 64;
  hp.kv_lora_rank = 512;
  return hp;
}

// MLA's bytes per token: n_layer × (kv_lora_rank + n_rot) values in the cache type, no V rows.
TEST(MlaKvCache, BytesPerTokenAreTheLatentAndRopePartPerLayer) {
  const Hparams hp = v2_lite();
  const std::pair<DType, double> per_value[] = {{DType::F32, 4},
                                                {DType::F16, 2},
                                                {DType::BF16, 2},
                                                {DType::Q8_0, 34.0 / 32},
                                                {DType::Q4_0, 18.0 / 32}};
  for (const auto& [t, bytes] : per_value) {
    KvCacheParams p;
    p.type_k = p.type_v = t;
    p.mem_bytes = int64_t(64) << 20;
    KvCache cache(hp, p);
    const int64_t want = int64_t(std::llround(27 * (512 + 64) * bytes));
    EXPECT_EQ(cache.bytes_per_token(), want) << kv_type_name(t);
    EXPECT_EQ(cache.bytes_per_block(), 16 * want) << kv_type_name(t);
    const KvLayer L = cache.layer(3);
    EXPECT_TRUE(L.mla);
    EXPECT_EQ(L.k_row_bytes, want / 27);
    EXPECT_EQ(L.v, L.k + kv_row_bytes(t, 1, 64));  // the latent after the RoPE part
  }
  // The f16 cache of the same attention without MLA (16 heads of K 192 and V 128): 276480 bytes
  // per token; with MLA 31104 (88.75% less).
  Hparams plain = hp;
  plain.kv_lora_rank = 0;
  EXPECT_EQ(kv_bytes_per_token(DType::F16, DType::F16, 27, 16, 192, 128), 276480);
  KvCacheParams p;
  p.mem_bytes = int64_t(64) << 20;  // f16 K (and V, unused) by default
  EXPECT_EQ(KvCache(hp, p).bytes_per_token(), 31104);
  EXPECT_EQ(KvCache(plain, p).bytes_per_token(), 276480);
}

TEST(MlaKvCache, TypesThatCannotHoldTheLatentAndRotationAreRefused) {
  const Hparams hp = v2_lite();
  for (DType t : {DType::FP8_E4M3, DType::FP8_E5M2, DType::NVFP4}) {
    KvCacheParams p;
    p.type_k = t;
    p.mem_bytes = int64_t(64) << 20;
    EXPECT_THROW(KvCache(hp, p), std::invalid_argument) << kv_type_name(t);
  }
  KvCacheParams p;
  p.rotate = true;
  p.mem_bytes = int64_t(64) << 20;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
  // The kernels refuse an MLA layer whose latent would start inside a q8_0 block.
  KvLayer kv;
  kv.k_type = kv.v_type = DType::Q8_0;
  kv.k_row_bytes = kv.v_row_bytes = kv_row_bytes(DType::Q8_0, 1, 80);
  kv.mla = true;
  Buffer b(size_t(kv.k_row_bytes * 16));
  kv.k = static_cast<uint8_t*>(b.data());
  kv.v = kv.k;
  PagedAttnParams ap;
  ap.attn = {4, 1, 80, 64, 1.0f};  // RoPE part 16: not a whole block
  std::vector<int32_t> seq{0, 1}, blocks{0, 1}, ids{0}, last{1}, pos{0};
  std::vector<int64_t> slot{0};
  const PageTable pt{1,          1,           16,         seq.data(), blocks.data(),
                     ids.data(), last.data(), pos.data(), slot.data()};
  auto be = cpu_device().make_backend(1);
  be->begin_step(pt);
  std::vector<float> x(80 * 4);
  EXPECT_THROW(be->kv_store(kv, ap, x.data(), nullptr), std::invalid_argument);
}

// `kvrun info`'s numbers (describe_model) for a deepseek2 file: the MLA row per layer, and only
// the cache types that can hold it.
TEST(MlaKvCache, ModelInfoReportsTheMlaBytes) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-deepseek2", SynthFileType::F32);
  const gguf::File f = gguf::File::open(path);
  const ModelInfo mi = describe_model(f, 256);
  EXPECT_EQ(mi.hp.kv_lora_rank, 64);
  EXPECT_EQ(mi.hp.rope.n_rot, 32);
  ASSERT_EQ(mi.kv.size(), 5u);  // f32, f16, bf16, q8_0, q4_0
  for (const KvSizeEntry& e : mi.kv) {
    EXPECT_EQ(e.bytes_per_token, 4 * kv_row_bytes(e.type, 1, 64 + 32)) << kv_type_name(e.type);
    EXPECT_EQ(e.bytes_total, e.bytes_per_token * 256);
  }
  EXPECT_EQ(mi.kv[1].bytes_per_token, 4 * (64 + 32) * 2);  // f16: 768 bytes per token
}

// A deepseek2 context saved and restored (its state holds the MLA rows only, no V rows of
// their own) continues exactly as the original, in f16 and q8_0 caches.
TEST(MlaKvCache, ContextStateRoundTripsTheLatentRows) {
  test::TempDir dir;
  const Model m = Model::load(test::synth_model(dir, "tiny-deepseek2", SynthFileType::F32));
  for (DType t : {DType::F16, DType::Q8_0}) {
    ContextParams cp;
    cp.n_ctx = 128;
    cp.n_threads = 2;
    cp.kv.type_k = t;
    Context a(m, cp);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back(int32_t((i * 11 + 5) % 500));
    a.eval(prompt);
    std::stringstream state;
    write_context_state(state, a);
    Context b(m, cp);
    read_context_state(state, b, prompt);
    const int32_t next = 7;
    const std::span<const float> la = a.eval(std::span<const int32_t>(&next, 1));
    const std::vector<float> want(la.begin(), la.end());
    const std::span<const float> lb = b.eval(std::span<const int32_t>(&next, 1));
    ASSERT_EQ(lb.size(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), lb.begin())) << kv_type_name(t);
  }
}

}  // namespace
}  // namespace kvrun

// test_vulkan_paged.cpp — the Vulkan KV store and paged attention through the seam, against
// the CPU (the KV bytes must equal the CPU encoder's; attention by NMSE against the CPU's flash
// attention and against float64 over the decoded cache), and the KV cache with its rows on the
// Vulkan device. Inputs random, outputs poisoned first; see test_vulkan_ops.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "dtype.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "paged_attention_test_util.h"
#include "test_util.h"
#include "vulkan_test_util.h"

namespace kvrun {
namespace {

using namespace vktest;

// ---- paged KV: store and attention ----

/// A step over a paged cache: sequences given as (pos0, n_q), each with a block table over
/// shuffled slots; the host cache bytes (0xAB where nothing was written), the step's PageTable
/// and the CPU's per-sequence view of it.
struct PagedSetup {
  PagedAttnParams p;
  int64_t bs, n_rows = 0, n_slots = 0;
  std::vector<int32_t> seq_indptr{0}, block_indptr{0}, block_ids, pos;
  std::vector<PagedSeq> seqs;
  std::vector<uint8_t> k, v;  ///< [n_slots][bs][row bytes]
  KvLayer kv;                 ///< over k, v (host)
  PageTable pt;

  PagedSetup(DType kt, DType vt, int64_t n_head, int64_t hkv, int64_t hd, int64_t block_size,
             const std::vector<std::pair<int64_t, int64_t>>& shapes, uint32_t seed)
      : bs(block_size) {
    p.attn = {n_head, hkv, hd, hd, 1.0f / std::sqrt(float(hd))};
    for (const auto& [pos0, n_q] : shapes) n_slots += (pos0 + n_q + bs - 1) / bs;
    std::vector<int32_t> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
    for (const auto& [pos0, n_q] : shapes) {
      const int64_t nb = (pos0 + n_q + bs - 1) / bs;
      block_ids.insert(block_ids.end(), slots.begin() + block_indptr.back(),
                       slots.begin() + block_indptr.back() + nb);
      block_indptr.push_back(block_indptr.back() + int32_t(nb));
      for (int64_t i = 0; i < n_q; ++i) pos.push_back(int32_t(pos0 + i));
      n_rows += n_q;
      seq_indptr.push_back(int32_t(n_rows));
    }
    for (size_t s = 0; s < shapes.size(); ++s)
      seqs.push_back(
          {block_ids.data() + block_indptr[s], shapes[s].first, seq_indptr[s], shapes[s].second});
    kv.k_type = kt;
    kv.v_type = vt;
    kv.k_row_bytes = kv_row_bytes(kt, hkv, hd);
    kv.v_row_bytes = kv_row_bytes(vt, hkv, hd);
    kv.block_size = bs;
    k.assign(size_t(n_slots * bs * kv.k_row_bytes), 0xAB);
    v.assign(size_t(n_slots * bs * kv.v_row_bytes), 0xAB);
    kv.k = k.data();
    kv.v = v.data();
    pt.n_seqs = int64_t(shapes.size());
    pt.n_tokens = n_rows;
    pt.block_size = bs;
    pt.seq_indptr = seq_indptr.data();
    pt.block_indptr = block_indptr.data();
    pt.block_ids = block_ids.data();
    pt.pos = pos.data();
  }
  int64_t kv_width() const { return p.attn.n_head_kv * p.attn.head_dim; }
};

/// K and V rows with a spread of magnitudes per head.
std::vector<float> kv_values(int64_t rows, int64_t width, uint32_t seed) {
  std::vector<float> x = test::random_floats(size_t(rows * width), seed);
  for (int64_t i = 0; i < rows * width; ++i) x[size_t(i)] *= std::ldexp(1.0f, int(i / 8 % 7) - 3);
  return x;
}

/// The device copy of a setup's cache and the KvLayer pointing at it.
struct DevCache {
  std::unique_ptr<DeviceBuffer> k, v;
  KvLayer kv;
  explicit DevCache(const PagedSetup& ps) : kv(ps.kv) {
    k = vk_device()->alloc(ps.k.size(), BufferUse::kKv);
    v = vk_device()->alloc(ps.v.size(), BufferUse::kKv);
    vk().upload(k->data(), ps.k.data(), ps.k.size());
    vk().upload(v->data(), ps.v.data(), ps.v.size());
    kv.k = static_cast<uint8_t*>(k->data());
    kv.v = static_cast<uint8_t*>(v->data());
  }
};

/// A setup's cache on the device split across two tiers (KvLayer::slot_of, n_fast, k_slow):
/// every third block id (1, 4, 7, …) in the host tier (BufferUse::kKvHost: host memory the
/// shaders address in place), the others in device memory, slots in a different order than the
/// ids. Starts as the setup's host bytes.
struct TieredCache {
  std::unique_ptr<DeviceBuffer> k, v, k_host, v_host;
  std::vector<int32_t> slot_of;
  KvLayer kv;
  size_t kb, vb;  // bytes of one block's K / V rows
  explicit TieredCache(const PagedSetup& ps) : kv(ps.kv) {
    kb = size_t(ps.bs * ps.kv.k_row_bytes);
    vb = size_t(ps.bs * ps.kv.v_row_bytes);
    std::vector<int32_t> fast, slow;
    for (int32_t id = int32_t(ps.n_slots); id-- > 0;) (id % 3 == 1 ? slow : fast).push_back(id);
    slot_of.assign(size_t(ps.n_slots), -1);
    for (size_t i = 0; i < fast.size(); ++i) slot_of[size_t(fast[i])] = int32_t(i);
    for (size_t i = 0; i < slow.size(); ++i) slot_of[size_t(slow[i])] = int32_t(fast.size() + i);
    k = vk_device()->alloc(std::max<size_t>(fast.size(), 1) * kb, BufferUse::kKv);
    v = vk_device()->alloc(std::max<size_t>(fast.size(), 1) * vb, BufferUse::kKv);
    k_host = vk_device()->alloc(std::max<size_t>(slow.size(), 1) * kb, BufferUse::kKvHost);
    v_host = vk_device()->alloc(std::max<size_t>(slow.size(), 1) * vb, BufferUse::kKvHost);
    kv.k = static_cast<uint8_t*>(k->data());
    kv.v = static_cast<uint8_t*>(v->data());
    kv.k_slow = static_cast<uint8_t*>(k_host->data());
    kv.v_slow = static_cast<uint8_t*>(v_host->data());
    kv.slot_of = slot_of.data();
    kv.n_fast = int64_t(fast.size());
    for (int32_t id = 0; id < int32_t(ps.n_slots); ++id) {
      put(id, false, ps.k.data() + size_t(id) * kb);
      put(id, true, ps.v.data() + size_t(id) * vb);
    }
    vk().synchronize();
  }
  bool in_host_tier(int32_t id) const { return slot_of[size_t(id)] >= kv.n_fast; }
  /// Block id's K (or V) rows as the host reads a host-tier block: in its mapping.
  uint8_t* host_rows(int32_t id, bool is_v) const {
    const size_t off = size_t(slot_of[size_t(id)] - kv.n_fast) * (is_v ? vb : kb);
    return static_cast<uint8_t*>((is_v ? v_host : k_host)->host_data()) + off;
  }
  void put(int32_t id, bool is_v, const uint8_t* src) {
    const size_t n = is_v ? vb : kb;
    if (in_host_tier(id))
      std::memcpy(host_rows(id, is_v), src, n);
    else
      vk().upload(is_v ? kv.v_block(id) : kv.k_block(id), src, n);
  }
  /// Every block's K (or V) rows in id order (the setup's identity layout), read where they lie.
  std::vector<uint8_t> bytes(int64_t n_ids, bool is_v) const {
    const size_t n = is_v ? vb : kb;
    std::vector<uint8_t> out(size_t(n_ids) * n);
    vk().synchronize();
    for (int32_t id = 0; id < int32_t(n_ids); ++id) {
      if (in_host_tier(id))
        std::memcpy(out.data() + size_t(id) * n, host_rows(id, is_v), n);
      else
        vk().download(out.data() + size_t(id) * n, is_v ? kv.v_block(id) : kv.k_block(id), n);
    }
    return out;
  }
};

struct KvCase {
  DType k, v;
  int variant;
};

void PrintTo(const KvCase& c, std::ostream* os) {
  *os << traits(c.k).name << "_" << traits(c.v).name << "_v" << c.variant;
}

std::string kv_case_name(const testing::TestParamInfo<KvCase>& i) {
  return std::string(traits(i.param.k).name) + "_" + traits(i.param.v).name + "_v" +
         std::to_string(i.param.variant);
}

const KvCase kKvPairs[] = {
    {DType::F16, DType::F16, 0},           {DType::F32, DType::F32, 0},
    {DType::BF16, DType::BF16, 0},         {DType::F16, DType::BF16, 0},
    {DType::Q8_0, DType::Q8_0, 0},         {DType::F16, DType::Q8_0, 0},
    {DType::FP8_E4M3, DType::FP8_E4M3, 0}, {DType::FP8_E5M2, DType::FP8_E5M2, 0},
    {DType::Q8_0, DType::FP8_E4M3, 0},     {DType::Q4_0, DType::Q4_0, 0},
    {DType::F16, DType::Q4_0, 0},          {DType::NVFP4, DType::NVFP4, 0},
    {DType::NVFP4, DType::F32, 0},         {DType::NVFP4, DType::F16, 0},
    {DType::NVFP4, DType::BF16, 0},        {DType::NVFP4, DType::Q8_0, 0},
    {DType::NVFP4, DType::Q4_0, 0},        {DType::NVFP4, DType::FP8_E4M3, 0},
    {DType::NVFP4, DType::FP8_E5M2, 0},    {DType::F32, DType::NVFP4, 0},
    {DType::F16, DType::NVFP4, 0},         {DType::BF16, DType::NVFP4, 0},
    {DType::Q8_0, DType::NVFP4, 0},        {DType::Q4_0, DType::NVFP4, 0},
    {DType::FP8_E4M3, DType::NVFP4, 0},    {DType::FP8_E5M2, DType::NVFP4, 0}};

/// Whether the pair has a block-scaled type (q8_0, q4_0, fp8, nvfp4): the store test adds a
/// wide-scale shape.
bool is_q8(const KvCase& c) {
  auto scaled = [](DType t) {
    return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::FP8_E4M3 || t == DType::FP8_E5M2 ||
           t == DType::NVFP4;
  };
  return scaled(c.k) || scaled(c.v);
}

class VulkanKvStore : public testing::TestWithParam<KvCase> {};

/// Variants: 0 n_head_kv 2 × head_dim 64 (two sequences, one crossing blocks), 1 n_head_kv 3 ×
/// head_dim 8 (one q8_0 block per row, padded: rows start 2 bytes into a word), 2 n_head_kv 2
/// × head_dim 40 (three q8_0 blocks), 3 n_head_kv 4 × head_dim 16 (q8_0 blocks span heads),
/// 4 (block-scaled types only) 512 rows of n_head_kv 8 × head_dim 64 with block scales spread
/// over 2^±20.
/// The cache bytes must equal the CPU encoder's (0xAB bytes where nothing is written).
TEST_P(VulkanKvStore, WritesTheCpuBytes) {
  REQUIRE_VULKAN();
  const KvCase c = GetParam();
  const int64_t hkv = c.variant == 1 ? 3 : c.variant == 3 ? 4 : c.variant == 4 ? 8 : 2;
  const int64_t hd = c.variant == 1 ? 8 : c.variant == 2 ? 40 : c.variant == 3 ? 16 : 64;
  PagedSetup ps(c.k, c.v, hkv, hkv, hd, 16,
                c.variant == 4 ? std::vector<std::pair<int64_t, int64_t>>{{0, 512}}
                               : std::vector<std::pair<int64_t, int64_t>>{{5, 20}, {0, 3}},
                71);
  std::vector<float> k = kv_values(ps.n_rows, ps.kv_width(), 72);
  std::vector<float> v = kv_values(ps.n_rows, ps.kv_width(), 73);
  if (c.variant == 4)  // 16384 blocks with scales over 2^-20 … 2^20: the q8_0 / nvfp4 divisions
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] *= std::ldexp(1.0f, int(i / 32 * 7919 % 41) - 20);
      v[i] *= std::ldexp(1.0f, int(i / 32 * 104729 % 41) - 20);
    }
  // Rounding ties of f16 and bf16 (to even, down and up), f16 subnormals and their ties,
  // overflow to inf, an infinity and a NaN: where a converter that is not the CPU's would differ.
  const float specials[] = {1.0f + 0x1p-11f,
                            1.0f + 3 * 0x1p-11f,
                            -(1.0f + 0x1p-11f),
                            1.0f + 0x1p-8f,
                            1.0f + 3 * 0x1p-8f,
                            0x1p-20f + 0x1p-25f,
                            0x1p-24f,
                            0x1p-25f,
                            0x1p-25f + 0x1p-40f,
                            70000.0f,
                            -INFINITY,
                            std::nanf("")};
  // (q8_0 / q4_0 of an inf or NaN is undefined on the CPU too: those two stay out.)
  auto blocks32 = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0; };
  const size_t n_special = blocks32(c.k) || blocks32(c.v) ? 10 : 12;
  std::copy_n(std::begin(specials), n_special, k.begin());
  std::copy_n(std::begin(specials), n_special, v.begin() + ps.kv_width());
  std::fill_n(k.begin() + 2 * ps.kv_width(), 32, 0.0f);  // an all-zero block (amax 0)
  DevCache dc(ps);
  cpu::paged_kv_store(ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), k.data(), v.data());
  vk().begin_step(ps.pt);
  auto dk = to_dev(k), dv = to_dev(v);
  vk().kv_store(dc.kv, ps.p, fp(dk), fp(dv));
  std::vector<uint8_t> got_k(ps.k.size()), got_v(ps.v.size());
  vk().download(got_k.data(), dc.k->data(), got_k.size());
  vk().download(got_v.data(), dc.v->data(), got_v.size());
  const auto mk = std::mismatch(got_k.begin(), got_k.end(), ps.k.begin());
  EXPECT_TRUE(mk.first == got_k.end()) << "K byte " << (mk.first - got_k.begin()) << " differs";
  const auto mv = std::mismatch(got_v.begin(), got_v.end(), ps.v.begin());
  EXPECT_TRUE(mv.first == got_v.end()) << "V byte " << (mv.first - got_v.begin()) << " differs";
}

/// KV rows that are not in the device's memory (here: the host copy) are refused, never read
/// or written by a shader.
TEST(VulkanOps, KvRowsOutsideTheDeviceAreRefused) {
  REQUIRE_VULKAN();
  PagedSetup ps(DType::F16, DType::F16, 2, 2, 64, 16, {{0, 3}}, 5);
  const std::vector<float> k = kv_values(ps.n_rows, ps.kv_width(), 6);
  auto dk = to_dev(k), dout = poisoned(size_t(ps.n_rows * ps.kv_width()));
  vk().begin_step(ps.pt);
  EXPECT_THROW(vk().kv_store(ps.kv, ps.p, fp(dk), fp(dk)), std::invalid_argument);
  EXPECT_THROW(vk().paged_attention(ps.kv, ps.p, fp(dk), fp(dout)), std::invalid_argument);
}

/// Whether the pair's nvfp4 (if any) is not already stressed at wide scales by another pair:
/// variant 4 runs once for nvfp4, as nvfp4_nvfp4 (lavapipe time in CI).
bool nvfp4_once(const KvCase& c) { return (c.k == DType::NVFP4) == (c.v == DType::NVFP4); }

std::vector<KvCase> kv_store_cases() {
  std::vector<KvCase> out;
  for (const KvCase& c : kKvPairs)
    for (int variant : {0, 1, 2, 3, 4})
      if (variant < 4 || (is_q8(c) && nvfp4_once(c))) out.push_back({c.k, c.v, variant});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanKvStore, testing::ValuesIn(kv_store_cases()), kv_case_name);

class VulkanAttention : public testing::TestWithParam<KvCase> {};

/// Variants: 0 one decode at context 3000 (6 segments merged by log-sum-exp), GQA 4/2, head_dim
/// 64; 1 a 37-token prefill and a 2-token continuation, head_dim 128, blocks of 32; 2 head_dim 8
/// without GQA (the fixtures' shape); 3 a 700-token decode and a 3-token continuation with a
/// 100-position window and soft-capping. The cache is filled by the CPU encoder; the reference
/// is the CPU's flash attention, and float64 over the decoded cache.
/// Encodes random K and V rows for every position of every sequence into the setup's host cache
/// (the CPU encoder) and returns the decoded cells [n_slots · bs][kv_width] of K and of V.
std::pair<std::vector<float>, std::vector<float>> fill_cache(PagedSetup& ps) {
  const int64_t w = ps.kv_width(), hkv = ps.p.attn.n_head_kv, hd = ps.p.attn.head_dim;
  std::vector<float> kdec(size_t(ps.n_slots * ps.bs * w)), vdec(kdec.size());
  for (size_t s = 0; s < ps.seqs.size(); ++s) {
    const int64_t n_pos = ps.seqs[s].pos0 + ps.seqs[s].n_q;
    const std::vector<float> k = kv_values(n_pos, w, 100 + uint32_t(s));
    const std::vector<float> v = kv_values(n_pos, w, 200 + uint32_t(s));
    for (int64_t j = 0; j < n_pos; ++j) {
      const int32_t id = ps.seqs[s].block_table[j / ps.bs];
      const int64_t cell = id * ps.bs + j % ps.bs;
      uint8_t* krow = ps.kv.k_block(id) + (j % ps.bs) * ps.kv.k_row_bytes;
      uint8_t* vrow = ps.kv.v_block(id) + (j % ps.bs) * ps.kv.v_row_bytes;
      kv_encode_row(ps.kv.k_type, hkv, hd, k.data() + j * w, krow);
      kv_encode_row(ps.kv.v_type, hkv, hd, v.data() + j * w, vrow);
      kv_decode_row(ps.kv.k_type, hkv, hd, krow, kdec.data() + cell * w);
      kv_decode_row(ps.kv.v_type, hkv, hd, vrow, vdec.data() + cell * w);
    }
  }
  return {kdec, vdec};
}

/// Causal attention of q in float64 over the decoded cells (window and soft-cap included).
std::vector<double> attention_f64(const PagedSetup& ps, const std::vector<float>& q,
                                  const std::vector<float>& kdec, const std::vector<float>& vdec) {
  const AttnParams& a = ps.p.attn;
  const int64_t hd = a.head_dim, qw = a.n_head * hd, w = ps.kv_width();
  std::vector<double> out(q.size());
  for (const PagedSeq& s : ps.seqs)
    for (int64_t i = 0; i < s.n_q; ++i) {
      const int64_t row = s.q0 + i, p = s.pos0 + i;
      const int64_t lo = ps.p.window > 0 ? std::max<int64_t>(0, p - ps.p.window + 1) : 0;
      for (int64_t h = 0; h < a.n_head; ++h) {
        const int64_t hk = h / (a.n_head / a.n_head_kv);
        std::vector<double> sc, acc(size_t(hd), 0.0);
        double mx = -INFINITY, l = 0;
        auto cell = [&](int64_t j) { return s.block_table[j / ps.bs] * ps.bs + j % ps.bs; };
        for (int64_t j = lo; j <= p; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e)
            d += double(q[size_t(row * qw + h * hd + e)]) * kdec[size_t(cell(j) * w + hk * hd + e)];
          d *= a.scale;
          if (ps.p.softcap > 0) d = ps.p.softcap * std::tanh(d / ps.p.softcap);
          sc.push_back(d);
          mx = std::max(mx, d);
        }
        for (int64_t j = lo; j <= p; ++j) {
          const double wt = std::exp(sc[size_t(j - lo)] - mx);
          l += wt;
          for (int64_t e = 0; e < hd; ++e)
            acc[size_t(e)] += wt * vdec[size_t(cell(j) * w + hk * hd + e)];
        }
        for (int64_t e = 0; e < hd; ++e) out[size_t(row * qw + h * hd + e)] = acc[size_t(e)] / l;
      }
    }
  return out;
}

TEST_P(VulkanAttention, MatchesTheCpuAndFloat64) {
  REQUIRE_VULKAN();
  const KvCase c = GetParam();
  struct Shape {
    int64_t n_head, hkv, hd, bs;
    std::vector<std::pair<int64_t, int64_t>> seqs;
  };
  const Shape shapes[] = {{4, 2, 64, 16, {{2999, 1}}},
                          {4, 2, 128, 32, {{0, 37}, {40, 2}}},
                          {8, 8, 8, 16, {{0, 5}, {17, 1}}},
                          {4, 1, 64, 16, {{699, 1}, {300, 3}}}};
  const Shape& sh = shapes[c.variant];
  PagedSetup ps(c.k, c.v, sh.n_head, sh.hkv, sh.hd, sh.bs, sh.seqs, 91);
  if (c.variant == 3) {
    ps.p.window = 100;
    ps.p.softcap = 30.0f;
  }
  const auto [kdec, vdec] = fill_cache(ps);
  const std::vector<float> q = test::random_floats(size_t(ps.n_rows * sh.n_head * sh.hd), 93);
  std::vector<float> ref(q.size());
  cpu::ThreadPool pool(1);
  cpu::paged_attention(pool, ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), q.data(),
                       ref.data());
  const std::vector<double> exact = attention_f64(ps, q, kdec, vdec);
  DevCache dc(ps);
  vk().begin_step(ps.pt);
  auto dq = to_dev(q), dout = poisoned(q.size());
  vk().paged_attention(dc.kv, ps.p, fp(dq), fp(dout));
  const std::vector<float> got = from_dev(*dout, q.size());
  const double e_ref = nmse(got, ref), e_exact = nmse(got, exact);
  record("nmse_ref", e_ref);
  record("nmse_exact", e_exact);
  // The CPU rounds Q to f16 for an f16 K (docs/cuda.md: ~7e-8 against float64) and to q8_0
  // for a q8_0 or q4_0 K (~3.5e-5).
  const bool q8_q = c.k == DType::Q8_0 || c.k == DType::Q4_0;
  EXPECT_LE(e_ref, c.k == DType::F16 ? 1e-6 : q8_q ? 2e-4 : 1e-9);
  EXPECT_LE(e_exact, 1e-9);
}

std::vector<KvCase> attention_cases() {
  std::vector<KvCase> out;
  for (const KvCase& c : kKvPairs)
    for (int variant : {0, 1, 2, 3})  // the long context (0) once for nvfp4 (lavapipe time)
      if (variant > 0 || nvfp4_once(c)) out.push_back({c.k, c.v, variant});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanAttention, testing::ValuesIn(attention_cases()), kv_case_name);

/// --kv-host-attn cpu over `tc` (filled, the step begun): the device's states over its own
/// blocks (KvTier::kFast) merged on the device (attn_merge) with (1) its states over the host
/// tier and (2) the CPU's, read at the host tier's host addresses, against the one-pass output
/// `one`: (1) up to the f32 merge's rounding, (2) within `bound` (the CPU's own conversions).
void check_split_by_tier(const PagedSetup& ps, const TieredCache& tc, const std::vector<float>& q,
                         const std::unique_ptr<DeviceBuffer>& dq, const std::vector<float>& one,
                         double bound) {
  const AttnParams& a = ps.p.attn;
  const size_t n_st = size_t(ps.n_rows * a.n_head * attn_state_floats(a.head_dim_v));
  auto fast = poisoned(n_st), slow = poisoned(n_st), out = poisoned(one.size());
  vk().paged_attention_part(tc.kv, ps.p, KvTier::kFast, fp(dq), fp(fast));
  vk().paged_attention_part(tc.kv, ps.p, KvTier::kSlow, fp(dq), fp(slow));
  const float* parts[2] = {fp(fast), fp(slow)};
  vk().attn_merge(ps.p, parts, 2, ps.n_rows, fp(out));
  const std::vector<float> device_split = from_dev(*out, one.size());
  EXPECT_LE(nmse(device_split, one), 1e-12) << "device parts merged vs one pass";
  const std::vector<float> cpu_slow =
      cpu::paged_test::host_tier_states(tc.kv, tc.k_host->host_data(), tc.v_host->host_data(), ps.p,
                                        ps.seqs.data(), int64_t(ps.seqs.size()), q.data());
  vk().upload(fp(slow), cpu_slow.data(), n_st * sizeof(float));
  vk().attn_merge(ps.p, parts, 2, ps.n_rows, fp(out));
  const std::vector<float> mixed = from_dev(*out, one.size());
  for (float x : mixed) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LE(nmse(mixed, one), bound) << "device + CPU parts merged vs one pass";
}

class VulkanHostTier : public testing::TestWithParam<KvCase> {};

/// The KV store and attention over a table whose blocks are split between device memory and the
/// host tier (every third block in pinned host memory, read and written in place through its
/// device address): the stored bytes equal the CPU encoder's wherever the block lies, and the
/// attention output equals, bit for bit, that over the same blocks all in device memory; split by
/// tier (paged_attention_part, attn_merge: --kv-host-attn cpu) it follows that output.
/// Variants as VulkanAttention's 0 (a 3000-position decode) and 1 (a prefill and a
/// continuation).
TEST_P(VulkanHostTier, StoreAndAttentionReadBlocksWhereTheyLie) {
  REQUIRE_VULKAN();
  ASSERT_TRUE(vk_device()->supports(Op::kKvHostTier));
  const KvCase c = GetParam();
  const bool decode = c.variant == 0;
  const std::vector<std::pair<int64_t, int64_t>> shape =
      decode ? std::vector<std::pair<int64_t, int64_t>>{{2999, 1}}
             : std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {40, 2}};
  const int64_t hd = decode ? 64 : 128, bs = decode ? 16 : 32;
  PagedSetup ps(c.k, c.v, 4, 2, hd, bs, shape, 91);
  // The store: the step's rows into a partly host-tier table, against the CPU's bytes.
  {
    PagedSetup st(c.k, c.v, 4, 2, hd, bs, shape, 91);  // (the same table, 0xAB bytes)
    TieredCache tc(st);
    const std::vector<float> k = kv_values(st.n_rows, st.kv_width(), 72);
    const std::vector<float> v = kv_values(st.n_rows, st.kv_width(), 73);
    cpu::paged_kv_store(st.kv, st.p, st.seqs.data(), int64_t(st.seqs.size()), k.data(), v.data());
    vk().begin_step(st.pt);
    auto dk = to_dev(k), dv = to_dev(v);
    vk().kv_store(tc.kv, st.p, fp(dk), fp(dv));
    EXPECT_TRUE(tc.bytes(st.n_slots, false) == st.k) << "K bytes differ";
    EXPECT_TRUE(tc.bytes(st.n_slots, true) == st.v) << "V bytes differ";
    int64_t rows_in_host_tier = 0;
    for (int64_t r = 0; r < st.n_rows; ++r) {
      int64_t s = 0;
      while (st.seq_indptr[size_t(s + 1)] <= r) ++s;
      const int32_t id =
          st.block_ids[size_t(st.block_indptr[size_t(s)] + st.pos[size_t(r)] / st.bs)];
      rows_in_host_tier += tc.in_host_tier(id);
    }
    EXPECT_GT(rows_in_host_tier, 0) << "no row of the step was written into the host tier";
  }
  // Attention over a filled cache: the tiered table against all blocks in device memory.
  fill_cache(ps);
  const std::vector<float> q = test::random_floats(size_t(ps.n_rows * 4 * ps.p.attn.head_dim), 93);
  DevCache dc(ps);
  TieredCache tc(ps);
  vk().begin_step(ps.pt);
  auto dq = to_dev(q), d_all = poisoned(q.size()), d_tiered = poisoned(q.size());
  vk().paged_attention(dc.kv, ps.p, fp(dq), fp(d_all));
  vk().paged_attention(tc.kv, ps.p, fp(dq), fp(d_tiered));
  const std::vector<float> all = from_dev(*d_all, q.size()), tiered = from_dev(*d_tiered, q.size());
  std::vector<float> ref(q.size());
  cpu::ThreadPool pool(1);
  cpu::paged_attention(pool, ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), q.data(),
                       ref.data());
  for (float x : tiered) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(0, std::memcmp(all.data(), tiered.data(), all.size() * sizeof(float)));
  const bool q8_q = c.k == DType::Q8_0 || c.k == DType::Q4_0;
  const double bound = c.k == DType::F16 ? 1e-6 : q8_q ? 2e-4 : 1e-9;
  EXPECT_LE(nmse(tiered, ref), bound);
  check_split_by_tier(ps, tc, q, dq, tiered, bound);
}

INSTANTIATE_TEST_SUITE_P(Some, VulkanHostTier,
                         testing::Values(KvCase{DType::F16, DType::F16, 0},
                                         KvCase{DType::F16, DType::F16, 1},
                                         KvCase{DType::Q8_0, DType::Q4_0, 1},
                                         KvCase{DType::FP8_E4M3, DType::BF16, 0}),
                         kv_case_name);

// ---- the KV cache with rows on the device ----

/// The 2-layer GQA shape (4 heads, 2 KV heads, head_dim 32) of the KvCache tests below.
Hparams kv_cache_shape() {
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 2;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = hp.head_dim_v = 32;
  return hp;
}

/// KvCache with its layers' rows on Vulkan: copy_block (copy-on-write) copies them on the
/// device's memory, and --kv-offload-dir (the host would read the rows in place) is refused
/// naming itself.
TEST(VulkanKvCache, CopyOnWriteCopiesDeviceRows) {
  REQUIRE_VULKAN();
  const Hparams hp = kv_cache_shape();
  KvCacheParams p;
  p.type_k = DType::F16;
  p.type_v = DType::Q8_0;
  p.block_size = 16;
  p.mem_bytes =
      4 * p.block_size *
      kv_bytes_per_token(p.type_k, p.type_v, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
  const std::vector<Device*> devs(2, vk_device());
  KvCache cache(hp, p, devs);
  EXPECT_FALSE(cache.rows_on_host());
  const KvLayer L0 = cache.layer(0);
  const size_t kb = size_t(L0.block_size * L0.k_row_bytes),
               vb = size_t(L0.block_size * L0.v_row_bytes);
  std::vector<std::vector<uint8_t>> want;
  for (int64_t il = 0; il < 2; ++il) {
    const KvLayer L = cache.layer(il);
    std::vector<uint8_t> k(kb), v(vb);
    for (size_t i = 0; i < kb; ++i) k[i] = uint8_t(i * 7 + il);
    for (size_t i = 0; i < vb; ++i) v[i] = uint8_t(i * 13 + il);
    vk().upload(L.k_block(1), k.data(), kb);
    vk().upload(L.v_block(1), v.data(), vb);
    want.push_back(k);
    want.push_back(v);
  }
  vk().synchronize();
  cache.copy_block(3, 1);
  for (int64_t il = 0; il < 2; ++il) {
    const KvLayer L = cache.layer(il);
    std::vector<uint8_t> k(kb), v(vb);
    vk().download(k.data(), L.k_block(3), kb);
    vk().download(v.data(), L.v_block(3), vb);
    EXPECT_EQ(k, want[size_t(2 * il)]) << il;
    EXPECT_EQ(v, want[size_t(2 * il + 1)]) << il;
  }
  // The file tier reads rows with the host in place: refused. (--kv-cache-dir moves its blocks
  // through the device's backend: test_gpu_e2e's GpuKvCache.)
  test::TempDir dir;
  KvCacheParams q = p;
  q.offload_dir = dir.path().string();
  try {
    KvCache c(hp, q, devs);
    ADD_FAILURE() << "accepted --kv-offload-dir";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-offload-dir"), std::string::npos) << e.what();
  }
}

/// The host tier of a KvCache on Vulkan (--kv-host-tier): copy_block copies rows between the
/// device's memory and the host tier both ways and within each (what moves between the tiers
/// do, through the device's backend), layer() points the slow tier at the host-tier buffers,
/// and the combinations that cannot work are refused naming the flag.
TEST(VulkanKvCache, HostTierCopiesRowsBetweenTiers) {
  REQUIRE_VULKAN();
  const Hparams hp = kv_cache_shape();
  KvCacheParams p;
  p.type_k = DType::F16;
  p.type_v = DType::Q8_0;
  p.block_size = 16;
  const int64_t per_block =
      p.block_size *
      kv_bytes_per_token(p.type_k, p.type_v, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
  p.mem_bytes = 3 * per_block;
  p.host_tier = true;
  p.offload_max = 4 * per_block;
  const std::vector<Device*> devs(2, vk_device());
  KvCache cache(hp, p, devs);
  const KvTierStats ts = cache.tier_stats();
  EXPECT_EQ(ts.n_fast, 3);
  EXPECT_EQ(ts.n_slow, 4);
  EXPECT_EQ(cache.n_blocks(), 7);
  EXPECT_FALSE(cache.rows_on_host());
  EXPECT_EQ(cache.offload_path(), "host memory (--kv-host-tier)");
  // Block ids 0-2 are fast, 3-6 in the host tier (the identity slot map at the start).
  EXPECT_TRUE(cache.in_fast_tier(2));
  EXPECT_FALSE(cache.in_fast_tier(3));
  const KvLayer L0 = cache.layer(0);
  ASSERT_NE(L0.k_slow, nullptr);
  EXPECT_EQ(L0.n_fast, 3);
  const size_t kb = size_t(L0.block_size * L0.k_row_bytes),
               vb = size_t(L0.block_size * L0.v_row_bytes);
  auto pattern = [](size_t n, int seed) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 7 + size_t(seed) * 31);
    return b;
  };
  auto read = [&](const KvLayer& L, int32_t id, bool is_v) {
    std::vector<uint8_t> b(is_v ? vb : kb);
    vk().download(b.data(), is_v ? L.v_block(id) : L.k_block(id), b.size());
    return b;
  };
  for (int64_t il = 0; il < 2; ++il) {  // block 1 (device memory) gets a pattern
    const KvLayer L = cache.layer(il);
    vk().upload(L.k_block(1), pattern(kb, int(il)).data(), kb);
    vk().upload(L.v_block(1), pattern(vb, int(il) + 2).data(), vb);
  }
  vk().synchronize();
  cache.copy_block(4, 1);  // device memory → host tier
  cache.copy_block(5, 4);  // host tier → host tier
  cache.copy_block(0, 5);  // host tier → device memory
  for (int64_t il = 0; il < 2; ++il) {
    const KvLayer L = cache.layer(il);
    for (int32_t id : {4, 5, 0}) {
      EXPECT_EQ(read(L, id, false), pattern(kb, int(il))) << "layer " << il << " block " << id;
      EXPECT_EQ(read(L, id, true), pattern(vb, int(il) + 2)) << "layer " << il << " block " << id;
    }
  }
  // Synthetic rows (kvrun bench --depth-fill synthetic) over blocks of both tiers: the host
  // tier's written by the host in place, the same bytes as a cache with every block in VRAM.
  KvCacheParams all_fast = p;
  all_fast.host_tier = false;
  all_fast.offload_max = 0;
  all_fast.mem_bytes = 7 * per_block;
  KvCache ref(hp, all_fast, devs);
  const std::vector<int32_t> table = {6, 2, 4, 0, 3, 1, 5};  // 6, 4, 3, 5: host tier
  cache.write_synthetic_rows(table, 5, 100, 42);
  ref.write_synthetic_rows(table, 5, 100, 42);
  auto rows = [](std::vector<uint8_t> b, size_t row, int64_t r0, int64_t r1) {
    return std::vector<uint8_t>(b.begin() + r0 * int64_t(row), b.begin() + r1 * int64_t(row));
  };
  for (int64_t il = 0; il < 2; ++il)
    for (size_t b = 0; b < table.size(); ++b) {  // the rows of positions 5 … 104 only
      const int64_t r0 = std::max<int64_t>(5 - 16 * int64_t(b), 0);
      const int64_t r1 = std::min<int64_t>(105 - 16 * int64_t(b), 16);
      const int32_t id = table[b];
      const size_t kr = size_t(L0.k_row_bytes), vr = size_t(L0.v_row_bytes);
      EXPECT_EQ(rows(read(cache.layer(il), id, false), kr, r0, r1),
                rows(read(ref.layer(il), id, false), kr, r0, r1))
          << id;
      EXPECT_EQ(rows(read(cache.layer(il), id, true), vr, r0, r1),
                rows(read(ref.layer(il), id, true), vr, r0, r1))
          << id;
    }
  // The combinations that cannot work, each naming its flag.
  auto refused = [&](KvCacheParams q, const std::vector<Device*>& d, const std::string& flag) {
    try {
      KvCache c(hp, q, d);
      ADD_FAILURE() << "accepted: " << flag;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  test::TempDir dir;
  KvCacheParams with_file = p;
  with_file.offload_dir = dir.path().string();
  refused(with_file, devs, "--kv-offload-dir");
  KvCacheParams no_budget = p;
  no_budget.offload_max = 0;
  refused(no_budget, devs, "--kv-host-max");
  KvCacheParams tiny = p;
  tiny.offload_max = per_block - 1;
  refused(tiny, devs, "--kv-host-max");
  refused(p, {}, "--kv-host-tier");  // every layer on the CPU
  KvCacheParams file_only = p;
  file_only.host_tier = false;
  file_only.offload_dir = dir.path().string();
  file_only.offload_max = 4 * per_block;
  refused(file_only, devs, "--kv-host-tier");  // the file with a GPU names the host tier
}

}  // namespace
}  // namespace kvrun

// test_vulkan_ops.cpp — every op the Vulkan backend implements, run through the seam
// (Device::upload_weight, alloc, Backend ops, upload/download) on the first Vulkan device and
// compared with the CPU scalar reference (ggml's test-backend-ops idea as a GoogleTest TEST_P).
//
// Each case draws random inputs (never zeros), poisons the device output (NaN) before the op
// runs, and compares with NMSE = Σ(out − ref)² / Σ ref² against a threshold per op and type;
// any NaN fails. matmul is also compared with a float64 evaluation over the same decoded
// weights: the CPU quantizes activations (q8_0 / q8_K, f16, bf16) as llama.cpp does, Vulkan
// keeps them f32, so its distance to float64 is much tighter than its distance to the CPU.
//
// Built only with the Vulkan backend. CTest forces Mesa's lavapipe (VK_ICD_FILENAMES, see
// tests/CMakeLists.txt); run the binary directly to test the machine's own GPU. Without a
// Vulkan device every case skips, naming what the loader reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "dtype.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "tensor.h"
#include "test_util.h"
#include "vulkan/vulkan_backend.h"

namespace kvrun {
namespace {

// ---- the device under test ----

/// The first Vulkan device (software ones included), or null.
Device* vk_device() {
  static Device* dev = [] {
    setenv("KVRUN_VULKAN_SOFTWARE", "1", 0);  // lavapipe is what CI has
    const std::vector<Device*> d = vulkan::devices();
    return d.empty() ? nullptr : d.front();
  }();
  return dev;
}

/// Why there is no device, for the skip message.
std::string no_device_reason() {
  std::string s = "no usable Vulkan device";
  for (const std::string& why : vulkan::skipped_devices()) s += "; " + why;
  return s + " (install mesa-vulkan-drivers for lavapipe)";
}

Backend& vk() {
  static std::unique_ptr<Backend> be = vk_device()->make_backend(0);
  return *be;
}

#define REQUIRE_VULKAN() \
  if (!vk_device()) GTEST_SKIP() << no_device_reason()

/// A device buffer holding `v`.
template <typename T>
std::unique_ptr<DeviceBuffer> to_dev(const std::vector<T>& v) {
  auto b = vk_device()->alloc(v.size() * sizeof(T), BufferUse::kActivations);
  vk().upload(b->data(), v.data(), v.size() * sizeof(T));
  return b;
}

/// A device output of `n` floats, every one NaN until the op writes it.
std::unique_ptr<DeviceBuffer> poisoned(size_t n) {
  return to_dev(std::vector<float>(n, std::nanf("")));
}

std::vector<float> from_dev(const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  vk().download(v.data(), b.data(), n * sizeof(float));
  return v;
}

float* fp(const std::unique_ptr<DeviceBuffer>& b) { return static_cast<float*>(b->data()); }

/// Σ(got − want)² / Σ want²; +inf when got has a NaN or the sizes differ.
double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  return nmse(got, std::vector<double>(want.begin(), want.end()));
}

/// Row-quantized bytes of `rows` × `cols` random values in `t` (the reference encoder).
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> x = test::random_floats(size_t(rows * cols), seed);
  std::vector<uint8_t> q(size_t(*row_bytes(t, cols) * rows));
  traits(t).from_float(x.data(), q.data(), rows * cols);
  return q;
}

/// A weight on the device: a copy of `bytes` uploaded through Device::upload_weight.
struct DevWeight {
  std::vector<uint8_t> host;
  Tensor t;
  std::unique_ptr<DeviceBuffer> buf;
  DevWeight(DType type, std::vector<uint8_t> bytes, int64_t ne0, int64_t ne1)
      : host(std::move(bytes)) {
    t = Tensor::contiguous(type, host.data(), ne0, ne1);
    buf = vk_device()->upload_weight(t, false);
  }
};

void record(const char* key, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  testing::Test::RecordProperty(key, buf);
  std::printf("    %s = %s\n", key, buf);
}

/// The weight types of get_rows and matmul.
const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                              DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// ---- get_rows ----

class VulkanGetRows : public testing::TestWithParam<DType> {};

TEST_P(VulkanGetRows, EqualsTheCpuDecode) {
  REQUIRE_VULKAN();
  const DType t = GetParam();
  const int64_t cols = 512, n_rows = 50;
  DevWeight w(t, random_rows(t, n_rows, cols, 11), cols, n_rows);
  const Tensor host = Tensor::contiguous(t, w.host.data(), cols, n_rows);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48};
  const int64_t n = int64_t(ids.size());
  std::vector<float> ref(size_t(n * cols));
  cpu::get_rows(host, ids.data(), n, ref.data());
  auto out = poisoned(ref.size());
  vk().get_rows(w.t, ids.data(), n, fp(out));
  const double e = nmse(from_dev(*out, ref.size()), ref);
  record("nmse_ref", e);
  EXPECT_LE(e, 1e-12) << traits(t).name;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanGetRows, testing::ValuesIn(kWeightTypes),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(traits(i.param).name);
                         });

TEST(VulkanOps, GetRowsRefusesAnIdOutsideTheTable) {
  REQUIRE_VULKAN();
  DevWeight w(DType::F32, random_rows(DType::F32, 4, 64, 1), 64, 4);
  auto out = poisoned(64);
  const int32_t bad[] = {4};
  EXPECT_THROW(vk().get_rows(w.t, bad, 1, fp(out)), std::out_of_range);
}

// ---- matmul ----

struct MatmulCase {
  DType type;
  int64_t n;
};

void PrintTo(const MatmulCase& c, std::ostream* os) { *os << traits(c.type).name << "_n" << c.n; }

class VulkanMatmul : public testing::TestWithParam<MatmulCase> {};

/// k = 512 (520 for f32/f16/bf16: a k-tile cut short), m = 100 (a partial 32-row tile); n = 1
/// and 3 run the matrix-vector shader, 37 the tiled one.
TEST_P(VulkanMatmul, MatchesTheCpuAndFloat64) {
  REQUIRE_VULKAN();
  const auto [t, n] = GetParam();
  const int64_t k = traits(t).block_elems == 1 ? 520 : 512, m = 100;
  DevWeight w(t, random_rows(t, m, k, 61), k, m);
  const Tensor host = Tensor::contiguous(t, w.host.data(), k, m);
  const std::vector<float> x = test::random_floats(size_t(n * k), 62);
  cpu::ThreadPool pool(1);
  std::vector<float> ref(size_t(n * m));
  cpu::matmul(pool, host, x.data(), n, ref.data(), cpu::CpuLevel::scalar);
  std::vector<float> wf(size_t(m * k));
  traits(t).to_float(w.host.data(), wf.data(), m * k);
  std::vector<double> exact(size_t(n * m));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(wf[size_t(i * k + e)]) * x[size_t(j * k + e)];
      exact[size_t(j * m + i)] = s;
    }
  auto dx = to_dev(x);
  auto dy = poisoned(ref.size());
  vk().matmul(w.t, fp(dx), n, fp(dy));
  const std::vector<float> got = from_dev(*dy, ref.size());
  const double e_ref = nmse(got, ref), e_exact = nmse(got, exact);
  record("nmse_ref", e_ref);
  record("nmse_exact", e_exact);
  // The CPU's own activation rounding (docs/cuda.md measured it against float64): q8_0 / q8_K
  // activations ~3e-5..6e-5, bf16 ~3e-6, f16 ~1e-7; f32 none.
  const double tol_ref = t == DType::F32 ? 1e-10 : t == DType::F16 ? 1e-6 : 2e-4;
  EXPECT_LE(e_ref, tol_ref);
  EXPECT_LE(e_exact, 1e-10);
}

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> c;
  for (DType t : kWeightTypes)
    for (int64_t n : {1, 3, 37}) c.push_back({t, n});
  return c;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanMatmul, testing::ValuesIn(matmul_cases()),
                         [](const testing::TestParamInfo<MatmulCase>& i) {
                           return std::string(traits(i.param.type).name) + "_n" +
                                  std::to_string(i.param.n);
                         });

// ---- row and element-wise ops ----

/// Variants: with a weight, without, and in place (y = x).
TEST(VulkanOps, RmsNorm) {
  REQUIRE_VULKAN();
  const int64_t rows = 5, cols = 1000;
  const std::vector<float> x = test::random_floats(size_t(rows * cols), 21, 2.0f);
  DevWeight w(DType::F32, random_rows(DType::F32, 1, cols, 22), cols, 1);
  const float* wh = reinterpret_cast<const float*>(w.host.data());
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    std::vector<float> ref(x.size());
    cpu::rms_norm(x.data(), variant == 1 ? nullptr : wh, ref.data(), rows, cols, 1e-5f);
    auto dx = to_dev(x);
    auto dy = variant == 2 ? nullptr : poisoned(x.size());
    float* y = variant == 2 ? fp(dx) : fp(dy);
    vk().rms_norm(fp(dx), variant == 1 ? nullptr : &w.t, y, rows, cols, 1e-5f);
    const double e = nmse(from_dev(variant == 2 ? *dx : *dy, x.size()), ref);
    record("nmse_ref", e);
    EXPECT_LE(e, 1e-12);
  }
}

/// Variants: 0 llama pairs, 1 neox pairs, 2 llama3 freq_factors with linear scaling, 3 partial
/// rotation (n_rot < head_dim), 4 neox with mscale (LongRoPE's attention factor).
TEST(VulkanOps, Rope) {
  REQUIRE_VULKAN();
  const int64_t n_tok = 6, n_heads = 4, hd = 64;
  std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 131000};
  std::vector<float> ff(size_t(hd / 2));
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.25f * float(i % 5);
  const std::vector<float> x = test::random_floats(size_t(n_tok * n_heads * hd), 31);
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    RopeConfig cfg{hd, 500000.0f, 1.0f, nullptr, 1.0f, variant == 1 || variant == 4};
    if (variant == 2) {
      cfg.freq_factors = ff.data();
      cfg.freq_scale = 0.25f;
    }
    if (variant == 3) cfg.n_rot = 32;
    if (variant == 4) cfg.mscale = 1.19f;
    std::vector<float> ref = x;
    cpu::rope(ref.data(), n_tok, n_heads, hd, pos.data(), cfg);
    PageTable pt;
    pt.n_tokens = n_tok;
    pt.pos = pos.data();
    vk().begin_step(pt);
    auto dx = to_dev(x);
    vk().rope(fp(dx), n_tok, n_heads, hd, cfg);
    const double e = nmse(from_dev(*dx, x.size()), ref);
    record("nmse_ref", e);
    EXPECT_LE(e, 1e-9);
  }
}

/// SwiGLU and GeGLU over 3 × 1001 elements, out separate and aliasing gate.
TEST(VulkanOps, Glu) {
  REQUIRE_VULKAN();
  const int64_t rows = 3, cols = 1001;
  std::vector<float> g = test::random_floats(size_t(rows * cols), 41, 3.0f);
  g[0] = -12.0f;  // GeGLU's clamps
  g[1] = 11.0f;
  const std::vector<float> u = test::random_floats(size_t(rows * cols), 42);
  for (GluKind kind : {GluKind::kSwiGlu, GluKind::kGeGlu})
    for (bool alias : {false, true}) {
      SCOPED_TRACE(std::string(kind == GluKind::kGeGlu ? "geglu" : "swiglu") +
                   (alias ? " in place" : ""));
      std::vector<float> ref(g.size());
      if (kind == GluKind::kGeGlu)
        cpu::geglu(g.data(), u.data(), ref.data(), rows, cols);
      else
        cpu::swiglu(g.data(), u.data(), ref.data(), rows, cols);
      auto dg = to_dev(g), du = to_dev(u);
      auto dout = alias ? nullptr : poisoned(g.size());
      vk().glu(kind, fp(dg), fp(du), alias ? fp(dg) : fp(dout), rows, cols);
      const double e = nmse(from_dev(alias ? *dg : *dout, g.size()), ref);
      record("nmse_ref", e);
      // GeGLU rounds x and gelu(x) to f16; a driver's f32 → f16 rounding may differ at ties.
      EXPECT_LE(e, kind == GluKind::kGeGlu ? 1e-7 : 1e-12);
    }
}

TEST(VulkanOps, AddAddRowScaleSoftcap) {
  REQUIRE_VULKAN();
  const int64_t rows = 7, cols = 587, n = rows * cols;
  const std::vector<float> y = test::random_floats(size_t(n), 51, 4.0f);
  const std::vector<float> x = test::random_floats(size_t(n), 52);
  DevWeight bias(DType::F32, random_rows(DType::F32, 1, cols, 53), cols, 1);
  const float* bh = reinterpret_cast<const float*>(bias.host.data());
  for (int op = 0; op < 4; ++op) {
    SCOPED_TRACE(op);
    std::vector<float> ref = y;
    auto dy = to_dev(y), dx = to_dev(x);
    switch (op) {
      case 0:
        cpu::add(ref.data(), x.data(), n);
        vk().add(fp(dy), fp(dx), n);
        break;
      case 1:
        for (int64_t r = 0; r < rows; ++r) cpu::add(ref.data() + r * cols, bh, cols);
        vk().add_row(fp(dy), bias.t, rows, cols);
        break;
      case 2:
        cpu::scale(ref.data(), n, 0.37f);
        vk().scale(fp(dy), n, 0.37f);
        break;
      case 3:
        cpu::softcap(ref.data(), n, 5.0f);
        vk().softcap(fp(dy), n, 5.0f);
        break;
    }
    const double e = nmse(from_dev(*dy, size_t(n)), ref);
    record("nmse_ref", e);
    EXPECT_LE(e, op == 3 ? 1e-12 : 0.0);  // tanh is the driver's; the others exact
  }
}

TEST(VulkanOps, CopyCols) {
  REQUIRE_VULKAN();
  const int64_t rows = 9, cols = 300, c0 = 64, n = 96;
  const std::vector<float> src = test::random_floats(size_t(rows * cols), 55);
  std::vector<float> ref(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) ref[size_t(r * n + j)] = src[size_t(r * cols + c0 + j)];
  auto ds = to_dev(src);
  auto dd = poisoned(ref.size());
  vk().copy_cols(fp(ds), rows, cols, c0, n, fp(dd));
  EXPECT_EQ(nmse(from_dev(*dd, ref.size()), ref), 0.0);
}

/// Ops issued back to back without a synchronize (the order and barriers between them): RMSNorm
/// → q8_0 matmul (tiled) → add → scale, downloaded once.
TEST(VulkanOps, ChainedOpsRunInIssueOrder) {
  REQUIRE_VULKAN();
  const int64_t n = 9, k = 256, m = 64;
  const std::vector<float> x = test::random_floats(size_t(n * k), 81);
  DevWeight w(DType::Q8_0, random_rows(DType::Q8_0, m, k, 82), k, m);
  const std::vector<float> r = test::random_floats(size_t(n * m), 83);
  auto dx = to_dev(x), dy = poisoned(size_t(n * m)), dr = to_dev(r);
  vk().rms_norm(fp(dx), nullptr, fp(dx), n, k, 1e-6f);
  vk().matmul(w.t, fp(dx), n, fp(dy));
  vk().add(fp(dy), fp(dr), n * m);
  vk().scale(fp(dy), n * m, 0.5f);
  const std::vector<float> got = from_dev(*dy, size_t(n * m));
  std::vector<float> xn(x.size()), ref(size_t(n * m)), wf(size_t(m * k));
  cpu::rms_norm(x.data(), nullptr, xn.data(), n, k, 1e-6f);
  traits(DType::Q8_0).to_float(w.host.data(), wf.data(), m * k);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(wf[size_t(i * k + e)]) * xn[size_t(j * k + e)];
      ref[size_t(j * m + i)] = float((s + r[size_t(j * m + i)]) * 0.5);
    }
  const double e = nmse(got, ref);
  record("nmse_ref", e);
  EXPECT_LE(e, 1e-10);
}

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

const KvCase kKvPairs[] = {{DType::F16, DType::F16, 0},   {DType::F32, DType::F32, 0},
                           {DType::BF16, DType::BF16, 0}, {DType::F16, DType::BF16, 0},
                           {DType::Q8_0, DType::Q8_0, 0}, {DType::F16, DType::Q8_0, 0}};

bool is_q8(const KvCase& c) { return c.k == DType::Q8_0 || c.v == DType::Q8_0; }

class VulkanKvStore : public testing::TestWithParam<KvCase> {};

/// Variants: 0 n_head_kv 2 × head_dim 64 (two sequences, one crossing blocks), 1 n_head_kv 3 ×
/// head_dim 8 (one q8_0 block per row, padded: rows start 2 bytes into a word), 2 n_head_kv 2
/// × head_dim 40 (three q8_0 blocks), 3 n_head_kv 4 × head_dim 16 (q8_0 blocks span heads),
/// 4 (q8_0 only) 512 rows of n_head_kv 8 × head_dim 64 with block scales spread over 2^±20.
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
  if (c.variant == 4)  // 16384 blocks with scales over 2^-20 … 2^20: the q8_0 divisions
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
  // (q8_0 of an inf or NaN is undefined on the CPU too: those two stay out.)
  const size_t n_special = is_q8(c) ? 10 : 12;
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

std::vector<KvCase> kv_store_cases() {
  std::vector<KvCase> out;
  for (const KvCase& c : kKvPairs)
    for (int variant : {0, 1, 2, 3, 4})
      if (variant < 4 || is_q8(c)) out.push_back({c.k, c.v, variant});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanKvStore, testing::ValuesIn(kv_store_cases()), kv_case_name);

class VulkanAttention : public testing::TestWithParam<KvCase> {};

/// Variants: 0 one decode at context 3000 (6 segments merged by log-sum-exp), GQA 4/2, head_dim
/// 64; 1 a 37-token prefill and a 2-token continuation, head_dim 128, blocks of 32; 2 head_dim 8
/// without GQA (the fixtures' shape); 3 a 700-token decode and a 3-token continuation with a
/// 100-position window and soft-capping. The cache is filled by the CPU encoder; the reference
/// is the CPU's flash attention, and float64 over the decoded cache.
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
  // Every position of every sequence, encoded on the host.
  std::vector<float> kdec(size_t(ps.n_slots * ps.bs * ps.kv_width()));
  std::vector<float> vdec(kdec.size());
  for (size_t s = 0; s < ps.seqs.size(); ++s) {
    const int64_t n_pos = ps.seqs[s].pos0 + ps.seqs[s].n_q;
    const std::vector<float> k = kv_values(n_pos, ps.kv_width(), 100 + uint32_t(s));
    const std::vector<float> v = kv_values(n_pos, ps.kv_width(), 200 + uint32_t(s));
    for (int64_t j = 0; j < n_pos; ++j) {
      const int32_t id = ps.seqs[s].block_table[j / ps.bs];
      const int64_t cell = id * ps.bs + j % ps.bs;
      kv_encode_row(c.k, sh.hkv, sh.hd, k.data() + j * ps.kv_width(),
                    ps.kv.k_block(id) + (j % ps.bs) * ps.kv.k_row_bytes);
      kv_encode_row(c.v, sh.hkv, sh.hd, v.data() + j * ps.kv_width(),
                    ps.kv.v_block(id) + (j % ps.bs) * ps.kv.v_row_bytes);
      kv_decode_row(c.k, sh.hkv, sh.hd, ps.kv.k_block(id) + (j % ps.bs) * ps.kv.k_row_bytes,
                    kdec.data() + cell * ps.kv_width());
      kv_decode_row(c.v, sh.hkv, sh.hd, ps.kv.v_block(id) + (j % ps.bs) * ps.kv.v_row_bytes,
                    vdec.data() + cell * ps.kv_width());
    }
  }
  const int64_t qw = sh.n_head * sh.hd;
  const std::vector<float> q = test::random_floats(size_t(ps.n_rows * qw), 93);
  std::vector<float> ref(q.size());
  cpu::ThreadPool pool(1);
  cpu::paged_attention(pool, ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), q.data(),
                       ref.data());
  // float64 over the decoded cache.
  std::vector<double> exact(q.size());
  for (const PagedSeq& s : ps.seqs)
    for (int64_t i = 0; i < s.n_q; ++i) {
      const int64_t row = s.q0 + i, p = s.pos0 + i;
      const int64_t lo = ps.p.window > 0 ? std::max<int64_t>(0, p - ps.p.window + 1) : 0;
      for (int64_t h = 0; h < sh.n_head; ++h) {
        const int64_t hk = h / (sh.n_head / sh.hkv);
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int64_t j = lo; j <= p; ++j) {
          const int64_t cell = s.block_table[j / ps.bs] * ps.bs + j % ps.bs;
          double d = 0;
          for (int64_t e = 0; e < sh.hd; ++e)
            d += double(q[size_t(row * qw + h * sh.hd + e)]) *
                 kdec[size_t(cell * ps.kv_width() + hk * sh.hd + e)];
          d *= ps.p.attn.scale;
          if (ps.p.softcap > 0) d = ps.p.softcap * std::tanh(d / ps.p.softcap);
          sc.push_back(d);
          mx = std::max(mx, d);
        }
        double l = 0;
        std::vector<double> acc(size_t(sh.hd), 0.0);
        for (int64_t j = lo; j <= p; ++j) {
          const int64_t cell = s.block_table[j / ps.bs] * ps.bs + j % ps.bs;
          const double w = std::exp(sc[size_t(j - lo)] - mx);
          l += w;
          for (int64_t e = 0; e < sh.hd; ++e)
            acc[size_t(e)] += w * vdec[size_t(cell * ps.kv_width() + hk * sh.hd + e)];
        }
        for (int64_t e = 0; e < sh.hd; ++e)
          exact[size_t(row * qw + h * sh.hd + e)] = acc[size_t(e)] / l;
      }
    }
  DevCache dc(ps);
  vk().begin_step(ps.pt);
  auto dq = to_dev(q), dout = poisoned(q.size());
  vk().paged_attention(dc.kv, ps.p, fp(dq), fp(dout));
  const std::vector<float> got = from_dev(*dout, q.size());
  const double e_ref = nmse(got, ref), e_exact = nmse(got, exact);
  record("nmse_ref", e_ref);
  record("nmse_exact", e_exact);
  // The CPU rounds Q to f16 for an f16 K (docs/cuda.md: ~7e-8 against float64) and to q8_0
  // for a q8_0 K (~3.5e-5).
  EXPECT_LE(e_ref, c.k == DType::F16 ? 1e-6 : c.k == DType::Q8_0 ? 2e-4 : 1e-9);
  EXPECT_LE(e_exact, 1e-9);
}

std::vector<KvCase> attention_cases() {
  std::vector<KvCase> out;
  for (const KvCase& c : kKvPairs)
    for (int variant : {0, 1, 2, 3}) out.push_back({c.k, c.v, variant});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanAttention, testing::ValuesIn(attention_cases()), kv_case_name);

/// A buffer freed while an upload into it is still only recorded: the free waits for it (as
/// cudaFree does), so a weight uploaded next into the same memory is not overwritten when the
/// backend's work is submitted later.
TEST(VulkanOps, FreeingABufferWaitsForTheWorkRecordedOnIt) {
  REQUIRE_VULKAN();
  const int64_t n = 4096;
  for (int round = 0; round < 4; ++round) {
    auto a = to_dev(test::random_floats(size_t(n), 7));  // recorded, not submitted
    a.reset();
    DevWeight w(DType::F32, random_rows(DType::F32, 1, n, 8), n, 1);
    std::vector<float> got(static_cast<size_t>(n));
    vk().download(got.data(), w.t.data, size_t(n) * sizeof(float));
    EXPECT_EQ(std::memcmp(got.data(), w.host.data(), w.host.size()), 0) << round;
  }
}

// ---- the KV cache with rows on the device ----

/// KvCache with its layers' rows on Vulkan: copy_block (copy-on-write) copies them on the
/// device's memory, and the flags that read rows with the host are refused naming themselves.
TEST(VulkanKvCache, CopyOnWriteCopiesDeviceRows) {
  REQUIRE_VULKAN();
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 2;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = hp.head_dim_v = 32;
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
  test::TempDir dir;
  for (int flag = 0; flag < 2; ++flag) {
    KvCacheParams q = p;
    (flag ? q.cache_dir : q.offload_dir) = dir.path().string();
    try {
      KvCache c(hp, q, devs);
      ADD_FAILURE() << "accepted " << (flag ? "--kv-cache-dir" : "--kv-offload-dir");
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag ? "--kv-cache-dir" : "--kv-offload-dir"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- what the device says it supports ----

TEST(VulkanSupport, UnimplementedOpsAndTypesAreRefusedUpFront) {
  REQUIRE_VULKAN();
  Device& d = *vk_device();
  EXPECT_EQ(d.name().rfind("Vulkan", 0), 0u) << d.name();
  EXPECT_FALSE(d.host_memory());
  for (DType t : kWeightTypes) {
    EXPECT_TRUE(d.supports(Op::kMatmul, t, DType::F32, 4096)) << traits(t).name;
    EXPECT_TRUE(d.supports(Op::kGetRows, t)) << traits(t).name;
  }
  EXPECT_FALSE(d.supports(Op::kMatmul, DType::Q4_K, DType::F32, 4000));  // not whole blocks
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::IQ4_NL}) {
    EXPECT_FALSE(d.supports(Op::kMatmul, t)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kGetRows, t)) << traits(t).name;
    std::vector<uint8_t> bytes(size_t(*row_bytes(t, 256)));
    Tensor w = Tensor::contiguous(t, bytes.data(), 256, 1);
    EXPECT_THROW(d.upload_weight(w, false), std::runtime_error) << traits(t).name;
  }
  // The KV store and paged attention: f32, f16, bf16 and q8_0 K/V so far; the rest refused.
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    EXPECT_TRUE(d.supports(Op::kKvStore, t, DType::F16));
    EXPECT_TRUE(d.supports(Op::kPagedAttention, DType::F16, t));
  }
  EXPECT_TRUE(d.supports(Op::kKvStore, DType::Q8_0, DType::Q8_0));
  EXPECT_TRUE(d.supports(Op::kPagedAttention, DType::Q8_0, DType::Q8_0));
  for (DType t : {DType::Q4_0, DType::FP8_E4M3, DType::FP8_E5M2, DType::NVFP4}) {
    EXPECT_FALSE(d.supports(Op::kKvStore, t, DType::F16)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kKvStore, DType::F16, t)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kPagedAttention, t, DType::F16)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kPagedAttention, DType::F16, t)) << traits(t).name;
  }
}

// ---- the model end to end (-ngl through the seam) ----

/// Greedy tokens of `kvrun -m model` with `flags` (KVRUN_VULKAN_SOFTWARE=1 passes to the child,
/// so lavapipe counts as Vulkan0 there too).
std::vector<int> greedy_tokens(const std::string& model, const std::string& flags) {
  const std::string cmd = test::kvrun_binary() + " -m " + test::fixture(model).string() +
                          " -p 'Once upon a time' -n 16 --temp 0 --json " + flags;
  const test::CommandResult r = test::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("tokens")) return {};
  return j.at("tokens").get<std::vector<int>>();
}

/// The stories260K fixtures with layers (and the output head) on Vulkan0: everything on the
/// device (KV rows and attention too), and for the f32 model also the last 2 layers with a q8_0
/// cache and -nkvo (KV and attention on the host): greedy tokens equal to the CPU's. Weight types:
/// f32, f16, q8_0, q4_0, q6_K (+ q8_0 embeddings).
TEST(VulkanModel, GreedyTokensEqualTheCpuWithLayersOnVulkan) {
  REQUIRE_VULKAN();
  const std::string dev = " -dev " + vk_device()->name();
  const std::string q8 = " -ctk q8_0 -ctv q8_0";
  for (const char* m : {"models/stories260K-F32.gguf", "models/stories260K-pad-F16.gguf",
                        "models/stories260K-pad-Q8_0.gguf", "models/stories260K-pad-Q4_0.gguf",
                        "models/stories260K-Q6_K.gguf"}) {
    SCOPED_TRACE(m);
    KVRUN_REQUIRE_FIXTURE(m);
    const std::vector<int> cpu = greedy_tokens(m, "");
    ASSERT_EQ(cpu.size(), 16u);
    EXPECT_EQ(greedy_tokens(m, "-ngl all" + dev), cpu);
    if (m != std::string("models/stories260K-F32.gguf")) continue;  // lavapipe is slow: once
    EXPECT_EQ(greedy_tokens(m, "-ngl 2" + q8 + dev), greedy_tokens(m, q8));
    EXPECT_EQ(greedy_tokens(m, "-ngl all -nkvo" + dev), cpu);
  }
}

/// What the backend lacks is refused with one line naming it: a KV type (q4_0), the slow KV
/// tier for rows on the device, a weight type (the q5_1 of this Q5_K_M file).
TEST(VulkanModel, WhatIsNotSupportedIsRefusedClearly) {
  REQUIRE_VULKAN();
  const std::string dev = " -dev " + vk_device()->name();
  const std::string f32 = test::kvrun_binary() + " -m " +
                          test::fixture("models/stories260K-F32.gguf").string() + " -p hi -n 1";
  const test::CommandResult q4 = test::run_command(f32 + " -ngl 1 -ctk q4_0" + dev);
  EXPECT_EQ(q4.exit_code, 1);
  EXPECT_NE(q4.err.find("has no paged attention over K q4_0"), std::string::npos) << q4.err;
  test::TempDir dir;
  const test::CommandResult off =
      test::run_command(f32 + " -ngl 1 --kv-offload-dir " + dir.path().string() + dev);
  EXPECT_EQ(off.exit_code, 1);
  EXPECT_NE(off.err.find("--kv-offload-dir with KV rows on"), std::string::npos) << off.err;
  const test::CommandResult q5 = test::run_command(
      test::kvrun_binary() + " -m " + test::fixture("models/stories260K-Q5_K_M.gguf").string() +
      " -p hi -n 1 -ngl all" + dev);
  EXPECT_EQ(q5.exit_code, 1);
  EXPECT_NE(q5.err.find("q5_1, which " + vk_device()->name() + "'s matmul does not support"),
            std::string::npos)
      << q5.err;
}

}  // namespace
}  // namespace kvrun

// test_vulkan_ops.cpp — the Vulkan backend's row, element-wise and matmul ops run through the
// seam (Device::upload_weight, alloc, Backend ops, upload/download) on the first Vulkan device
// and compared with the CPU scalar reference (ggml's test-backend-ops idea as GoogleTest
// TEST_Ps); what the device refuses; the fixture models with layers on Vulkan end to end.
// test_vulkan_paged.cpp has the KV store, paged attention and the KV cache on the device.
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
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "dtype.h"
#include "engine/context.h"
#include "tensor.h"
#include "test_util.h"
#include "vulkan/vk_context.h"
#include "vulkan_test_util.h"

namespace kvrun {
namespace {

using namespace vktest;

// ---- get_rows ----

class VulkanGetRows : public testing::TestWithParam<DType> {};

/// The grid i-quants (iq2_xxs … iq1_m): no float multiply-add in their decode (dl · grid, then
/// the sign), so a device must give the CPU's values bit for bit.
bool grid_iquant(DType t) { return traits(t).quantized && !traits(t).from_float; }

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
  const std::vector<float> got = from_dev(*out, ref.size());
  const double e = nmse(got, ref);
  record("nmse_ref", e);
  EXPECT_LE(e, 1e-12) << traits(t).name;
  if (grid_iquant(t)) {
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << traits(t).name;
  }
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
  bool fp16;  // on vk_fp16() (the fp16-arithmetic shaders where the device has them), else vk()
};

std::string case_name(const MatmulCase& c) {
  return std::string(traits(c.type).name) + "_n" + std::to_string(c.n) + (c.fp16 ? "_fp16" : "");
}
void PrintTo(const MatmulCase& c, std::ostream* os) { *os << case_name(c); }

class VulkanMatmul : public testing::TestWithParam<MatmulCase> {};

/// The NMSE bound of the fp16-arithmetic path against float64 (docs/vulkan.md "fp16
/// arithmetic"). With u = 2^-11 (f16's unit roundoff) and each rounding a relative error of
/// variance ≤ u²/3, independent: rounding w and x to f16 adds 2 · u²/3 per product; each k step's
/// 16-term f16 fma chain (per lane of the pair) rounds partial sums of j products (j = 1..16),
/// variance j · σ² · u²/3, Σj = 136 per lane, 272 per 32 products: 8.5 · u²/3 per product. Over
/// random zero-mean products E[y²] = k · σ², so NMSE ≈ (2 + 8.5) / 3 · u² = 3.5 u² ≈ 8.3e-7
/// (the f32 sum over k steps adds ~1e-14). The bound is 12× that: a fault (a wrong tile index,
/// a lost pair) gives NMSE near 1, and the portable path stays at 1e-10.
constexpr double kFp16Nmse = 1e-5;

/// k = 512 (520 for f32/f16/bf16: a k-tile cut short), m = 100 (a partial 32-row tile); n = 1
/// and 3 run the matrix-vector shader, 37 the tiled one; each once on the portable shaders and
/// once on the fp16 path (the tiled matmul of every type and the f16 matvec differ there).
TEST_P(VulkanMatmul, MatchesTheCpuAndFloat64) {
  REQUIRE_VULKAN();
  const auto [t, n, fp16] = GetParam();
  const int64_t k = traits(t).block_elems == 1 ? 520 : 512, m = 100;
  DevWeight w(t, random_rows(t, m, k, 61), k, m);
  const Tensor host = Tensor::contiguous(t, w.host.data(), k, m);
  const std::vector<float> x = test::random_floats(size_t(n * k), 62);
  cpu::ThreadPool pool(1);
  std::vector<float> ref(size_t(n * m));
  cpu::matmul(pool, host, x.data(), n, ref.data(), cpu::CpuLevel::scalar);
  std::vector<float> wf(size_t(m * k));
  traits(t).to_float(w.host.data(), wf.data(), m * k);
  const std::vector<double> exact = matmul_f64(wf, x, n, m, k);
  auto dx = to_dev(x);
  auto dy = poisoned(ref.size());
  vk().synchronize();  // x and the poison are there before another backend's stream runs
  Backend& be = fp16 ? vk_fp16() : vk();
  be.matmul(w.t, fp(dx), n, fp(dy));
  be.synchronize();
  const std::vector<float> got = from_dev(*dy, ref.size());
  const double e_ref = nmse(got, ref), e_exact = nmse(got, exact);
  record("nmse_ref", e_ref);
  record("nmse_exact", e_exact);
  // The CPU's own activation rounding (docs/cuda.md measured it against float64): q8_0 / q8_K
  // activations ~3e-5..6e-5, bf16 ~3e-6, f16 ~1e-7; f32 none. The int8 dot-product matvec
  // (q8_0 / q4_0, n = 1, where the device has it) rounds x to q8_0 as the CPU does: then it is
  // the CPU's result (up to the sum's order) and as far from float64 as the CPU.
  const bool dot = n == 1 && (t == DType::Q8_0 || t == DType::Q4_0) && has_int8_dot();
  // The fp16 path (tiled n = 37, f16 matvec) rounds w and x to f16: kFp16Nmse from float64 and
  // from the CPU where the CPU is that close (f32; f16, whose x the CPU rounds to f16 too);
  // the others keep 2e-4 (the CPU's ≤ 8.1e-5 and kFp16Nmse: (√8.1e-5 + √1e-5)² ≈ 1.5e-4). It
  // must also be measurably off float64 (> 1e-9, where the f32 path is ≤ 2e-13): the case ran
  // the fp16 shader, not silently the portable one.
  const bool half = fp16 && has_fp16() && (n > 4 || t == DType::F16);
  const double tol_f32 = half ? kFp16Nmse : 1e-10;
  const double tol_ref = t == DType::F32 || dot ? tol_f32
                         : t == DType::F16      ? std::max(1e-6, tol_f32)
                                                : 2e-4;
  EXPECT_LE(e_ref, tol_ref);
  EXPECT_LE(e_exact, dot ? 2e-4 : tol_f32);
  if (half) {
    EXPECT_GT(e_exact, 1e-9) << "the fp16 path gave f32 results";
  }
}

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> c;
  for (bool fp16 : {false, true})
    for (DType t : kWeightTypes)
      for (int64_t n : {1, 3, 37}) c.push_back({t, n, fp16});
  return c;
}

INSTANTIATE_TEST_SUITE_P(All, VulkanMatmul, testing::ValuesIn(matmul_cases()),
                         [](const testing::TestParamInfo<MatmulCase>& i) {
                           return case_name(i.param);
                         });

// ---- the int8 dot-product matvec ----

/// Where the device reports VK_KHR_shader_integer_dot_product (lavapipe does, emulated), q8_0 and
/// q4_0 decode matvecs quantize x to q8_0 as the CPU does and take integer dot products, so they
/// equal the CPU's result up to the float sum's order (NMSE ~1e-14, where the f32-activation
/// matvec is ~3e-5 from it: the bound tells the paths apart). A backend made with
/// KVRUN_VULKAN_NO_INT8_DOT=1 must run the portable matvec on the same device: the f32 result,
/// within 1e-10 of float64. n = 1 (the path's only row count) and 4 (the f32 matvec on both),
/// k = 1024, m = 100.
TEST(VulkanInt8Dot, BothPathsMatchTheirReference) {
  REQUIRE_VULKAN();
  const bool has_dot = has_int8_dot();
  if (!has_dot)
    std::printf("    %s has no int8 dot product: the portable path only\n",
                vk_device()->name().c_str());
  setenv("KVRUN_VULKAN_NO_INT8_DOT", "1", 1);
  const std::unique_ptr<Backend> portable = vk_device()->make_backend(0);
  unsetenv("KVRUN_VULKAN_NO_INT8_DOT");
  const std::unique_ptr<Backend> dot = vk_device()->make_backend(0);
  const int64_t k = 1024, m = 100;
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t n : {1, 4}) {
      SCOPED_TRACE(std::string(traits(t).name) + " n=" + std::to_string(n));
      DevWeight w(t, random_rows(t, m, k, 71), k, m);
      const Tensor host = Tensor::contiguous(t, w.host.data(), k, m);
      std::vector<float> x = test::random_floats(size_t(n * k), 72);
      x[5] = 0.0f;  // a zero and an all-zero block (d = 0)
      for (int64_t e = 64; e < 96; ++e) x[size_t(e)] = 0.0f;
      cpu::ThreadPool pool(1);
      std::vector<float> ref(size_t(n * m)), wf(size_t(m * k));
      cpu::matmul(pool, host, x.data(), n, ref.data(), cpu::CpuLevel::scalar);
      traits(t).to_float(w.host.data(), wf.data(), m * k);
      const std::vector<double> exact = matmul_f64(wf, x, n, m, k);
      auto dx = to_dev(x);
      vk().synchronize();  // x is there before the other backends' streams read it
      auto yp = poisoned(ref.size()), yd = poisoned(ref.size());
      vk().synchronize();
      portable->matmul(w.t, fp(dx), n, fp(yp));
      portable->synchronize();
      dot->matmul(w.t, fp(dx), n, fp(yd));
      dot->synchronize();
      const std::vector<float> gp = from_dev(*yp, ref.size()), gd = from_dev(*yd, ref.size());
      record("portable_nmse_exact", nmse(gp, exact));
      record("dot_nmse_ref", nmse(gd, ref));
      EXPECT_LE(nmse(gp, exact), 1e-10);
      EXPECT_LE(nmse(gp, ref), 2e-4);
      if (has_dot && n == 1)
        EXPECT_LE(nmse(gd, ref), 1e-10);
      else
        EXPECT_LE(nmse(gd, exact), 1e-10);
    }
}

// ---- the fp16-arithmetic path ----

/// shaderFloat16 as the driver reports it for the device under test, queried here apart from
/// the backend's own query (vk_context.cpp describe()).
bool driver_reports_fp16() {
  for (const vulkan::PhysicalDevice& pd : vulkan::physical_devices())
    if (vk_device()->description().rfind(pd.name + " (", 0) == 0) {
      VkPhysicalDeviceVulkan12Features f12{};
      f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
      VkPhysicalDeviceFeatures2 f{};
      f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      f.pNext = &f12;
      vkGetPhysicalDeviceFeatures2(pd.handle, &f);
      return f12.shaderFloat16 == VK_TRUE;
    }
  ADD_FAILURE() << "no physical device named in " << vk_device()->description();
  return false;
}

/// Where the driver reports shaderFloat16 (lavapipe does), the description says ", fp16" and a
/// backend made without KVRUN_VULKAN_NO_FP16 runs the fp16 shaders: its tiled matmul (q8_0,
/// f16) and f16 matvec are measurably off float64 (> 1e-9: x rounded to f16 alone is ~8e-8)
/// and within kFp16Nmse, while the backend made with KVRUN_VULKAN_NO_FP16=1 gives the f32
/// result (≤ 1e-10). Where it is not reported, both backends give the same bits.
TEST(VulkanFp16, UsedExactlyWhereTheDeviceReportsIt) {
  REQUIRE_VULKAN();
  const bool reported = driver_reports_fp16();
  EXPECT_EQ(has_fp16(), reported) << vk_device()->description();
  if (!reported)
    std::printf("    %s has no shaderFloat16: the portable path only\n",
                vk_device()->name().c_str());
  const int64_t k = 256, m = 64;
  for (const auto& [t, n] :
       {std::pair{DType::Q8_0, int64_t(37)}, std::pair{DType::F16, int64_t(37)},
        std::pair{DType::F16, int64_t(1)}}) {
    SCOPED_TRACE(std::string(traits(t).name) + " n=" + std::to_string(n));
    DevWeight w(t, random_rows(t, m, k, 91), k, m);
    const std::vector<float> x = test::random_floats(size_t(n * k), 92);
    std::vector<float> wf(size_t(m * k));
    traits(t).to_float(w.host.data(), wf.data(), m * k);
    const std::vector<double> exact = matmul_f64(wf, x, n, m, k);
    auto dx = to_dev(x);
    auto yp = poisoned(exact.size()), yh = poisoned(exact.size());
    vk().synchronize();
    vk().matmul(w.t, fp(dx), n, fp(yp));
    vk_fp16().matmul(w.t, fp(dx), n, fp(yh));
    vk_fp16().synchronize();
    const std::vector<float> gp = from_dev(*yp, exact.size()), gh = from_dev(*yh, exact.size());
    record("portable_nmse_exact", nmse(gp, exact));
    record("fp16_nmse_exact", nmse(gh, exact));
    EXPECT_LE(nmse(gp, exact), 1e-10);
    if (reported) {
      EXPECT_GT(nmse(gh, exact), 1e-9);
      EXPECT_LE(nmse(gh, exact), kFp16Nmse);
    } else {
      EXPECT_EQ(std::memcmp(gp.data(), gh.data(), gp.size() * 4), 0);
    }
  }
}

/// The prompt's last logits, then each greedy step's logits and token.
struct Trace {
  std::vector<float> prompt_logits;
  std::vector<std::vector<float>> step_logits;
  std::vector<int32_t> tokens;
};

/// `path` on the CPU (`gpu` false) or with every layer and the output on the device under test,
/// on the fp16 shaders (`fp16`) or forced portable (KVRUN_VULKAN_NO_FP16=1): a 19-token prompt
/// in one prefill chunk (the tiled matmul), then 16 greedy steps (the matvec).
Trace run_model(const std::string& path, bool gpu, bool fp16) {
  const char* var = "KVRUN_VULKAN_NO_FP16";
  const char* was = std::getenv(var);
  const std::string old = was ? was : "";
  if (fp16)
    unsetenv(var);
  else
    setenv(var, "1", 1);
  Trace t;
  {
    ModelParams mp;
    if (gpu) {
      mp.n_gpu_layers = 1000;
      mp.gpu = vk_device();
    }
    const Model model = Model::load(path, mp);
    ContextParams cp;
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = 2;
    Context ctx(model, cp);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 19; ++i) prompt.push_back(int32_t((i * 7 + 3) % model.hparams().n_vocab));
    const std::span<const float> last = ctx.eval(prompt);
    t.prompt_logits.assign(last.begin(), last.end());
    auto argmax = [](const std::vector<float>& v) {
      return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
    };
    int32_t next = argmax(t.prompt_logits);
    for (int step = 0; step < 16; ++step) {
      t.tokens.push_back(next);
      const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
      t.step_logits.emplace_back(lg.begin(), lg.end());
      next = argmax(t.step_logits.back());
    }
  }
  if (was)
    setenv(var, old.c_str(), 1);
  else
    unsetenv(var);
  return t;
}

/// The stories260K f32 and f16 fixtures wholly on the device (-ngl all) on the fp16 path: prompt
/// logits within test_gpu_e2e's 1e-3 of the CPU's and not the bits of the portable path's (the
/// fp16 shaders ran, where the device has them); greedy tokens the CPU's up to the first step
/// where they part, which must be a near-tie of the CPU's logits (the two choices within 2% of
/// the logits' range, test_gpu_e2e's bound).
TEST(VulkanFp16, GreedyTokensFollowTheCpuUpToANearTie) {
  REQUIRE_VULKAN();
  for (const char* f : {"models/stories260K-F32.gguf", "models/stories260K-pad-F16.gguf"}) {
    SCOPED_TRACE(f);
    KVRUN_REQUIRE_FIXTURE(f);
    const std::string path = test::fixture(f).string();
    const Trace cpu = run_model(path, false, false), half = run_model(path, true, true);
    const Trace port = run_model(path, true, false);
    ASSERT_EQ(half.prompt_logits.size(), cpu.prompt_logits.size());
    record("fp16_prompt_nmse", nmse(half.prompt_logits, cpu.prompt_logits));
    record("portable_prompt_nmse", nmse(port.prompt_logits, cpu.prompt_logits));
    EXPECT_LT(nmse(half.prompt_logits, cpu.prompt_logits), 1e-3);
    if (has_fp16()) {
      EXPECT_NE(std::memcmp(half.prompt_logits.data(), port.prompt_logits.data(),
                            port.prompt_logits.size() * 4),
                0);
    }
    size_t s = 0;
    while (s < cpu.tokens.size() && half.tokens[s] == cpu.tokens[s]) ++s;
    std::printf("    fp16 path: the CPU's tokens for %zu of %zu steps\n", s, cpu.tokens.size());
    if (s == cpu.tokens.size()) continue;
    const std::vector<float>& ref = s == 0 ? cpu.prompt_logits : cpu.step_logits[s - 1];
    const float top = ref[size_t(cpu.tokens[s])], other = ref[size_t(half.tokens[s])];
    const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
    EXPECT_LT(top - other, 0.02f * (*hi - *lo))
        << "step " << s << ": token " << half.tokens[s] << " (CPU logit " << other
        << ") instead of " << cpu.tokens[s] << " (" << top << ")";
  }
}

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
  const std::vector<double> xw = matmul_f64(wf, xn, n, m, k);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = float((xw[i] + r[i]) * 0.5);
  const double e = nmse(got, ref);
  record("nmse_ref", e);
  EXPECT_LE(e, 1e-10);
}

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
  EXPECT_FALSE(d.supports(Op::kMatmul, DType::IQ2_XXS, DType::F32, 4000));
  // Every weight type the CPU runs is a Vulkan weight type too; the activation-only types
  // (q8_1, q8_K) and the integer ones are not, and upload_weight names the type it refuses.
  for (DType t : {DType::Q8_1, DType::Q8_K, DType::I8, DType::I32}) {
    EXPECT_FALSE(d.supports(Op::kMatmul, t)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kGetRows, t)) << traits(t).name;
    std::vector<uint8_t> bytes(size_t(*row_bytes(t, 256)));
    Tensor w = Tensor::contiguous(t, bytes.data(), 256, 1);
    try {
      d.upload_weight(w, false);
      ADD_FAILURE() << traits(t).name << " was uploaded";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("weight type ") + traits(t).name +
                                           " is not supported"),
                std::string::npos)
          << e.what();
    }
  }
  // The KV store and paged attention: every KV type (nvfp4's store where the device has
  // shaderFloat64, which lavapipe has).
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::FP8_E4M3,
                  DType::FP8_E5M2, DType::NVFP4}) {
    EXPECT_TRUE(d.supports(Op::kKvStore, t, DType::F16)) << traits(t).name;
    EXPECT_TRUE(d.supports(Op::kKvStore, DType::F16, t)) << traits(t).name;
    EXPECT_TRUE(d.supports(Op::kPagedAttention, t, DType::F16)) << traits(t).name;
    EXPECT_TRUE(d.supports(Op::kPagedAttention, DType::F16, t)) << traits(t).name;
  }
  for (DType t : {DType::Q4_1, DType::Q4_K, DType::I32}) {
    EXPECT_FALSE(d.supports(Op::kKvStore, t, DType::F16)) << traits(t).name;
    EXPECT_FALSE(d.supports(Op::kPagedAttention, DType::F16, t)) << traits(t).name;
  }
}

// ---- memory budget ----

/// free_memory() is the heap (or VK_EXT_memory_budget's figure) less what the device holds, and
/// KVRUN_VULKAN_BUDGET forces a smaller budget: an allocation or a weight over it is refused
/// with the bytes needed and available, before the driver is asked; the rest still allocates.
TEST(VulkanMemory, AnAllocationOverTheBudgetIsRefusedClearly) {
  REQUIRE_VULKAN();
  Device& d = *vk_device();
  const int64_t free0 = d.free_memory();
  ASSERT_GE(free0, 0) << "lavapipe reports its heap";
  EXPECT_LE(free0, d.total_memory());
  {
    auto b = d.alloc(size_t(8) << 20, BufferUse::kActivations);
    EXPECT_LE(d.free_memory(), free0 - (int64_t(8) << 20) + (int64_t(1) << 20)) << free0;
  }
  // What the device holds now (a forced budget less free memory), then a budget 4 MiB above it.
  setenv("KVRUN_VULKAN_BUDGET", std::to_string(int64_t(1) << 50).c_str(), 1);
  const int64_t held = (int64_t(1) << 50) - d.free_memory();
  setenv("KVRUN_VULKAN_BUDGET", std::to_string(held + (int64_t(4) << 20)).c_str(), 1);
  EXPECT_EQ(d.free_memory(), int64_t(4) << 20);
  try {
    d.alloc(size_t(6) << 20, BufferUse::kKv);
    ADD_FAILURE() << "6 MiB allocated with 4 MiB left";
  } catch (const DeviceOutOfMemory& e) {  // what the scheduler retries a step on
    const std::string m = e.what();
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(6 << 20) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(d.free_memory()) + " bytes available"), std::string::npos) << m;
  }
  std::vector<uint8_t> big(size_t(5) << 20, 1);
  Tensor w = Tensor::contiguous(DType::F32, big.data(), int64_t(big.size() / 4), 1);
  EXPECT_THROW(d.upload_weight(w, false), DeviceOutOfMemory);
  EXPECT_NE(d.alloc(size_t(1) << 20, BufferUse::kActivations), nullptr);  // what fits
  setenv("KVRUN_VULKAN_BUDGET", "12abc", 1);
  EXPECT_THROW(d.free_memory(), std::invalid_argument);
  unsetenv("KVRUN_VULKAN_BUDGET");
  EXPECT_NE(d.alloc(size_t(6) << 20, BufferUse::kKv), nullptr);
}

/// A backend's own scratch (here the step's positions, 4 bytes a row) grows only within the
/// budget: over it, DeviceOutOfMemory naming what grew, before the driver is asked (the engine
/// then runs the step again with fewer rows); the backend stays usable and, with room again,
/// takes the same step.
TEST(VulkanMemory, ScratchThatWouldGrowOverTheBudgetThrowsDeviceOutOfMemory) {
  REQUIRE_VULKAN();
  std::unique_ptr<Backend> be = vk_device()->make_backend(0);
  std::vector<int32_t> pos(5000), seq_indptr{0, 5000};
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  PageTable pt;
  pt.n_seqs = 1;
  pt.n_tokens = int64_t(pos.size());
  pt.seq_indptr = seq_indptr.data();
  pt.pos = pos.data();
  setenv("KVRUN_VULKAN_BUDGET", std::to_string(int64_t(1) << 50).c_str(), 1);
  const int64_t held = (int64_t(1) << 50) - vk_device()->free_memory();
  setenv("KVRUN_VULKAN_BUDGET", std::to_string(held + 10000).c_str(), 1);  // < 20000 bytes
  try {
    be->begin_step(pt);
    ADD_FAILURE() << "20000 bytes of positions allocated with 10000 left";
  } catch (const DeviceOutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the step's positions of 20000 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("10000 bytes available"), std::string::npos) << m;
  }
  unsetenv("KVRUN_VULKAN_BUDGET");
  be->begin_step(pt);
  std::vector<int32_t> back(pos.size(), -1);
  be->download(back.data(), be->positions(), back.size() * sizeof(int32_t));
  EXPECT_EQ(back, pos);
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
/// f32, f16, q8_0, q4_0, q6_K (+ q8_0 embeddings), q5_0 (Q4_K_M file), q5_1 (Q5_K_M file).
TEST(VulkanModel, GreedyTokensEqualTheCpuWithLayersOnVulkan) {
  REQUIRE_VULKAN();
  const std::string dev = " -dev " + vk_device()->name();
  const std::string q8 = " -ctk q8_0 -ctv q8_0";
  for (const char* m : {"models/stories260K-F32.gguf", "models/stories260K-pad-F16.gguf",
                        "models/stories260K-pad-Q8_0.gguf", "models/stories260K-pad-Q4_0.gguf",
                        "models/stories260K-Q6_K.gguf", "models/stories260K-Q4_K_M.gguf",
                        "models/stories260K-Q5_K_M.gguf"}) {
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

/// What the backend lacks is refused with one line naming it: the slow KV tier for rows on the
/// device. (Every KV type is supported on lavapipe; a device without shaderFloat64 answers false
/// to supports() for an nvfp4 KV store, which step.cpp turns into "has no paged attention over
/// K … / V …": not testable here. Every weight type a GGUF file can hold and the CPU runs is a
/// Vulkan weight type, so no file reaches the Vulkan refusal of a weight type: the CPU's load
/// refuses the others first; VulkanSupport checks the device's own refusal.)
TEST(VulkanModel, WhatIsNotSupportedIsRefusedClearly) {
  REQUIRE_VULKAN();
  const std::string dev = " -dev " + vk_device()->name();
  const std::string f32 = test::kvrun_binary() + " -m " +
                          test::fixture("models/stories260K-F32.gguf").string() + " -p hi -n 1";
  test::TempDir dir;
  const test::CommandResult off =
      test::run_command(f32 + " -ngl 1 --kv-offload-dir " + dir.path().string() + dev);
  EXPECT_EQ(off.exit_code, 1);
  EXPECT_NE(off.err.find("--kv-offload-dir with KV rows on"), std::string::npos) << off.err;
}

/// A placement over the device's memory is refused before the load with the bytes it needs and
/// the bytes available (KVRUN_VULKAN_BUDGET makes lavapipe's 2 GiB a 100000-byte device), not by
/// the driver's allocation failure; -ngl auto sizes to the same figure (no layer fits beside its
/// scratch estimate) and runs on the CPU.
TEST(VulkanModel, APlacementOverTheBudgetIsRefusedWithItsBytes) {
  REQUIRE_VULKAN();
  const std::string dev = " -dev " + vk_device()->name();
  const std::string cmd = "KVRUN_VULKAN_BUDGET=100000 " + test::kvrun_binary() + " -m " +
                          test::fixture("models/stories260K-F32.gguf").string() +
                          " -p hi -n 1 -c 256" + dev;
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  const test::CommandResult r = test::run_command(cmd + " -ngl all");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-ngl all: out of " + vk_device()->name() + " memory"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("but 100000 bytes"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("vkAllocateMemory"), std::string::npos) << r.err;
  const test::CommandResult a = test::run_command(cmd + " -ngl auto");
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("-ngl auto: 0 of"), std::string::npos) << a.err;
}

/// --kv-host-tier end to end: with a device budget (KVRUN_VULKAN_BUDGET) too small for the KV
/// rows of -c 4096, -ngl all is refused; with --kv-mem 30K (3 blocks in device memory) and the
/// host tier it is accepted (the memory check counts --kv-mem's rows), blocks move out to host
/// memory, and the greedy tokens are the CPU's.
TEST(VulkanModel, HostTierRunsAContextPastTheDeviceBudget) {
  REQUIRE_VULKAN();
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  const std::string base = test::kvrun_binary() + " -m " +
                           test::fixture("models/stories260K-F32.gguf").string() +
                           " -p 'Once upon a time' -n 80 --temp 0 -c 4096 -t 2 --json";
  const std::string gpu =
      "KVRUN_VULKAN_BUDGET=3000000 " + base + " -ngl all -dev " + vk_device()->name();
  const test::CommandResult cpu = test::run_command(base);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const test::CommandResult refused = test::run_command(gpu);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("KV 2.50 MiB for 4096 positions"), std::string::npos) << refused.err;
  const test::CommandResult r = test::run_command(gpu + " --kv-mem 30K --kv-host-tier");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = nlohmann::json::parse(cpu.out), b = nlohmann::json::parse(r.out);
  ASSERT_EQ(a.at("tokens").size(), 80u);
  EXPECT_EQ(a.at("tokens"), b.at("tokens"));
  const nlohmann::json& kv = b.at("kv");
  EXPECT_EQ(kv.at("blocks_fast").get<int64_t>(), 3) << kv.dump();
  EXPECT_GT(kv.at("blocks_slow").get<int64_t>(), 0) << kv.dump();
  EXPECT_GT(kv.at("moves_out").get<int64_t>(), 0) << kv.dump();
}

}  // namespace
}  // namespace kvrun

// test_rope_scaling.cpp — YaRN as per-pair divisors and mscale (models/rope_scaling.h) against
// the formulas of the YaRN paper (Peng et al. 2023, arXiv:2309.00071, §3.2 NTK-by-parts with
// ggml's rounding of the ramp bounds, §3.4 the 0.1·ln(s) + 1 temperature) computed here in
// double; the CPU RoPE op driven by them against a direct double evaluation of ggml's blended
// angle; the GGUF keys; the overrides' checks; and end to end through the binary: the --rope-* /
// --yarn-* flags change the result, and YaRN given on the command line equals YaRN from GGUF
// metadata.
// ik_llama.cpp's outputs on the YaRN file are compared in test_arch_refs (tiny-qwen2-yarn).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "gguf.h"
#include "models/rope_scaling.h"
#include "test_util.h"

namespace kvrun {
namespace {

/// The ramp bounds {lo, hi} from the paper's wavelength argument: pair d turns
/// n_ctx_orig / (2π · base^(2d/n_rot)) times over the original context; lo is where that is
/// beta_fast, hi where it is beta_slow (floored / ceiled and clamped as ggml does).
std::pair<double, double> ref_bounds(int64_t n_rot, double orig, double base, double fast,
                                     double slow) {
  auto d = [&](double beta) {
    return double(n_rot) * std::log(orig / (2 * std::numbers::pi * beta)) / (2 * std::log(base));
  };
  // Not at an integer boundary, where float and double may floor differently.
  EXPECT_GT(std::fabs(d(fast) - std::round(d(fast))), 1e-3);
  EXPECT_GT(std::fabs(d(slow) - std::round(d(slow))), 1e-3);
  return {std::max(0.0, std::floor(d(fast))), std::min(double(n_rot - 1), std::ceil(d(slow)))};
}

/// YaRN's scale of pair i's angle: interpolation (×s) below lo, none above hi, a linear ramp
/// between, mixed by ext.
double ref_angle_scale(int64_t i, std::pair<double, double> b, double s, double ext) {
  const double y = (double(i) - b.first) / std::max(0.001, b.second - b.first);
  const double g = (1.0 - std::clamp(y, 0.0, 1.0)) * ext;
  return s * (1.0 - g) + g;
}

struct YarnCase {
  int64_t n_rot, orig;
  float base, factor, ext;
};

TEST(RopeScaling, YarnDivisorsAndMscaleMatchTheFormula) {
  // tiny-qwen2-yarn, Qwen2.5's 128K setting (×4 over 32768, base 1e6, head_dim 128), a llama-like
  // base with a partial ramp mix.
  for (const YarnCase c : {YarnCase{64, 64, 1e6f, 4, 1}, YarnCase{128, 32768, 1e6f, 4, 1},
                           YarnCase{128, 4096, 10000, 16, 0.5f}}) {
    SCOPED_TRACE(std::to_string(c.n_rot) + " " + std::to_string(c.orig));
    const auto b = ref_bounds(c.n_rot, double(c.orig), c.base, 32, 1);
    const auto cd = yarn_corr_dims(c.n_rot, c.orig, c.base, 32, 1);
    EXPECT_EQ(double(cd[0]), b.first);
    EXPECT_EQ(double(cd[1]), b.second);
    std::vector<float> ff(size_t(c.n_rot / 2));
    for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.25f * float(i % 5);
    const float s = 1.0f / c.factor;
    for (const float* base_ff :
         {static_cast<const float*>(nullptr), static_cast<const float*>(ff.data())}) {
      const std::vector<float> div =
          yarn_freq_divisors(c.n_rot, c.orig, c.base, s, c.ext, 32, 1, base_ff);
      ASSERT_EQ(div.size(), size_t(c.n_rot / 2));
      int n_ramp = 0;
      for (size_t i = 0; i < div.size(); ++i) {
        const double k = ref_angle_scale(int64_t(i), b, s, c.ext);
        n_ramp += k > s + 1e-9 && k < 1 - 1e-9;
        const double want = (base_ff ? base_ff[i] : 1.0) / k;
        EXPECT_NEAR(div[i], want, 1e-6 * want) << "pair " << i;
      }
      if (c.ext == 1) {
        EXPECT_GT(n_ramp, 0) << "the case should exercise the ramp";
      }
    }
    RopeParams r;
    r.scaling_type = "yarn";
    r.scaling_factor = c.factor;
    r.attn_factor = 1.25f;
    EXPECT_NEAR(rope_mscale(r, s, c.ext), 1.25 * (1 + 0.1 * std::log(double(c.factor))), 1e-6);
    EXPECT_FLOAT_EQ(rope_mscale(r, s, 0.0f), 1.25f);  // no ext_factor: no YaRN temperature
  }
}

TEST(RopeScaling, CpuRopeWithYarnDivisorsMatchesTheBlendedAngle) {
  const int64_t n_rot = 64, head_dim = 64, n_heads = 2, orig = 64;
  const float base = 1e6f, s = 0.25f;
  const std::vector<float> div = yarn_freq_divisors(n_rot, orig, base, s, 1.0f, 32, 1, nullptr);
  RopeParams r;
  r.scaling_type = "yarn";
  r.scaling_factor = 4;
  const float mscale = rope_mscale(r, s, 1.0f);
  const auto b = ref_bounds(n_rot, orig, base, 32, 1);
  const std::vector<int32_t> pos = {0, 1, 7, 63, 64, 65, 130, 255};
  const int64_t n = int64_t(pos.size());
  for (const bool neox : {false, true}) {
    std::vector<float> x = test::random_floats(size_t(n * n_heads * head_dim), 7);
    const std::vector<float> x0 = x;
    cpu::rope(x.data(), n, n_heads, head_dim, pos.data(),
              RopeConfig{n_rot, base, 1.0f, div.data(), mscale, neox});
    double max_err = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const double th = double(pos[size_t(t)]) *
                            std::pow(double(base), -2.0 * double(i) / double(n_rot)) *
                            ref_angle_scale(i, b, s, 1.0);
          const double m = 1 + 0.1 * std::log(4.0);
          const int64_t o = (t * n_heads + h) * head_dim;
          const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
          const double a = x0[size_t(o + i0)], c = x0[size_t(o + i1)];
          max_err = std::max(
              max_err, std::fabs(x[size_t(o + i0)] - m * (a * std::cos(th) - c * std::sin(th))));
          max_err = std::max(
              max_err, std::fabs(x[size_t(o + i1)] - m * (a * std::sin(th) + c * std::cos(th))));
        }
    // f32 angles up to position 255 (θ ≤ 255 rad: ulp 1.5e-5) on values of sd 1
    EXPECT_LT(max_err, 2e-4) << (neox ? "neox" : "pairs");
  }
}

TEST(RopeScaling, OverridesAndChecks) {
  RopeParams r;  // a plain file
  EXPECT_EQ(rope_ext_factor(r), 0.0f);
  RopeOverrides o;
  o.scaling_type = "yarn";
  o.freq_scale = 0.25f;
  o.yarn_orig_ctx = 64;
  apply_rope_overrides(r, o);
  check_rope_params(r);
  EXPECT_EQ(r.scaling_type, "yarn");
  EXPECT_FLOAT_EQ(rope_freq_scale(r), 0.25f);
  EXPECT_EQ(rope_ext_factor(r), 1.0f);
  EXPECT_EQ(yarn_n_ctx_orig(r, 2048), 64);
  RopeOverrides none;
  none.scaling_type = "none";
  apply_rope_overrides(r, none);
  EXPECT_EQ(rope_freq_scale(r), 1.0f);  // type none never scales (as llama.cpp)
  EXPECT_EQ(rope_ext_factor(r), 0.0f);
  RopeOverrides ext;
  ext.yarn_ext_factor = 0.5f;
  apply_rope_overrides(r, ext);
  EXPECT_EQ(rope_ext_factor(r), 0.5f);
  ext.yarn_ext_factor = -1.0f;  // negative: back to "by type"
  apply_rope_overrides(r, ext);
  EXPECT_EQ(rope_ext_factor(r), 0.0f);

  RopeOverrides bad;
  bad.scaling_type = "ntk";
  EXPECT_THROW(apply_rope_overrides(r, bad), ModelError);
  bad = {};
  bad.freq_scale = -1.0f;
  EXPECT_THROW(apply_rope_overrides(r, bad), ModelError);
  bad = {};
  bad.yarn_orig_ctx = 0;
  EXPECT_THROW(apply_rope_overrides(r, bad), ModelError);

  RopeParams f;
  f.scaling_type = "longrope";  // Phi-3 files of newer converters: the factors come as tensors
  EXPECT_NO_THROW(check_rope_params(f));
  f.scaling_type = "su";
  EXPECT_THROW(check_rope_params(f), ModelError);
  f.scaling_type = "yarn";
  f.yarn_beta_fast = 0;
  EXPECT_THROW(check_rope_params(f), ModelError);
}

/// Hparams of a metadata-only llama file with the given extra keys (`set` adds them).
template <typename F>
Hparams hparams_with(const test::TempDir& dir, F set) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.context_length", 4096);
  set(w);
  const std::string path = (dir / "meta.gguf").string();
  w.write(path);
  return load_hparams(gguf::File::open_metadata_only(path));
}

TEST(RopeScaling, GgufKeys) {
  test::TempDir dir;
  const Hparams y = hparams_with(dir, [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4);
    w.set_f32("llama.rope.scaling.yarn_ext_factor", 0.5f);
    w.set_f32("llama.rope.scaling.yarn_attn_factor", 0.9f);
    w.set_f32("llama.rope.scaling.yarn_beta_fast", 16);
    w.set_f32("llama.rope.scaling.yarn_beta_slow", 2);
  });
  EXPECT_EQ(y.rope.scaling_type, "yarn");
  EXPECT_EQ(rope_ext_factor(y.rope), 0.5f);
  EXPECT_EQ(y.rope.yarn_attn_factor, 0.9f);
  EXPECT_EQ(y.rope.yarn_beta_fast, 16.0f);
  EXPECT_EQ(y.rope.yarn_beta_slow, 2.0f);
  EXPECT_EQ(yarn_n_ctx_orig(y.rope, y.n_ctx_train), 4096);  // no original_context_length
  // a factor without a type is linear (llama.cpp's default), also under its old key name
  const Hparams lin =
      hparams_with(dir, [](gguf::Writer& w) { w.set_f32("llama.rope.scale_linear", 2); });
  EXPECT_EQ(lin.rope.scaling_type, "linear");
  EXPECT_FLOAT_EQ(rope_freq_scale(lin.rope), 0.5f);
  const Hparams off = hparams_with(dir, [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "none");
    w.set_f32("llama.rope.scaling.factor", 8);
  });
  EXPECT_EQ(rope_freq_scale(off.rope), 1.0f);
}

/// `kvrun -m FILE` greedy over a prompt past n_ctx_orig (64), with `flags`; the parsed --json.
nlohmann::json run_json(const std::string& gguf, const std::string& prompt_file,
                        const std::string& flags) {
  const auto r =
      test::run_command(test::kvrun_binary() + " -m '" + gguf + "' -f '" + prompt_file +
                        "' -n 24 --temp 0 --json --n-probs 10 -c 256 -t 2 -fa off " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

TEST(RopeScaling, CommandLineOverridesChangeTheResult) {
  test::TempDir dir;
  const std::string plain = (dir / "plain.gguf").string(), yarn = (dir / "yarn.gguf").string();
  for (const auto& [shape, path] : {std::pair{"tiny-qwen2", plain}, {"tiny-qwen2-yarn", yarn}}) {
    const auto m = test::run_command(test::kvrun_binary() + " synth --shape " + shape +
                                     " --type F32 -o '" + path + "' -t 2");
    ASSERT_EQ(m.exit_code, 0) << m.err;
  }
  const std::string prompt = (dir / "prompt.txt").string();
  std::ofstream(prompt) << "Once upon a time, there was a little robot who lived in a small town "
                           "by the sea. Every morning it walked to the beach.";
  const nlohmann::json y = run_json(yarn, prompt, "");
  ASSERT_FALSE(y.is_null());
  ASSERT_GT(y["prompt_tokens"].size(), 64u) << "the prompt should pass n_ctx_orig";
  // YaRN given on the command line computes exactly what the file's metadata does
  const nlohmann::json p =
      run_json(plain, prompt, "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64");
  EXPECT_EQ(p["tokens"], y["tokens"]);
  EXPECT_EQ(p["probs"], y["probs"]);
  // switching it off, or changing a YaRN parameter, changes the first-step logprobs
  for (const std::string flags :
       {"--rope-scaling none", "--yarn-orig-ctx 512", "--yarn-ext-factor 0", "--yarn-beta-fast 2",
        "--yarn-beta-slow 0.25", "--yarn-attn-factor 1.5", "--rope-freq-base 10000"}) {
    SCOPED_TRACE(flags);
    const nlohmann::json o = run_json(yarn, prompt, flags);
    ASSERT_FALSE(o.is_null());
    double max_diff = 0;
    for (size_t i = 0; i < 10; ++i)
      max_diff = std::max(max_diff, std::fabs(o["probs"][0][i]["logprob"].get<double>() -
                                              y["probs"][0][i]["logprob"].get<double>()));
    EXPECT_GT(max_diff, 1e-4);
  }
  // the plain file without flags is not the YaRN one either
  EXPECT_NE(run_json(plain, prompt, "")["probs"], y["probs"]);

  const auto info = test::run_command(test::kvrun_binary() + " info -m '" + yarn + "'");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("scaling yarn x4 (n_ctx_orig 64, ext_factor 1, beta_fast 32, "
                          "beta_slow 1, mscale 1.13863)"),
            std::string::npos)
      << info.out;
  const auto off =
      test::run_command(test::kvrun_binary() + " info -m '" + yarn + "' --rope-scaling none");
  EXPECT_NE(off.out.find("scaling none\n"), std::string::npos) << off.out;
  const auto bad = test::run_command(test::kvrun_binary() + " -m '" + yarn + "' -f '" + prompt +
                                     "' -n 1 --rope-scaling ntk");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--rope-scaling"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvrun

// rope_scaling.cpp — RoPE scaling in effect and YaRN's divisors (see rope_scaling.h).
#include "models/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>

namespace kvrun {
namespace {

void require_positive(std::optional<float> v, const char* flag) {
  if (v && !(*v > 0.0f && std::isfinite(*v)))
    throw ModelError(std::string(flag) + " must be a positive number");
}

/// d(β): the pair index whose wavelength makes β rotations in n_ctx_orig positions (float).
float corr_dim(int64_t n_rot, int64_t n_ctx_orig, float beta, float base) {
  const float two_pi = 2.0f * std::numbers::pi_v<float>;
  return float(n_rot) * std::log(float(n_ctx_orig) / (beta * two_pi)) / (2.0f * std::log(base));
}

}  // namespace

void apply_rope_overrides(RopeParams& r, const RopeOverrides& o) {
  if (o.scaling_type) {
    const std::string& t = *o.scaling_type;
    if (t != "none" && t != "linear" && t != "yarn")
      throw ModelError("--rope-scaling " + t + ": expected none, linear or yarn");
    r.scaling_type = t;
  }
  require_positive(o.freq_base, "--rope-freq-base");
  require_positive(o.freq_scale, "--rope-freq-scale / --rope-scale");
  require_positive(o.yarn_attn_factor, "--yarn-attn-factor");
  require_positive(o.yarn_beta_slow, "--yarn-beta-slow");
  require_positive(o.yarn_beta_fast, "--yarn-beta-fast");
  if (o.yarn_orig_ctx && *o.yarn_orig_ctx <= 0)
    throw ModelError("--yarn-orig-ctx must be a positive context length");
  if (o.yarn_ext_factor && !std::isfinite(*o.yarn_ext_factor))
    throw ModelError("--yarn-ext-factor must be a number");
  if (o.freq_base) r.freq_base = *o.freq_base;
  if (o.freq_scale) r.scaling_factor = 1.0f / *o.freq_scale;
  if (o.yarn_orig_ctx) r.yarn_orig_ctx = *o.yarn_orig_ctx;
  if (o.yarn_ext_factor) r.yarn_ext_factor = *o.yarn_ext_factor < 0 ? -1.0f : *o.yarn_ext_factor;
  if (o.yarn_attn_factor) r.yarn_attn_factor = *o.yarn_attn_factor;
  if (o.yarn_beta_slow) r.yarn_beta_slow = *o.yarn_beta_slow;
  if (o.yarn_beta_fast) r.yarn_beta_fast = *o.yarn_beta_fast;
}

void check_rope_params(const RopeParams& r) {
  const std::string& t = r.scaling_type;
  if (t != "none" && t != "linear" && t != "yarn" && t != "llama3" && t != "longrope")
    throw ModelError("rope scaling type '" + t +
                     "' is not supported (none, linear, yarn, llama3, longrope)");
  if (!(r.scaling_factor > 0.0f && std::isfinite(r.scaling_factor)))
    throw ModelError("rope.scaling.factor must be positive");
  if (!(r.freq_base > 0.0f && std::isfinite(r.freq_base)))
    throw ModelError("rope.freq_base must be positive");
  if (rope_ext_factor(r) != 0.0f && !(r.yarn_beta_fast > 0.0f && r.yarn_beta_slow > 0.0f))
    throw ModelError("rope.scaling.yarn_beta_fast and yarn_beta_slow must be positive");
}

float rope_freq_scale(const RopeParams& r) {
  return r.scaling_type == "none" ? 1.0f : 1.0f / r.scaling_factor;
}

float rope_ext_factor(const RopeParams& r) {
  if (r.yarn_ext_factor >= 0.0f) return r.yarn_ext_factor;
  return r.scaling_type == "yarn" ? 1.0f : 0.0f;
}

int64_t yarn_n_ctx_orig(const RopeParams& r, int64_t n_ctx_train) {
  return r.yarn_orig_ctx > 0 ? r.yarn_orig_ctx : r.n_ctx_orig > 0 ? r.n_ctx_orig : n_ctx_train;
}

std::array<float, 2> yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base,
                                    float beta_fast, float beta_slow) {
  const float lo = std::floor(corr_dim(n_rot, n_ctx_orig, beta_fast, freq_base));
  const float hi = std::ceil(corr_dim(n_rot, n_ctx_orig, beta_slow, freq_base));
  return {std::max(0.0f, lo), std::min(float(n_rot - 1), hi)};
}

std::vector<float> yarn_freq_divisors(int64_t n_rot, int64_t n_ctx_orig, float freq_base,
                                      float freq_scale, float ext_factor, float beta_fast,
                                      float beta_slow, const float* base_factors) {
  const std::array<float, 2> cd =
      yarn_corr_dims(n_rot, n_ctx_orig, freq_base, beta_fast, beta_slow);
  std::vector<float> out(size_t(n_rot / 2));
  for (size_t i = 0; i < out.size(); ++i) {
    const float y = (float(i) - cd[0]) / std::max(0.001f, cd[1] - cd[0]);
    const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
    const double scale = double(freq_scale) * (1.0 - double(mix)) + double(mix);
    out[i] = float(double(base_factors ? base_factors[i] : 1.0f) / scale);
  }
  return out;
}

float rope_mscale(const RopeParams& r, float freq_scale, float ext_factor) {
  float m = r.yarn_attn_factor * r.attn_factor;
  if (ext_factor != 0.0f) m *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  return m;
}

std::string describe_rope_scaling(const RopeParams& r, int64_t n_ctx_train) {
  const float fs = rope_freq_scale(r), ext = rope_ext_factor(r);
  char buf[256];
  if (ext != 0.0f) {
    std::snprintf(buf, sizeof buf,
                  "%s x%g (n_ctx_orig %lld, ext_factor %g, beta_fast %g, "
                  "beta_slow %g, mscale %.6g)",
                  r.scaling_type.c_str(), double(1.0f / fs),
                  (long long)yarn_n_ctx_orig(r, n_ctx_train), double(ext), double(r.yarn_beta_fast),
                  double(r.yarn_beta_slow), double(rope_mscale(r, fs, ext)));
  } else {
    std::snprintf(buf, sizeof buf, "%s", r.scaling_type.c_str());
    const auto append = [&buf](const char* fmt, double v) {
      const size_t n = std::strlen(buf);
      std::snprintf(buf + n, sizeof buf - n, fmt, v);
    };
    if (fs != 1.0f) append(" x%g", double(1.0f / fs));
    if (const float m = rope_mscale(r, fs, ext); m != 1.0f) append(" (mscale %.6g)", double(m));
  }
  return buf;
}

}  // namespace kvrun

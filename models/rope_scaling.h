// rope_scaling.h (models/) — RoPE context-extension settings in effect: the GGUF's
// rope.scaling.* keys with the command line's overrides (llama.cpp's --rope-scaling,
// --rope-scale, --rope-freq-base, --rope-freq-scale, --yarn-*), and YaRN expressed as what the
// backend seam's RoPE op already takes: per-pair frequency divisors and a cos/sin multiplier.
//
// YaRN (Peng, Quesnelle, Fan, Shippole 2023, "YaRN: Efficient Context Window Extension of Large
// Language Models", arXiv:2309.00071, §3.2 "NTK-by-parts" and §3.4 the attention temperature),
// with the constants and rounding of ggml's CPU rope (ggml.c: the correction dimensions are
// floor/ceil of d(β) = n_rot · ln(n_ctx_orig / (2π β)) / (2 ln base), clamped to [0, n_rot − 1];
// pair i's ramp is γ_i = 1 − clamp((i − lo) / max(0.001, hi − lo), 0, 1), mixed by ext_factor;
// its angle is θ_i · (freq_scale · (1 − γ_i·ext) + γ_i·ext), and cos and sin are multiplied by
// attn_factor · (1 + 0.1 · ln(1 / freq_scale)) when ext_factor ≠ 0).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/hparams.h"

namespace kvrun {

/// Command-line overrides of the GGUF's RoPE settings (unset fields keep the file's value).
struct RopeOverrides {
  std::optional<std::string> scaling_type;  ///< --rope-scaling: none, linear or yarn
  std::optional<float> freq_base;           ///< --rope-freq-base (> 0)
  std::optional<float> freq_scale;          ///< --rope-freq-scale, or 1 / N of --rope-scale N (> 0)
  std::optional<int64_t> yarn_orig_ctx;     ///< --yarn-orig-ctx (> 0)
  std::optional<float> yarn_ext_factor;     ///< --yarn-ext-factor (≥ 0; llama.cpp: < 0 = default)
  std::optional<float> yarn_attn_factor;    ///< --yarn-attn-factor (> 0)
  std::optional<float> yarn_beta_slow;      ///< --yarn-beta-slow (> 0)
  std::optional<float> yarn_beta_fast;      ///< --yarn-beta-fast (> 0)

  bool empty() const {
    return !scaling_type && !freq_base && !freq_scale && !yarn_orig_ctx && !yarn_ext_factor &&
           !yarn_attn_factor && !yarn_beta_slow && !yarn_beta_fast;
  }
};

/// Applies `o` to `r` (a negative --yarn-ext-factor means "by type", as llama.cpp). Throws
/// ModelError naming the flag for a value out of range or an unknown --rope-scaling type.
void apply_rope_overrides(RopeParams& r, const RopeOverrides& o);

/// Checks the settings a model runs with: a known scaling type (none, linear, yarn, llama3,
/// longrope), a positive factor, base and YaRN betas. Throws ModelError naming the key.
void check_rope_params(const RopeParams& r);

/// The linear position scale of the global layers: 1 for type none, else 1 / scaling_factor.
float rope_freq_scale(const RopeParams& r);
/// The YaRN ramp mix in effect: yarn_ext_factor, or (when negative) 1 for yarn and 0 otherwise.
float rope_ext_factor(const RopeParams& r);
/// YaRN's original context: yarn_orig_ctx, else n_ctx_orig, else `n_ctx_train`.
int64_t yarn_n_ctx_orig(const RopeParams& r, int64_t n_ctx_train);

/// The ramp's first and last pair-index bounds {lo, hi} (ggml's "corr dims", in float as ggml).
std::array<float, 2> yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base,
                                    float beta_fast, float beta_slow);

/// [n_rot/2] divisors that make the seam's θ_i / divisor equal YaRN's angle for freq_scale 1:
/// base_factors[i] / (freq_scale · (1 − γ_i·ext) + γ_i·ext) (base_factors null = all 1), computed
/// in double and rounded once.
std::vector<float> yarn_freq_divisors(int64_t n_rot, int64_t n_ctx_orig, float freq_base,
                                      float freq_scale, float ext_factor, float beta_fast,
                                      float beta_slow, const float* base_factors);

/// The cos/sin multiplier: attn_factor · yarn_attn_factor, times 1 + 0.1 · ln(1 / freq_scale)
/// when ext_factor ≠ 0 (float, in ggml's order).
float rope_mscale(const RopeParams& r, float freq_scale, float ext_factor);

/// One line for `kvrun info`, e.g. "yarn ×4 (n_ctx_orig 64, ext 1, beta 32/1, mscale 1.1386)".
std::string describe_rope_scaling(const RopeParams& r, int64_t n_ctx_train);

}  // namespace kvrun

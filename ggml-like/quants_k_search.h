// quants_k_search.h — the scale searches of kvrun's K-quant quantizers (quants_k.cpp), exposed
// so tests can hold them against a plain one-candidate-at-a-time reference.
//
// Each search tries kSearchSteps candidate inverse scales (0.1 steps around the one that maps
// the extreme value onto the end of the integer range), rounds the sub-block at each, refits
// the scale (and offset) by least squares and keeps the candidate with the smallest squared
// error. The candidates are evaluated side by side (arrays of kLanes, each sum kept in element
// order), which gives exactly the sums of separate passes.
#pragma once

namespace kvrun::kquants {

/// Candidate inverse scales per search side (t = −10..10).
constexpr int kSearchSteps = 21;
/// Candidate arrays are padded to a multiple of 8 lanes with inert candidates (inverse scale 0,
/// never chosen) so the loops over them vectorize without a scalar remainder.
constexpr int kLanes = 24;

/// round(v) (half away from zero, as std::round) clamped to [lo, hi]; NaN gives lo. Without the
/// libm call: values are first clamped to 1 beyond the range, so the truncating
/// conversion is exact and v − trunc(v) is the exact fraction that decides the rounding; no
/// branches, so the searches' loops vectorize. The quantizers spend most of their time here.
inline int round_clamp(float v, int lo, int hi) {
  const float flo = static_cast<float>(lo) - 1.0f, fhi = static_cast<float>(hi) + 1.0f;
  v = v >= flo ? v : flo;  // NaN too
  v = v <= fhi ? v : fhi;
  int i = static_cast<int>(v);
  const float frac = v - static_cast<float>(i);
  i += int(frac >= 0.5f) - int(frac <= -0.5f);
  i = i < lo ? lo : i;
  return i > hi ? hi : i;
}

/// Fit of x ≈ scale * q + offset for one sub-block; `err` is the squared error.
struct Fit {
  float scale = 0.0f;
  float offset = 0.0f;
  double err = 0.0;
};

/// Symmetric fit x ≈ scale * q, q integer in [qlo, qhi] (qlo = −qhi − 1), of the n values x.
/// Returns the best scale (may be negative; 0 for an all-zero sub-block).
float fit_symmetric(const float* x, int n, int qlo, int qhi);

/// Affine fit x ≈ scale * q + offset, q in [0, qmax], scale ≥ 0, the offset ≥ 0 when
/// offset_sign > 0 and ≤ 0 otherwise, of the n values x (n ≥ 1).
Fit fit_affine(const float* x, int n, int qmax, int offset_sign);

}  // namespace kvrun::kquants

// synth_random.h — counter-based random numbers for synthetic weights.
//
// Element i of a tensor is a pure function of (seed, tensor name, i): a 64-bit key is made from
// the seed and the name, and each element hashes key ⊕ i·φ with the SplitMix64 finaliser
// (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators"). So any range of
// any tensor can be generated on any thread, in any order, with identical results.
//
// Normal deviates are approximated by the Irwin–Hall sum of four 16-bit uniforms taken from one
// hash, centred and scaled to unit variance: cheap (one hash per value), mean 0, variance 1,
// bounded by ±2√3 ≈ ±3.46 (no extreme outliers, which is fine for weights that only need a
// realistic scale).
#pragma once

#include <cstdint>
#include <string_view>

namespace kvrun::synth_random {

/// SplitMix64's output function: a bijective 64-bit mixer.
inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The stream key of tensor `name` under `seed` (FNV-1a of the name, mixed with the seed).
inline uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return mix64(mix64(seed) ^ h);
}

/// Approximately standard-normal value number `i` of stream `key` (see the file comment).
inline float normal(uint64_t key, uint64_t i) {
  const uint64_t r = mix64(key ^ (i * 0x9E3779B97F4A7C15ull));
  const uint32_t s = uint32_t(r & 0xFFFF) + uint32_t((r >> 16) & 0xFFFF) +
                     uint32_t((r >> 32) & 0xFFFF) + uint32_t(r >> 48);
  // Each 16-bit part is uniform on {0..65535}: mean 32767.5, variance (65536² − 1)/12.
  constexpr float kMean = 4 * 32767.5f;
  constexpr float kInvSd = 1.0f / 37837.2269f;  // 1 / sqrt(4 · (65536² − 1) / 12)
  return (float(s) - kMean) * kInvSd;
}

}  // namespace kvrun::synth_random

// quants_iq.cpp — scalar reference decoders of the grid-based i-quants (GGUF's iq3_s, iq2_s,
// iq3_xxs, iq2_xxs, iq2_xs, iq1_s, iq1_m;
// layouts in blocks.h, grids in iq_grids.h).
//
// Source of the formulas: ggml's block definitions (ggml-common.h) and the decoders they are
// read with (dequantize_row_* in ggml-quants.c of ggml / ik_llama.cpp). The float steps are
// GGUF's: a sub-block scale d·f(s) rounded to float first, then scale · grid value, then the
// sign (exact), so real files decode bit for bit (checked against ik_llama.cpp's decoders in
// tests/test_quants_iq.cpp).
//
// kvrun has no quantizer for these formats (an importance-weighted grid search; their traits'
// from_float is null); tools/synth writes random valid blocks when asked for them.
#include <cstring>

#include "fp16.h"
#include "iq_grids.h"
#include "quants.h"

namespace kvrun {
namespace {

/// Writes `n` values scale · byte i of `grid_entry`, value i negated when bit i of `signs` is
/// set.
template <typename T>
void put_signed(float scale, T grid_entry, unsigned signs, int n, float* dst) {
  for (int i = 0; i < n; ++i) {
    const float v = scale * static_cast<float>(uint8_t(grid_entry >> (8 * i)));
    dst[i] = (signs >> i) & 1 ? -v : v;
  }
}

}  // namespace

/// iq3_s → float: sub-block j (32 values) has scale d·(1 + 2·s_j); quad q (4 values) is
/// kIq3sGrid[qs[q] | qh bit q << 8] with the 4 sign bits signs[q/2] >> 4·(q%2).
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq3_s*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < QK_K / 32; ++j) {
      const int s = (b[ib].scales[j / 2] >> (4 * (j % 2))) & 0x0F;
      const float dl = d * static_cast<float>(1 + 2 * s);
      for (int k = 0; k < 8; ++k, dst += 4) {
        const int q = 8 * j + k;
        const int idx = b[ib].qs[q] | (((b[ib].qh[j] >> k) & 1) << 8);
        put_signed(dl, kIq3sGrid[idx], b[ib].signs[q / 2] >> (4 * (q % 2)), 4, dst);
      }
    }
  }
}

/// iq2_s → float: half-sub-block h (16 values) has scale d·(0.5 + s_h)·0.25; group g (8 values)
/// is kIq2sGrid[qs[g] | 2 qh bits << 8] with sign byte qs[32 + g].
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq2_s*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < QK_K / 32; ++j) {
      for (int l = 0; l < 4; ++l, dst += 8) {
        const int s = (b[ib].scales[j] >> (4 * (l / 2))) & 0x0F;
        const float dl = d * (0.5f + static_cast<float>(s)) * 0.25f;
        const int g = 4 * j + l;
        const int idx = b[ib].qs[g] | (((b[ib].qh[j] >> (2 * l)) & 3) << 8);
        put_signed(dl, kIq2sGrid[idx], b[ib].qs[QK_K / 8 + g], 8, dst);
      }
    }
  }
}

/// iq3_xxs → float: sub-block j (32 values) has scale d·(0.5 + s_j)·0.5 (s_j the top 4 bits of
/// its uint32 at qs[64 + 4j]); its 8 groups of 8 values are two kIq3xxsGrid entries each
/// (indices qs[8j + 2l], qs[8j + 2l + 1]) signed by kIqSigns of the 7-bit code l of that uint32.
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq3_xxs*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint32_t aux;
      std::memcpy(&aux, b[ib].qs + QK_K / 4 + 4 * j, 4);
      const float dl = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, dst += 8) {
        const unsigned signs = kIqSigns[(aux >> (7 * l)) & 127];
        put_signed(dl, kIq3xxsGrid[b[ib].qs[8 * j + 2 * l]], signs, 4, dst);
        put_signed(dl, kIq3xxsGrid[b[ib].qs[8 * j + 2 * l + 1]], signs >> 4, 4, dst + 4);
      }
    }
  }
}

/// iq2_xxs → float: sub-block j is two little-endian uint32 at qs[4j]: 4 index bytes into
/// kIq2xxsGrid, then 4 seven-bit sign codes and the 4-bit scale s (top bits); scale
/// d·(0.5 + s)·0.25.
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq2_xxs*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint32_t aux[2];
      std::memcpy(aux, b[ib].qs + 4 * j, 8);
      const float dl = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, dst += 8)
        put_signed(dl, kIq2xxsGrid[(aux[0] >> (8 * l)) & 255], kIqSigns[(aux[1] >> (7 * l)) & 127],
                   8, dst);
    }
  }
}

/// iq2_xs → float: group g (8 values) is kIq2xsGrid[qs[g] & 511] signed by kIqSigns[qs[g] >> 9];
/// half-sub-block h has scale d·(0.5 + s_h)·0.25 (s_h: nibble h % 2 of scales[h / 2]).
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq2_xs*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int g = 0; g < QK_K / 8; ++g, dst += 8) {
      const int s = (b[ib].scales[g / 4] >> (4 * ((g % 4) / 2))) & 0x0F;
      const float dl = d * (0.5f + static_cast<float>(s)) * 0.25f;
      put_signed(dl, kIq2xsGrid[b[ib].qs[g] & 511], kIqSigns[b[ib].qs[g] >> 9], 8, dst);
    }
  }
}

/// Writes the 8 values scale · (int8 byte i of `grid_entry` + delta) (iq1_s, iq1_m).
void put_shifted(float scale, uint64_t grid_entry, float delta, float* dst) {
  for (int i = 0; i < 8; ++i)
    dst[i] = scale * (static_cast<float>(int8_t(grid_entry >> (8 * i))) + delta);
}

/// iq1_s → float: sub-block j has scale d·(2·s_j + 1) and shift δ_j = ±1/8 (qh[j] bits 12..14,
/// bit 15); group g = 4j + l is kIq1sGrid[qs[g] | 3 bits of qh[j] << 8] (values −1, 0, 1).
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq1_s*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < QK_K / 32; ++j) {
      const int qh = b[ib].qh[j];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, dst += 8)
        put_shifted(dl, kIq1sGrid[b[ib].qs[4 * j + l] | (((qh >> (3 * l)) & 7) << 8)], delta, dst);
    }
  }
}

/// iq1_m → float: d is the f16 held in the top nibbles of the four scale words (iq1_m_d);
/// half-sub-block h (16 values) has scale d·(2·s_h + 1); group g = 4j + l is
/// kIq1sGrid[qs[g] | (nibble l%2 of qh[2j + l/2] & 7) << 8], shifted by ±1/8 (that nibble's
/// bit 3).
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq1_m*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(iq1_m_d(b[ib]));
    for (int g = 0; g < QK_K / 8; ++g, dst += 8) {
      const int nib = (b[ib].qh[g / 2] >> (4 * (g % 2))) & 15;
      const float dl = d * static_cast<float>(2 * iq1_m_scale(b[ib], g / 2) + 1);
      put_shifted(dl, kIq1sGrid[b[ib].qs[g] | ((nib & 7) << 8)], nib & 8 ? -kIq1Delta : kIq1Delta,
                  dst);
    }
  }
}

bool fill_random_iq_blocks(DType t, float d_mag, uint32_t seed, void* dst, int64_t n) {
  if (t != DType::IQ3_S && t != DType::IQ2_S && t != DType::IQ3_XXS && t != DType::IQ2_XXS &&
      t != DType::IQ2_XS && t != DType::IQ1_S && t != DType::IQ1_M)
    return false;
  const size_t block_bytes = size_t(traits(t).block_bytes);
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t state = 0x9E3779B97F4A7C15ull ^ seed;
  auto next = [&state] {  // xorshift64*
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return uint32_t((state * 0x2545F4914F6CDD1Dull) >> 32);
  };
  for (int64_t ib = 0; ib < n / QK_K; ++ib, p += block_bytes) {
    for (size_t i = 0; i < block_bytes; ++i) p[i] = uint8_t(next());
    const float u = 0.5f + 0.5f * float(next() >> 8) / float(1 << 24);
    const uint16_t d = f32_to_fp16_sat(d_mag * u);
    if (t == DType::IQ1_M) {  // d in the top nibbles of the four scale words
      auto* blk = reinterpret_cast<block_iq1_m*>(p);
      for (int w = 0; w < 4; ++w) {
        uint16_t sc;
        std::memcpy(&sc, blk->scales + 2 * w, 2);
        sc = uint16_t((sc & 0x0FFF) | ((d >> (4 * w)) & 15) << 12);
        std::memcpy(blk->scales + 2 * w, &sc, 2);
      }
    } else {
      std::memcpy(p, &d, 2);  // the other layouts start with the f16 d
    }
  }
  return true;
}

}  // namespace kvrun

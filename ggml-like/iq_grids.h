// iq_grids.h — the fixed value grids and the sign-code table of the grid-based i-quants
// (iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s; block layouts in blocks.h).
//
// Source: the tables of ggml's ggml-common.h (iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid,
// iq3s_grid, iq1s_grid, ksigns_iq2xs), as in ik_llama.cpp (ikawrakow/ik_llama.cpp) and
// llama.cpp; the grids are the E8-lattice-derived point sets of the i-quants (ggml PRs #4773,
// #4897, #5196, #5676, QuIP#-style lattice codebooks). They are data, held here in kvrun's own
// compact form (iq_grids.cpp: one 2- or 3-bit level code per value) and expanded at compile time.
//
// Each grid entry packs its values one per byte, value i in byte i (little-endian), exactly as
// ggml's uint64 / uint32 tables hold them, so a decoder reads entry e's value i as
// uint8_t(grid[e] >> 8·i). The iq1s grid's bytes are int8 (−1, 0, 1).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "blocks.h"

namespace kvrun {

/// iq2_xxs: 256 entries of 8 magnitudes from {8, 25, 43}.
extern const std::array<uint64_t, 256> kIq2xxsGrid;
/// iq2_xs: 512 entries of 8 magnitudes from {8, 25, 43}.
extern const std::array<uint64_t, 512> kIq2xsGrid;
/// iq2_s: 1024 entries of 8 magnitudes from {8, 25, 43}.
extern const std::array<uint64_t, 1024> kIq2sGrid;
/// iq3_xxs: 256 entries of 4 magnitudes from {4, 12, 20, 28, 36, 44, 52, 62}.
extern const std::array<uint32_t, 256> kIq3xxsGrid;
/// iq3_s: 512 entries of 4 magnitudes from {1, 3, ..., 15}.
extern const std::array<uint32_t, 512> kIq3sGrid;
/// iq1_s / iq1_m: 2048 entries of 8 int8 values from {−1, 0, 1}.
extern const std::array<uint64_t, 2048> kIq1sGrid;
/// The sign byte of a 7-bit sign code c (iq2_xxs, iq2_xs, iq3_xxs): bits 0..6 are c, bit 7 makes
/// the count of set bits even (ggml's ksigns_iq2xs). Bit i set: value i of the 8 is negated.
extern const std::array<uint8_t, 128> kIqSigns;

/// The shift δ of iq1_s / iq1_m values, ±1/8 (ggml's IQ1S_DELTA / IQ1M_DELTA).
inline constexpr float kIq1Delta = 0.125f;

/// iq1_m: the super-block's f16 d, whose 4 nibbles are the top nibbles of the 4 little-endian
/// scale words (nibble w of d in word w).
inline uint16_t iq1_m_d(const block_iq1_m& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                  (sc[3] & 0xF000));
}

/// iq1_m: the 3-bit scale code of half-sub-block h (0..15, 16 values each): bits 3·(h % 4) of
/// scale word h / 4.
inline int iq1_m_scale(const block_iq1_m& b, int h) {
  uint16_t w;
  std::memcpy(&w, b.scales + 2 * (h / 4), 2);
  return (w >> (3 * (h % 4))) & 7;
}

}  // namespace kvrun

// kv_layout.h — the byte layout of one token's K or V in the KV cache, for every cache type.
//
// This is the single source of the KV memory math: `kvrun info` prints it and the KV block pool
// allocates it (docs/formats.md has the table). One *row* is one token's K (or V) for one layer:
// n_head_kv × head_dim values, heads contiguous. Per type:
//   f32, f16, bf16   plain values, row_bytes = n · elem_bytes
//   q8_0, q4_0       the row is cut into GGUF blocks of 32 values (a block may span heads when
//                    head_dim < 32, which is what lets head_dim 8 use them); the row is
//                    zero-padded up to a whole number of blocks
//   fp8_e4m3/e5m2    one byte per value plus one scale byte per head (E8M0: the scale is 2^(b-127),
//                    chosen per token per head from the absmax so nothing saturates)
//   nvfp4            blocks of 16 E2M1 values with an E4M3 scale (9 bytes per 16 values) plus an
//                    FP32 second-level scale per *scale group* of lcm(head_dim, 16) values (per
//                    head when head_dim is a multiple of 16), row zero-padded to whole groups
// where n = n_head_kv · head_dim. Byte order inside a row: the values or blocks first (nvfp4:
// group after group), then the scales (fp8: n_head_kv E8M0 bytes; nvfp4: one little-endian FP32
// per scale group). Padding values are encoded as zeros.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dtype.h"

namespace kvrun {

/// The KV cache element types users can choose (-ctk / -ctv), in display order.
inline constexpr DType kKvCacheTypes[] = {DType::F32,      DType::F16,  DType::BF16,
                                          DType::Q8_0,     DType::Q4_0, DType::FP8_E4M3,
                                          DType::FP8_E5M2, DType::NVFP4};

/// Parses a cache type name as users write it: f32, f16, bf16, q8_0, q4_0, fp8 (= fp8_e4m3),
/// fp8_e4m3, fp8_e5m2, nvfp4. nullopt for anything else.
std::optional<DType> kv_type_from_name(std::string_view name);

/// The user-facing name of a KV cache type ("fp8_e4m3", ...).
const char* kv_type_name(DType t);

/// Bytes of one row (one token, one layer, K or V): n_head_kv × head_dim values in `type`,
/// scales and padding included (see the file comment). Throws std::invalid_argument for a type
/// that is not a KV cache type or a non-positive shape.
int64_t kv_row_bytes(DType type, int64_t n_head_kv, int64_t head_dim);

/// Bytes of KV cache per token over all layers: n_layer × (K row + V row), K rows of
/// n_head_kv × head_dim_k values and V rows of n_head_kv × head_dim_v values; head_dim_v = 0:
/// no V rows (MLA, whose one K row per layer holds the latent that V is read from).
int64_t kv_bytes_per_token(DType type_k, DType type_v, int64_t n_layer, int64_t n_head_kv,
                           int64_t head_dim_k, int64_t head_dim_v);

/// Whether a row of `type` with n_head_kv 1 keeps its values from `offset` on decodable as a row
/// of their own, starting `kv_row_bytes(type, 1, offset)` bytes in (what MLA's V, the latent
/// after the RoPE part of the K row, needs): f32, f16 and bf16 always, q8_0 and q4_0 when
/// `offset` is a multiple of their 32-value blocks; never fp8 or nvfp4, whose scales sit at the
/// end of the row.
bool kv_type_holds_mla(DType type, int64_t offset);

/// Encodes one row: x holds n_head_kv × head_dim floats (head after head); `row` receives
/// kv_row_bytes(type, n_head_kv, head_dim) bytes. fp8 and nvfp4 choose their scales from the
/// data (per head, per scale group) so nothing saturates. The scalar reference codec; the
/// backends' kernels are tested against it. Throws std::invalid_argument for a non-KV type.
void kv_encode_row(DType type, int64_t n_head_kv, int64_t head_dim, const float* x, void* row);

/// Decodes one row written by kv_encode_row into n_head_kv × head_dim floats.
void kv_decode_row(DType type, int64_t n_head_kv, int64_t head_dim, const void* row, float* x);

}  // namespace kvrun

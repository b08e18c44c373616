// kv_row_ops.h — per-head access to encoded KV cache rows (ggml-like/kv_layout.h), for the
// paged attention kernels: decode one KV head of a row to f32, and where a row's head can be
// dotted in place, the byte offset of that head.
//
// A row holds n_head_kv × head_dim values in a KV cache type; head h is values
// [h·head_dim, (h+1)·head_dim). For q8_0 / q4_0 a head may start or end inside a block of 32
// (head_dim not a multiple of 32) and for nvfp4 inside a scale group (head_dim not a multiple of
// 16): kv_decode_head decodes just the blocks that overlap the head.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace kvrun::cpu {

/// Decodes head `h` of one encoded row (type `t`, n_head_kv × head_dim values) into
/// out[head_dim] floats; the values equal those kv_decode_row gives for that head.
void kv_decode_head(DType t, int64_t n_head_kv, int64_t head_dim, const uint8_t* row, int64_t h,
                    float* out);

/// Whether `t` is one of the FP8 KV types (one byte per value plus an E8M0 scale byte per head).
constexpr bool is_fp8(DType t) { return t == DType::FP8_E4M3 || t == DType::FP8_E5M2; }

/// Byte offset of head `h` inside a row when the head is a whole run of the type's elements or
/// blocks (f32, f16, bf16, fp8 values always — fp8's scale bytes follow all values; q8_0 / q4_0
/// when head_dim % 32 == 0), else −1.
int64_t kv_head_offset(DType t, int64_t head_dim, int64_t h);

}  // namespace kvrun::cpu

// quants_float.cpp — PLACEHOLDER: not implemented yet (being written now).
#include <cstdio>
#include <cstdlib>
#include "quants.h"
namespace kvrun {
static void not_implemented(const char* what) { std::fprintf(stderr, "kvrun: %s is not implemented\n", what); std::abort(); }
void dequantize_row_f32(const void*, float*, int64_t) { not_implemented("dequantize_row_f32"); }
void quantize_row_f32(const float*, void*, int64_t) { not_implemented("quantize_row_f32"); }
void dequantize_row_f16(const void*, float*, int64_t) { not_implemented("dequantize_row_f16"); }
void quantize_row_f16(const float*, void*, int64_t) { not_implemented("quantize_row_f16"); }
void dequantize_row_bf16(const void*, float*, int64_t) { not_implemented("dequantize_row_bf16"); }
void quantize_row_bf16(const float*, void*, int64_t) { not_implemented("quantize_row_bf16"); }
void dequantize_row_f64(const void*, float*, int64_t) { not_implemented("dequantize_row_f64"); }
void quantize_row_f64(const float*, void*, int64_t) { not_implemented("quantize_row_f64"); }
}  // namespace kvrun

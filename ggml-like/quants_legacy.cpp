// quants_legacy.cpp — PLACEHOLDER: not implemented yet (being written now).
#include <cstdio>
#include <cstdlib>
#include "quants.h"
namespace kvrun {
static void not_implemented(const char* what) { std::fprintf(stderr, "kvrun: %s is not implemented\n", what); std::abort(); }
void dequantize_row_q4_0(const void*, float*, int64_t) { not_implemented("dequantize_row_q4_0"); }
void quantize_row_q4_0(const float*, void*, int64_t) { not_implemented("quantize_row_q4_0"); }
void dequantize_row_q4_1(const void*, float*, int64_t) { not_implemented("dequantize_row_q4_1"); }
void quantize_row_q4_1(const float*, void*, int64_t) { not_implemented("quantize_row_q4_1"); }
void dequantize_row_q5_0(const void*, float*, int64_t) { not_implemented("dequantize_row_q5_0"); }
void quantize_row_q5_0(const float*, void*, int64_t) { not_implemented("quantize_row_q5_0"); }
void dequantize_row_q5_1(const void*, float*, int64_t) { not_implemented("dequantize_row_q5_1"); }
void quantize_row_q5_1(const float*, void*, int64_t) { not_implemented("quantize_row_q5_1"); }
void dequantize_row_q8_0(const void*, float*, int64_t) { not_implemented("dequantize_row_q8_0"); }
void quantize_row_q8_0(const float*, void*, int64_t) { not_implemented("quantize_row_q8_0"); }
void dequantize_row_q8_1(const void*, float*, int64_t) { not_implemented("dequantize_row_q8_1"); }
void quantize_row_q8_1(const float*, void*, int64_t) { not_implemented("quantize_row_q8_1"); }
void dequantize_row_iq4_nl(const void*, float*, int64_t) { not_implemented("dequantize_row_iq4_nl"); }
void quantize_row_iq4_nl(const float*, void*, int64_t) { not_implemented("quantize_row_iq4_nl"); }
}  // namespace kvrun

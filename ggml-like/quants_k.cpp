// quants_k.cpp — PLACEHOLDER: not implemented yet (being written now).
#include <cstdio>
#include <cstdlib>
#include "quants.h"
namespace kvrun {
static void not_implemented(const char* what) { std::fprintf(stderr, "kvrun: %s is not implemented\n", what); std::abort(); }
void dequantize_row_q2_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q2_K"); }
void quantize_row_q2_K(const float*, void*, int64_t) { not_implemented("quantize_row_q2_K"); }
void dequantize_row_q3_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q3_K"); }
void quantize_row_q3_K(const float*, void*, int64_t) { not_implemented("quantize_row_q3_K"); }
void dequantize_row_q4_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q4_K"); }
void quantize_row_q4_K(const float*, void*, int64_t) { not_implemented("quantize_row_q4_K"); }
void dequantize_row_q5_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q5_K"); }
void quantize_row_q5_K(const float*, void*, int64_t) { not_implemented("quantize_row_q5_K"); }
void dequantize_row_q6_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q6_K"); }
void quantize_row_q6_K(const float*, void*, int64_t) { not_implemented("quantize_row_q6_K"); }
void dequantize_row_q8_K(const void*, float*, int64_t) { not_implemented("dequantize_row_q8_K"); }
void quantize_row_q8_K(const float*, void*, int64_t) { not_implemented("quantize_row_q8_K"); }
}  // namespace kvrun

// quants_kv.cpp — PLACEHOLDER: not implemented yet (being written now).
#include <cstdio>
#include <cstdlib>
#include "quants.h"
namespace kvrun {
static void not_implemented(const char* what) { std::fprintf(stderr, "kvrun: %s is not implemented\n", what); std::abort(); }
void dequantize_row_fp8_e4m3(const void*, float*, int64_t) { not_implemented("dequantize_row_fp8_e4m3"); }
void quantize_row_fp8_e4m3(const float*, void*, int64_t) { not_implemented("quantize_row_fp8_e4m3"); }
void dequantize_row_fp8_e5m2(const void*, float*, int64_t) { not_implemented("dequantize_row_fp8_e5m2"); }
void quantize_row_fp8_e5m2(const float*, void*, int64_t) { not_implemented("quantize_row_fp8_e5m2"); }
void dequantize_row_nvfp4(const void*, float*, int64_t) { not_implemented("dequantize_row_nvfp4"); }
void quantize_row_nvfp4(const float*, void*, int64_t) { not_implemented("quantize_row_nvfp4"); }
}  // namespace kvrun

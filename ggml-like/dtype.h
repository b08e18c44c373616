// dtype.h — the element types kvrun knows and their one traits table.
//
// Every type is identified by `DType`. GGUF types use GGUF's own type ids (the `ggml_type`
// numbering written into GGUF tensor infos; see the GGUF spec, docs/gguf.md in ggml), so a
// tensor info's type field converts to a DType directly. The KV-cache-only formats (FP8 E4M3,
// FP8 E5M2, NVFP4) are not GGUF types; they get ids from 0x100 up, which a GGUF file can never
// name (the reader rejects them).
//
// `traits(DType)` returns one row of a single table: name, block geometry and the scalar
// reference codecs. The scalar codecs are the oracle for every SIMD and CUDA kernel.
//
// Row scales. FP8_E4M3, FP8_E5M2 and NVFP4 are used in the KV cache with a second-level scale
// that is held *outside* their blocks, by the container (one per token per KV head; see
// docs/formats.md). Their traits' `to_float` / `from_float` are the unit-scale codecs (second-level
// scale = 1). The scaled codecs for KV use live in quants_kv.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvrun {

/// Element types. Values below 0x100 are GGUF type ids (bit-exact GGUF block layouts).
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  MXFP4 = 39,
  // KV-cache formats (not GGUF types).
  FP8_E4M3 = 0x100,
  FP8_E5M2 = 0x101,
  NVFP4 = 0x102,
};

/// Converts `n` elements (a multiple of block_elems) from a row of this type to float.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
/// Converts `n` floats (a multiple of block_elems) to a row of this type (reference quantizer).
/// Null for integer types and for the grid-based i-quants (iq1/iq2/iq3: kvrun decodes and
/// multiplies them but has no quantizer for them).
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

/// One row of the traits table.
struct DTypeTraits {
  DType type;
  const char* name;        ///< lower-case name as llama.cpp prints it: "f32", "q4_K", "fp8_e4m3"...
  int32_t block_elems;     ///< elements per block (1 for scalar types)
  int32_t block_bytes;     ///< bytes per block, scales included
  bool quantized;          ///< true for block formats with scales (and the 8/4-bit float formats)
  bool gguf;               ///< true when the type may appear in a GGUF file
  ToFloatFn to_float;      ///< scalar reference decoder; null for integer types
  FromFloatFn from_float;  ///< scalar reference encoder; null for integer types and iq1/iq2/iq3
};

/// The traits row of `t`. Aborts with a message on a DType value outside the table (a bug:
/// untrusted ids must go through dtype_from_gguf_id first).
const DTypeTraits& traits(DType t);

/// Maps a GGUF type id to a DType; nullopt for ids kvrun does not know (or non-GGUF ids).
std::optional<DType> dtype_from_gguf_id(uint32_t id);

/// Finds a type by its name (as in `DTypeTraits::name`, case-insensitive); nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

/// All DTypes in the table, in table order; `n` receives the count.
const DType* all_dtypes(size_t* n);

/// Bytes taken by `n_elems` elements of type `t`; `n_elems` must be a multiple of block_elems.
/// Returns nullopt when it is not, or when the byte count would overflow int64.
std::optional<int64_t> row_bytes(DType t, int64_t n_elems);

}  // namespace kvrun

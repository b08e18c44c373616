// gguf.h — GGUF v2/v3 reader (mmap, zero-copy) and writer.
//
// The file format (GGUF specification, ggml docs/gguf.md; all integers little-endian):
//   1. magic      "GGUF" (4 bytes)
//   2. version    uint32: 2 or 3 (v1, with 32-bit counts, is refused)
//   3. n_tensors  uint64
//   4. n_kv       uint64
//   5. n_kv metadata pairs: key (string), value type (uint32), value
//        string = uint64 length + that many bytes (UTF-8, not NUL-terminated)
//        array  = element type (uint32) + uint64 count + the elements (arrays may nest)
//        value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (1 byte),
//                     8 string, 9 array, 10 u64, 11 i64, 12 f64
//   6. n_tensors tensor infos: name (string), n_dims (uint32, ≤ 4), ne[n_dims] (uint64 each,
//      ne[0] innermost), type (uint32, a GGUF type id), offset (uint64, relative to the data
//      section, a multiple of the alignment)
//   7. padding to `general.alignment` (uint32 metadata key; default 32, a power of two)
//   8. the data section: tensor data at the offsets above
//
// Hostile input: every count, length, offset and size is checked against the bytes actually
// present before it is used, so a truncated or malicious file produces a GgufError naming what
// is wrong and at which byte offset, never a crash or an allocation larger than the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dtype.h"
#include "tensor.h"

namespace kvrun::gguf {

/// Metadata value types, with GGUF's numbering.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

/// "u32", "string", "array"...; "?" for a value outside the enum.
const char* value_type_name(ValueType t);

/// Encoded bytes of one numeric or bool value of type `t` (1, 2, 4 or 8); 0 for STRING, ARRAY
/// and values outside the enum.
size_t value_type_size(ValueType t);

/// A malformed or unusable GGUF file. `offset` is the byte offset where the problem was found
/// (for accessor type errors: the offset of the key/value pair); what() reads
/// "gguf: <msg> (at byte offset N)" (the "gguf: " prefix is not doubled if `msg` has it).
class GgufError : public std::runtime_error {
 public:
  GgufError(const std::string& msg, uint64_t offset);
  uint64_t offset() const { return offset_; }

 private:
  uint64_t offset_;
};

/// One metadata value. Views (`str`, `raw`, `strs`) point into the mapped file and live as long
/// as the File that produced them.
struct Value {
  ValueType type = ValueType::U8;
  // Scalars: integers in `i` (or `u` for U64), floats in `f`, bools in `b`. The reader also
  // sets `u` for a non-negative integer and `i` for a U64 that fits int64 (else 0); the Writer
  // reads `i`, or `u` for U64.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string_view str;  ///< STRING
  // ARRAY:
  ValueType elem_type = ValueType::U8;  ///< element type
  uint64_t count = 0;                   ///< element count
  const uint8_t* raw = nullptr;         ///< numeric/bool elements: packed little-endian bytes
  std::vector<std::string_view> strs;   ///< string elements
  std::vector<Value> items;             ///< nested array elements
};

/// One key/value pair, in file order.
struct KeyValue {
  std::string_view key;
  Value value;
  uint64_t offset = 0;  ///< file offset of the pair (its key's length field); for error messages
};

/// Deepest nesting of arrays the reader accepts (an array of arrays has depth 2). Deeper input
/// is a GgufError; the limit bounds the parser's recursion.
constexpr int kMaxArrayDepth = 8;

/// One tensor info, with its data located and bounds-checked.
struct TensorInfo {
  std::string_view name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  uint64_t offset = 0;   ///< relative to the data section
  uint64_t n_bytes = 0;  ///< exact byte size of the data
  /// Into the mapping (read-only). Null for every tensor when open_metadata_only() found any
  /// tensor's data (partly) beyond the end of the file.
  const void* data = nullptr;
};

/// Gives back the whole pages inside [data, data + bytes) of a read-only file mapping
/// (madvise MADV_DONTNEED), once a device holds its own copy of a tensor: resident memory drops,
/// and a later read faults the pages in again from the file (nothing is lost). Partial pages at
/// either end are kept. A no-op for bytes == 0.
void release_mapped_pages(const void* data, size_t bytes);

/// A parsed GGUF file: owns the mapping (or a copy of an in-memory image).
class File {
 public:
  /// Maps and parses `path`. Throws GgufError (bad content) or std::system_error (cannot open).
  static File open(const std::string& path);
  /// Parses an in-memory image (copied). Throws GgufError. Used by tests and the fuzzer.
  static File from_memory(const void* data, size_t size);
  /// As open(), but a file whose tensor data lies (partly) beyond its end is accepted with
  /// TensorInfo::data = null for every tensor (metadata-only files written by tools and tests).
  /// Everything else is checked as in open(); a complete file gets its data pointers as with
  /// open().
  static File open_metadata_only(const std::string& path);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  uint32_t version() const;
  uint64_t alignment() const;  ///< general.alignment or 32
  /// File offset of the data section (end of the tensor infos rounded up to the alignment).
  /// May exceed file_size() for a file without tensors that ends unpadded (llama.cpp's vocab
  /// files do).
  uint64_t data_offset() const;
  uint64_t file_size() const;
  const std::string& path() const;  ///< empty for from_memory

  const std::vector<KeyValue>& metadata() const;
  const std::vector<TensorInfo>& tensors() const;

  /// The value of `key`, or null when absent.
  const Value* find(std::string_view key) const;
  /// The tensor named `name`, or null when absent.
  const TensorInfo* find_tensor(std::string_view name) const;

  // Typed accessors: nullopt when the key is absent; GgufError when present with a type that
  // does not convert (e.g. a string where a number is expected, or a negative value for an
  // unsigned read, or an integer out of int64 range).
  std::optional<int64_t> get_int(std::string_view key) const;   ///< any integer type
  std::optional<double> get_float(std::string_view key) const;  ///< f32/f64 or any integer
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  /// Arrays: element conversion as the scalar accessors. nullopt when absent.
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  /// A Tensor view of `info` (data may be null for metadata-only files).
  Tensor view(const TensorInfo& info) const;

  /// Number of files the model is split into: 1, or `split.count` of a model written by
  /// llama.cpp's gguf-split (keys `split.no`, `split.count`, `split.tensors.count`; parts named
  /// PREFIX-00001-of-0000N.gguf, PREFIX-00002-of-0000N.gguf, ...). open() and
  /// open_metadata_only() given the first part open the other parts from the same folder:
  /// tensors() then lists every part's tensors (each TensorInfo's offset is relative to its own
  /// part's data section, `data` points into that part's mapping); metadata(), version(),
  /// alignment(), data_offset() and file_size() are the first part's. A missing part, a part
  /// with another split.count or out of order, a tensor name in two parts or a tensor count
  /// other than split.tensors.count is a GgufError naming the part; so is opening a later part.
  int split_count() const;

  /// Byte extents of the file, or of every part of a split model summed: `file_bytes` on disk,
  /// tensor data `present` (what the file holds past its data section; for a split model, per
  /// part up to what that part's tensors address) and `needed` (what the tensor infos
  /// address). A download cut short has present < needed.
  struct DataExtent {
    uint64_t file_bytes = 0;
    uint64_t present = 0;
    uint64_t needed = 0;
  };
  DataExtent data_extent() const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  /// Opens and appends the other parts of a split model (see split_count()).
  void attach_split_parts(bool metadata_only);
  std::unique_ptr<Impl> impl_;
};

/// Builds a GGUF v3 file in memory and writes it out. Keys and tensors keep insertion order;
/// setting an existing key again replaces its value in place. Tensor data is laid out in
/// insertion order, each at the next multiple of the alignment.
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  /// Sets any value, e.g. one read from another File (copied; nested arrays allowed, up to
  /// kMaxArrayDepth). A U32 `general.alignment` also sets the alignment. Throws
  /// std::invalid_argument on an inconsistent Value (e.g. null `raw` with a non-zero count).
  void set_value(const std::string& key, const Value& v);
  /// Sets general.alignment (a power of two of at least 8, default 32; GGUF spec: a multiple of
  /// 8). Throws std::invalid_argument otherwise.
  void set_alignment(uint32_t alignment);

  /// Adds a tensor. `data` holds exactly row_bytes(type, ne[0]) * rows bytes and is copied;
  /// null `data` writes a metadata-only tensor info (no data is written for it, and its offset
  /// still advances as if it had been — the file is then "metadata-only").
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                  const void* data);

  /// Serialises the whole file. Throws std::invalid_argument on a bad tensor shape.
  std::vector<uint8_t> to_bytes() const;
  /// Writes to `path` (via a temporary file and rename). Throws std::system_error.
  void write(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrun::gguf

// gguf_reader.cpp — the hardened GGUF v2/v3 parser and File (mmap, zero-copy).
//
// Format: GGUF specification (ggml docs/gguf.md), summarised at the top of gguf.h. Every
// length, count, offset and size read from the file is checked against the bytes actually
// left before it is used or reserved, so hostile input yields a GgufError with a byte offset.
//
// Decisions on points the spec leaves open (documented here and in the tests):
//   * n_dims must be 1..4 (llama.cpp writes at least 1); every dimension must be >= 1. Empty
//     tensors (a dimension of 0) are refused: no real file we have uses them, and downstream
//     code may divide by a dimension.
//   * Duplicate keys and duplicate tensor names are errors (lookups would be ambiguous).
//   * general.alignment, when present, must be a U32 power of two of at least 8 (spec: uint32,
//     "a multiple of 8"): tensor data is then 8-byte aligned, as the block structs read in place
//     need (an alignment of 1 put a q5_0 block's f16 scale at an odd address: fuzz_gguf).
//   * Tensor data ranges must lie inside the file and must not overlap one another.
//   * Text is not validated as UTF-8; bool bytes other than 0/1 read as true.
//   * A file without tensors may end right after its pairs, unpadded (llama.cpp's vocab files).
//
// Memory: a vector is reserved only after its count is bounded by (bytes left) / (smallest
// encoding of one element), so parsing allocates at most a small multiple of the file size
// (about 12x in the worst case, arrays of empty nested arrays); test_gguf_hostile measures it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>

#include "gguf.h"

namespace kvrun::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader reads little-endian integers in place");

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// Smallest encoded size of one element of `t` (strings: the 8-byte length; arrays: type and
/// count). Used to bound counts by the bytes left before anything is reserved.
uint64_t min_elem_bytes(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return value_type_size(t);
}

bool is_known_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

/// A bounds-checked little-endian reader over [base, base + size).
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return base_ + pos_; }

  /// Throws unless `n` more bytes are present; `what` names the thing being read.
  void need(uint64_t n, const char* what) const {
    if (n > left())
      throw GgufError("truncated: " + std::string(what) + " needs " + std::to_string(n) +
                          " bytes but only " + std::to_string(left()) + " are left",
                      pos_);
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  /// A GGUF string: uint64 length + bytes. The view points into the buffer.
  std::string_view read_string(const char* what) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(what);
    if (len > left())
      throw GgufError(std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                          std::to_string(left()) + " bytes left",
                      at);
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

/// Reads a value type id and checks that it is one of the 13 GGUF types.
ValueType read_type(Cursor& c, const char* what) {
  const uint64_t at = c.pos();
  const auto t = c.read<uint32_t>(what);
  if (!is_known_type(t))
    throw GgufError("unknown " + std::string(what) + " " + std::to_string(t), at);
  return static_cast<ValueType>(t);
}

void parse_scalar(Cursor& c, Value& v) {
  switch (v.type) {
    case ValueType::U8:
      v.u = c.read<uint8_t>("u8 value");
      v.i = int64_t(v.u);
      break;
    case ValueType::I8:
      v.i = c.read<int8_t>("i8 value");
      break;
    case ValueType::U16:
      v.u = c.read<uint16_t>("u16 value");
      v.i = int64_t(v.u);
      break;
    case ValueType::I16:
      v.i = c.read<int16_t>("i16 value");
      break;
    case ValueType::U32:
      v.u = c.read<uint32_t>("u32 value");
      v.i = int64_t(v.u);
      break;
    case ValueType::I32:
      v.i = c.read<int32_t>("i32 value");
      break;
    case ValueType::U64:
      v.u = c.read<uint64_t>("u64 value");
      v.i = v.u <= uint64_t(kInt64Max) ? int64_t(v.u) : 0;
      break;
    case ValueType::I64:
      v.i = c.read<int64_t>("i64 value");
      break;
    case ValueType::F32:
      v.f = c.read<float>("f32 value");
      break;
    case ValueType::F64:
      v.f = c.read<double>("f64 value");
      break;
    case ValueType::BOOL:
      v.b = c.read<uint8_t>("bool value") != 0;
      break;
    case ValueType::STRING:
      v.str = c.read_string("string value");
      break;
    case ValueType::ARRAY:
      break;  // handled by parse_array
  }
  if (v.type != ValueType::U64 && v.i >= 0) v.u = uint64_t(v.i);
}

/// Parses the body of an array (element type, count, elements); `depth` is this array's
/// nesting level, 1 for a top-level array.
void parse_array(Cursor& c, Value& v, int depth) {
  const uint64_t at = c.pos();
  if (depth > kMaxArrayDepth)
    throw GgufError("arrays nested deeper than " + std::to_string(kMaxArrayDepth), at);
  v.type = ValueType::ARRAY;
  v.elem_type = read_type(c, "array element type");
  const uint64_t count_at = c.pos();
  v.count = c.read<uint64_t>("array count");
  const uint64_t min = min_elem_bytes(v.elem_type);
  if (v.count > c.left() / min)
    throw GgufError("array count " + std::to_string(v.count) + " of " +
                        value_type_name(v.elem_type) + " needs at least " + std::to_string(min) +
                        " bytes each but only " + std::to_string(c.left()) + " bytes are left",
                    count_at);
  switch (v.elem_type) {
    case ValueType::STRING:
      v.strs.reserve(size_t(v.count));
      for (uint64_t k = 0; k < v.count; ++k) v.strs.push_back(c.read_string("array string"));
      break;
    case ValueType::ARRAY:
      v.items.resize(size_t(v.count));
      for (auto& item : v.items) parse_array(c, item, depth + 1);
      break;
    default:
      v.raw = c.here();
      c.skip(v.count * min, "array elements");
  }
}

Value parse_value(Cursor& c, ValueType type) {
  Value v;
  v.type = type;
  if (type == ValueType::ARRAY)
    parse_array(c, v, 1);
  else
    parse_scalar(c, v);
  return v;
}

/// Where a tensor info was found, for error messages after parsing.
struct InfoPos {
  uint64_t at;  ///< file offset of the tensor info
};

}  // namespace

struct File::Impl {
  std::string path;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  void* map = nullptr;  ///< mmap'd region (munmap'd by the destructor), or null
  Buffer owned;         ///< from_memory's copy (64-byte aligned)
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<KeyValue> kv;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> kv_index;
  std::unordered_map<std::string_view, size_t> tensor_index;
  /// Split models: the first part's own tensors (tensors[0, n_own)), then the other parts,
  /// whose tensors follow in `tensors` (their names and data point into these mappings).
  size_t n_own = 0;
  std::vector<std::unique_ptr<Impl>> parts;

  ~Impl() {
    if (map) munmap(map, size_t(size));
  }

  /// Opens and maps `path` read-only (the descriptor is closed again). Throws system_error.
  static std::unique_ptr<Impl> map_file(const std::string& path);

  void parse(bool metadata_only);
  void parse_header(Cursor& c, uint64_t* n_tensors, uint64_t* n_kv);
  void parse_kv(Cursor& c, uint64_t n_kv);
  void parse_tensor_infos(Cursor& c, uint64_t n_tensors, std::vector<InfoPos>* where);
  void parse_one_tensor(Cursor& c, TensorInfo& t);
  void locate_data(const std::vector<InfoPos>& where, bool metadata_only);
};

void File::Impl::parse_header(Cursor& c, uint64_t* n_tensors, uint64_t* n_kv) {
  c.need(4, "magic");
  if (std::memcmp(c.here(), "GGUF", 4) != 0) throw GgufError("bad magic (not a GGUF file)", 0);
  c.skip(4, "magic");
  version = c.read<uint32_t>("version");
  if (version == 1)
    throw GgufError("GGUF version 1 (32-bit counts) is not supported; convert the file to v3", 4);
  if (version != 2 && version != 3)
    throw GgufError("unsupported GGUF version " + std::to_string(version), 4);
  *n_tensors = c.read<uint64_t>("tensor count");
  *n_kv = c.read<uint64_t>("metadata count");
  // Each pair needs >= 13 bytes (key length, type, 1-byte value); each tensor info >= 32
  // (name length, n_dims, one dimension, type, offset).
  if (*n_kv > c.left() / 13)
    throw GgufError("metadata count " + std::to_string(*n_kv) + " is impossible with " +
                        std::to_string(c.left()) + " bytes left",
                    16);
  if (*n_tensors > c.left() / 32)
    throw GgufError("tensor count " + std::to_string(*n_tensors) + " is impossible with " +
                        std::to_string(c.left()) + " bytes left",
                    8);
}

void File::Impl::parse_kv(Cursor& c, uint64_t n_kv) {
  kv.reserve(size_t(n_kv));
  kv_index.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    KeyValue pair;
    pair.offset = c.pos();
    pair.key = c.read_string("key");
    const uint64_t type_at = c.pos();
    const ValueType type = read_type(c, "value type");
    pair.value = parse_value(c, type);
    if (!kv_index.emplace(pair.key, kv.size()).second)
      throw GgufError("duplicate key '" + std::string(pair.key) + "'", pair.offset);
    if (pair.key == "general.alignment") {
      if (type != ValueType::U32)
        throw GgufError(
            "general.alignment has type " + std::string(value_type_name(type)) + ", expected u32",
            type_at);
      const uint64_t a = pair.value.u;
      if (a == 0 || (a & (a - 1)) != 0)
        throw GgufError("general.alignment " + std::to_string(a) + " is not a power of two",
                        type_at + 4);
      if (a < 8)
        throw GgufError("general.alignment " + std::to_string(a) +
                            " is below 8 (the GGUF spec asks for a multiple of 8)",
                        type_at + 4);
      alignment = a;
    }
    kv.push_back(std::move(pair));
  }
}

void File::Impl::parse_one_tensor(Cursor& c, TensorInfo& t) {
  const uint64_t at = c.pos();
  t.name = c.read_string("tensor name");
  const std::string who = "tensor '" + std::string(t.name) + "'";
  const uint64_t dims_at = c.pos();
  const auto n_dims = c.read<uint32_t>("tensor n_dims");
  if (n_dims == 0 || n_dims > uint32_t(kMaxDims))
    throw GgufError(who + " has n_dims " + std::to_string(n_dims) + " (must be 1..4)", dims_at);
  t.n_dims = int(n_dims);
  int64_t n_elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne_at = c.pos();
    const auto ne = c.read<uint64_t>("tensor dimension");
    if (ne == 0 || ne > uint64_t(kInt64Max))
      throw GgufError(who + " dimension " + std::to_string(d) + " is " +
                          (ne == 0 ? std::string("0 (empty tensors are not supported)")
                                   : std::to_string(int64_t(ne)) + " (not positive)"),
                      ne_at);
    if (int64_t(ne) > kInt64Max / n_elems)
      throw GgufError(who + " element count overflows int64", ne_at);
    t.ne[d] = int64_t(ne);
    n_elems *= int64_t(ne);
  }
  const uint64_t type_at = c.pos();
  const auto type_id = c.read<uint32_t>("tensor type");
  const auto type = dtype_from_gguf_id(type_id);
  if (!type) throw GgufError(who + " has unknown type id " + std::to_string(type_id), type_at);
  t.type = *type;
  const DTypeTraits& tr = traits(t.type);
  if (t.ne[0] % tr.block_elems != 0)
    throw GgufError(who + " row of " + std::to_string(t.ne[0]) + " elements is not a multiple of " +
                        tr.name + "'s block of " + std::to_string(tr.block_elems),
                    at);
  const auto rb = row_bytes(t.type, t.ne[0]);
  if (!rb) throw GgufError(who + " byte size overflows int64", at);
  const int64_t rows = n_elems / t.ne[0];
  if (*rb != 0 && rows > kInt64Max / *rb) throw GgufError(who + " byte size overflows int64", at);
  t.n_bytes = uint64_t(*rb * rows);
  const uint64_t off_at = c.pos();
  t.offset = c.read<uint64_t>("tensor offset");
  if (t.offset % alignment != 0)
    throw GgufError(who + " offset " + std::to_string(t.offset) +
                        " is not a multiple of the alignment " + std::to_string(alignment),
                    off_at);
}

void File::Impl::parse_tensor_infos(Cursor& c, uint64_t n_tensors, std::vector<InfoPos>* where) {
  if (n_tensors > c.left() / 32)
    throw GgufError("tensor count " + std::to_string(n_tensors) + " is impossible with " +
                        std::to_string(c.left()) + " bytes left",
                    c.pos());
  tensors.resize(size_t(n_tensors));
  where->resize(size_t(n_tensors));
  tensor_index.reserve(size_t(n_tensors));
  for (size_t k = 0; k < tensors.size(); ++k) {
    (*where)[k].at = c.pos();
    parse_one_tensor(c, tensors[k]);
    if (!tensor_index.emplace(tensors[k].name, k).second)
      throw GgufError("duplicate tensor name '" + std::string(tensors[k].name) + "'",
                      (*where)[k].at);
  }
}

void File::Impl::locate_data(const std::vector<InfoPos>& where, bool metadata_only) {
  // Ranges relative to the data section; check overflow, overlap, then the file end.
  std::vector<size_t> order(tensors.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 0; k < order.size(); ++k) {
    const TensorInfo& t = tensors[order[k]];
    if (t.n_bytes > std::numeric_limits<uint64_t>::max() - t.offset)
      throw GgufError("tensor '" + std::string(t.name) + "' data range overflows",
                      where[order[k]].at);
    if (k + 1 < order.size() && t.offset + t.n_bytes > tensors[order[k + 1]].offset)
      throw GgufError("tensor '" + std::string(t.name) + "' data [" + std::to_string(t.offset) +
                          ", " + std::to_string(t.offset + t.n_bytes) + ") overlaps tensor '" +
                          std::string(tensors[order[k + 1]].name) + "' at " +
                          std::to_string(tensors[order[k + 1]].offset),
                      where[order[k + 1]].at);
  }
  const uint64_t avail = size > data_offset ? size - data_offset : 0;
  bool all_present = true;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo& t = tensors[k];
    if (t.offset <= avail && t.n_bytes <= avail - t.offset) continue;
    if (!metadata_only)
      throw GgufError("tensor '" + std::string(t.name) + "' data [" + std::to_string(t.offset) +
                          ", " + std::to_string(t.offset + t.n_bytes) +
                          ") lies beyond the end of the file (data section has " +
                          std::to_string(avail) + " bytes)",
                      where[k].at);
    all_present = false;
  }
  for (auto& t : tensors) t.data = all_present ? base + data_offset + t.offset : nullptr;
}

void File::Impl::parse(bool metadata_only) {
  Cursor c(base, size);
  uint64_t n_tensors = 0, n_kv = 0;
  parse_header(c, &n_tensors, &n_kv);
  parse_kv(c, n_kv);
  std::vector<InfoPos> where;
  parse_tensor_infos(c, n_tensors, &where);
  // Padding to the alignment; a file with no tensors may end right after the infos.
  data_offset = (c.pos() + alignment - 1) / alignment * alignment;
  locate_data(where, metadata_only);
}

std::unique_ptr<File::Impl> File::Impl::map_file(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "gguf: cannot open " + path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), "gguf: cannot stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::system_error(EINVAL, std::generic_category(), "gguf: not a regular file: " + path);
  }
  impl->size = uint64_t(st.st_size);
  if (impl->size > 0) {
    void* p = mmap(nullptr, size_t(impl->size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw std::system_error(err, std::generic_category(), "gguf: cannot mmap " + path);
    }
    impl->map = p;
    impl->base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return impl;
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  auto impl = Impl::map_file(path);
  impl->parse(false);
  File f(std::move(impl));
  f.attach_split_parts(false);
  return f;
}

File File::open_metadata_only(const std::string& path) {
  auto impl = Impl::map_file(path);
  impl->parse(true);
  File f(std::move(impl));
  f.attach_split_parts(true);
  return f;
}

// ---- split models: llama.cpp's gguf-split (examples/gguf-split; its split.* keys and its
// "%s-%05d-of-%05d.gguf" part names) ----

namespace {

constexpr const char* kSplitNo = "split.no";  // 0-based part number (u16)
constexpr const char* kSplitCount = "split.count";
constexpr const char* kSplitTensors = "split.tensors.count";

/// "PREFIX-00002-of-00005.gguf" → PREFIX, 2, 5. False for any other name.
bool parse_split_name(const std::string& path, std::string* prefix, int* no, int* count) {
  constexpr size_t kTail = 20;  // "-NNNNN-of-NNNNN.gguf"
  if (path.size() <= kTail) return false;
  const std::string t = path.substr(path.size() - kTail);
  if (t[0] != '-' || t.compare(6, 4, "-of-") != 0 || t.compare(15, 5, ".gguf") != 0) return false;
  for (size_t i : {1u, 2u, 3u, 4u, 5u, 10u, 11u, 12u, 13u, 14u})
    if (t[i] < '0' || t[i] > '9') return false;
  *prefix = path.substr(0, path.size() - kTail);
  *no = std::stoi(t.substr(1, 5));
  *count = std::stoi(t.substr(10, 5));
  return true;
}

std::string split_part_name(const std::string& prefix, int64_t no, int64_t count) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05lld-of-%05lld.gguf", (long long)no, (long long)count);
  return prefix + tail;
}

/// A GgufError about part `path` of a split model, keeping the part's own message and offset.
GgufError part_error(const std::string& path, const GgufError& e) {
  std::string msg = e.what();
  if (msg.rfind("gguf: ", 0) == 0) msg.erase(0, 6);
  if (const size_t at = msg.rfind(" (at byte offset "); at != std::string::npos) msg.erase(at);
  return GgufError("split part " + path + ": " + msg, e.offset());
}

}  // namespace

void File::attach_split_parts(bool metadata_only) {
  const std::optional<int64_t> count = get_int(kSplitCount);
  impl_->n_own = impl_->tensors.size();
  if (!count || *count == 1) return;
  const std::string& path = impl_->path;
  if (*count < 1 || *count > 99999)
    throw GgufError(
        std::string(kSplitCount) + " " + std::to_string(*count) + " is not a number of parts", 0);
  const int64_t no = get_int(kSplitNo).value_or(0);
  std::string prefix;
  int name_no = 0, name_count = 0;
  const bool named = parse_split_name(path, &prefix, &name_no, &name_count);
  if (no != 0)
    throw GgufError(path + " is part " + std::to_string(no + 1) + " of " + std::to_string(*count) +
                        " of a split model: open its first part" +
                        (named ? " (" + split_part_name(prefix, 1, *count) + ")" : ""),
                    0);
  if (!named || name_no != 1 || name_count != *count)
    throw GgufError(path + " is the first of " + std::to_string(*count) +
                        " parts of a split model, but its name is not PREFIX-00001-of-" +
                        split_part_name("", *count, *count).substr(10) +
                        " (gguf-split's naming), so the other parts cannot be found",
                    0);
  bool all_data = true;
  for (const TensorInfo& t : impl_->tensors) all_data = all_data && t.data;
  for (int64_t k = 2; k <= *count; ++k) {
    const std::string pp = split_part_name(prefix, k, *count);
    std::unique_ptr<Impl> part;
    try {
      part = Impl::map_file(pp);
    } catch (const std::system_error& e) {
      throw GgufError("split model " + path + ": part " + std::to_string(k) + " of " +
                          std::to_string(*count) + " cannot be opened: " + e.what(),
                      0);
    }
    try {
      part->parse(metadata_only);
    } catch (const GgufError& e) {
      throw part_error(pp, e);
    }
    File pf(std::move(part));
    if (pf.get_int(kSplitNo).value_or(-1) != k - 1 || pf.get_int(kSplitCount) != count)
      throw GgufError("split part " + pp + ": its split.no / split.count say it is not part " +
                          std::to_string(k) + " of " + std::to_string(*count),
                      0);
    if (pf.get_int(kSplitTensors) != get_int(kSplitTensors))
      throw GgufError("split part " + pp + ": its " + std::string(kSplitTensors) +
                          " differs from the first part's",
                      0);
    for (const TensorInfo& t : pf.impl_->tensors) {
      if (!impl_->tensor_index.emplace(t.name, impl_->tensors.size()).second)
        throw GgufError("split part " + pp + ": tensor '" + std::string(t.name) +
                            "' is also in an earlier part",
                        0);
      impl_->tensors.push_back(t);
      all_data = all_data && t.data;
    }
    impl_->parts.push_back(std::move(pf.impl_));
  }
  if (const auto n = get_int(kSplitTensors); n && uint64_t(*n) != impl_->tensors.size())
    throw GgufError("split model " + path + ": " + std::string(kSplitTensors) + " is " +
                        std::to_string(*n) + " but its parts hold " +
                        std::to_string(impl_->tensors.size()) + " tensors",
                    0);
  if (!all_data)  // metadata_only: as for one file, no data pointers unless all data is there
    for (TensorInfo& t : impl_->tensors) t.data = nullptr;
}

int File::split_count() const { return 1 + int(impl_->parts.size()); }

File::DataExtent File::data_extent() const {
  DataExtent e;
  // A part's bytes past its last tensor do not make up for another part cut short.
  const bool split = !impl_->parts.empty();
  auto add = [&e, split](const Impl& im, size_t n_tensors) {
    e.file_bytes += im.size;
    uint64_t end = 0;
    for (size_t k = 0; k < n_tensors; ++k)
      end = std::max(end, im.tensors[k].offset + im.tensors[k].n_bytes);
    const uint64_t avail = im.size > im.data_offset ? im.size - im.data_offset : 0;
    e.present += split ? std::min(avail, end) : avail;
    e.needed += end;
  };
  add(*impl_, impl_->n_own);
  for (const auto& p : impl_->parts) add(*p, p->tensors.size());
  return e;
}

File File::from_memory(const void* data, size_t size) {
  auto impl = std::make_unique<Impl>();
  if (size > 0) {
    impl->owned = Buffer(size);
    std::memcpy(impl->owned.data(), data, size);
    impl->base = static_cast<const uint8_t*>(impl->owned.data());
  }
  impl->size = size;
  impl->parse(false);
  return File(std::move(impl));
}

uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->size; }
const std::string& File::path() const { return impl_->path; }
const std::vector<KeyValue>& File::metadata() const { return impl_->kv; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

void release_mapped_pages(const void* data, size_t bytes) {
  if (!data || bytes == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = uintptr_t(data), e = b + bytes;
  const uintptr_t pb = (b + page - 1) / page * page, pe = e / page * page;
  if (pe > pb) madvise(reinterpret_cast<void*>(pb), pe - pb, MADV_DONTNEED);
}

}  // namespace kvrun::gguf

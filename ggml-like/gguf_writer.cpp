// gguf_writer.cpp — GGUF v3 writer (see gguf.h; format: GGUF specification, ggml docs/gguf.md).
//
// Layout written: header (magic, version 3, n_tensors, n_kv), the pairs in insertion order, the
// tensor infos in insertion order, zero padding to the alignment (only when there are tensors:
// a metadata-only file without tensors ends after its pairs), then the data section: each
// tensor at the next multiple of the alignment after the previous one, each followed by zero
// padding to the alignment. Tensors added without data (metadata-only) take their place in the
// offsets; gaps before a later tensor that has data are zero-filled, and nothing is written after
// the last tensor that has data.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

#include "gguf.h"

namespace kvrun::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF writer emits host integers as little-endian");

namespace {

using Bytes = std::vector<uint8_t>;
using Sink = std::function<void(const void*, size_t)>;

/// Appends `n` bytes (resize + memcpy: vector::insert of a tiny range trips a GCC 12 false
/// -Wstringop-overflow).
void put_bytes(Bytes& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <class T>
void put(Bytes& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_str(Bytes& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

/// Scalars as gguf.h's Value documents them: integers in `i` (U64 in `u`), floats in `f`.
void put_scalar(Bytes& out, const Value& v) {
  switch (v.type) {
    case ValueType::U8:
      put<uint8_t>(out, uint8_t(v.i));
      break;
    case ValueType::I8:
      put<int8_t>(out, int8_t(v.i));
      break;
    case ValueType::U16:
      put<uint16_t>(out, uint16_t(v.i));
      break;
    case ValueType::I16:
      put<int16_t>(out, int16_t(v.i));
      break;
    case ValueType::U32:
      put<uint32_t>(out, uint32_t(v.i));
      break;
    case ValueType::I32:
      put<int32_t>(out, int32_t(v.i));
      break;
    case ValueType::U64:
      put<uint64_t>(out, v.u);
      break;
    case ValueType::I64:
      put<int64_t>(out, v.i);
      break;
    case ValueType::F32:
      put<float>(out, float(v.f));
      break;
    case ValueType::F64:
      put<double>(out, v.f);
      break;
    case ValueType::BOOL:
      put<uint8_t>(out, v.b ? 1 : 0);
      break;
    case ValueType::STRING:
      put_str(out, v.str);
      break;
    case ValueType::ARRAY:
      break;
  }
}

/// Element type, count and elements of array `v` (nesting level `depth`, 1 at the top).
void put_array_body(Bytes& out, const Value& v, int depth) {
  if (depth > kMaxArrayDepth)
    throw std::invalid_argument("gguf: arrays nested deeper than " +
                                std::to_string(kMaxArrayDepth));
  if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(ValueType::F64))
    throw std::invalid_argument("gguf: array with an unknown element type");
  put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
  put<uint64_t>(out, v.count);
  if (v.elem_type == ValueType::STRING) {
    if (v.strs.size() != v.count)
      throw std::invalid_argument("gguf: string array count does not match its strings");
    for (auto s : v.strs) put_str(out, s);
  } else if (v.elem_type == ValueType::ARRAY) {
    if (v.items.size() != v.count)
      throw std::invalid_argument("gguf: nested array count does not match its items");
    for (const auto& item : v.items) {
      if (item.type != ValueType::ARRAY)
        throw std::invalid_argument("gguf: an item of an array of arrays is not an array");
      put_array_body(out, item, depth + 1);
    }
  } else {
    const size_t sz = value_type_size(v.elem_type);
    if (v.count > std::numeric_limits<size_t>::max() / sz)
      throw std::invalid_argument("gguf: array too large");
    if (v.count > 0 && !v.raw) throw std::invalid_argument("gguf: numeric array without data");
    put_bytes(out, v.raw, size_t(v.count) * sz);
  }
}

/// The type tag and encoding of `v`.
Bytes encode(const Value& v) {
  if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(ValueType::F64))
    throw std::invalid_argument("gguf: value with an unknown type");
  Bytes out;
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type == ValueType::ARRAY)
    put_array_body(out, v, 1);
  else
    put_scalar(out, v);
  return out;
}

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void put_zeros(const Sink& sink, uint64_t n) {
  static const uint8_t kZeros[4096] = {};
  while (n > 0) {
    const size_t k = size_t(std::min<uint64_t>(n, sizeof(kZeros)));
    sink(kZeros, k);
    n -= k;
  }
}

struct TensorEntry {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  uint64_t n_bytes = 0;
  bool has_data = false;
  Bytes data;
};

}  // namespace

struct Writer::Impl {
  std::vector<std::pair<std::string, Bytes>> kv;  ///< key → type tag + encoded value
  std::vector<TensorEntry> tensors;
  uint32_t alignment = 32;

  void set(const std::string& key, Bytes bytes) {
    for (auto& [k, b] : kv)
      if (k == key) {
        b = std::move(bytes);
        return;
      }
    kv.emplace_back(key, std::move(bytes));
  }
  void emit(const Sink& sink) const;
};

void Writer::Impl::emit(const Sink& sink) const {
  Bytes head;
  put_bytes(head, "GGUF", 4);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors.size());
  put<uint64_t>(head, kv.size());
  for (const auto& [key, bytes] : kv) {
    put_str(head, key);
    put_bytes(head, bytes.data(), bytes.size());
  }
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  size_t last_with_data = 0;  // one past the last tensor that has data
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorEntry& t = tensors[k];
    put_str(head, t.name);
    put<uint32_t>(head, uint32_t(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(head, uint64_t(n));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, next);
    offsets.push_back(next);
    next = align_up(next + t.n_bytes, alignment);
    if (t.has_data) last_with_data = k + 1;
  }
  // Padding before the data section; a file without tensors ends right after its pairs.
  if (!tensors.empty()) head.resize(size_t(align_up(head.size(), alignment)), 0);
  sink(head.data(), head.size());
  uint64_t pos = 0;  // relative to the data section
  for (size_t k = 0; k < last_with_data; ++k) {
    const TensorEntry& t = tensors[k];
    put_zeros(sink, offsets[k] - pos);
    if (t.has_data)
      sink(t.data.data(), t.data.size());
    else
      put_zeros(sink, t.n_bytes);
    pos = offsets[k] + t.n_bytes;
    const uint64_t end = align_up(pos, alignment);
    put_zeros(sink, end - pos);
    pos = end;
  }
}

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;

void Writer::set_value(const std::string& key, const Value& v) {
  if (key == "general.alignment" && v.type == ValueType::U32) {
    set_alignment(uint32_t(v.i));
    return;
  }
  impl_->set(key, encode(v));
}

void Writer::set_u8(const std::string& key, uint8_t x) {
  Value v = scalar(ValueType::U8);
  v.i = x;
  set_value(key, v);
}
void Writer::set_i8(const std::string& key, int8_t x) {
  Value v = scalar(ValueType::I8);
  v.i = x;
  set_value(key, v);
}
void Writer::set_u16(const std::string& key, uint16_t x) {
  Value v = scalar(ValueType::U16);
  v.i = x;
  set_value(key, v);
}
void Writer::set_i16(const std::string& key, int16_t x) {
  Value v = scalar(ValueType::I16);
  v.i = x;
  set_value(key, v);
}
void Writer::set_u32(const std::string& key, uint32_t x) {
  Value v = scalar(ValueType::U32);
  v.i = x;
  set_value(key, v);
}
void Writer::set_i32(const std::string& key, int32_t x) {
  Value v = scalar(ValueType::I32);
  v.i = x;
  set_value(key, v);
}
void Writer::set_u64(const std::string& key, uint64_t x) {
  Value v = scalar(ValueType::U64);
  v.u = x;
  set_value(key, v);
}
void Writer::set_i64(const std::string& key, int64_t x) {
  Value v = scalar(ValueType::I64);
  v.i = x;
  set_value(key, v);
}
void Writer::set_f32(const std::string& key, float x) {
  Value v = scalar(ValueType::F32);
  v.f = x;
  set_value(key, v);
}
void Writer::set_f64(const std::string& key, double x) {
  Value v = scalar(ValueType::F64);
  v.f = x;
  set_value(key, v);
}
void Writer::set_bool(const std::string& key, bool x) {
  Value v = scalar(ValueType::BOOL);
  v.b = x;
  set_value(key, v);
}
void Writer::set_string(const std::string& key, const std::string& x) {
  Value v = scalar(ValueType::STRING);
  v.str = x;
  set_value(key, v);
}

void Writer::set_string_array(const std::string& key, const std::vector<std::string>& x) {
  Value v = scalar(ValueType::ARRAY);
  v.elem_type = ValueType::STRING;
  v.count = x.size();
  v.strs.assign(x.begin(), x.end());
  set_value(key, v);
}

void Writer::set_f32_array(const std::string& key, const std::vector<float>& x) {
  Value v = scalar(ValueType::ARRAY);
  v.elem_type = ValueType::F32;
  v.count = x.size();
  v.raw = reinterpret_cast<const uint8_t*>(x.data());
  set_value(key, v);
}

void Writer::set_i32_array(const std::string& key, const std::vector<int32_t>& x) {
  Value v = scalar(ValueType::ARRAY);
  v.elem_type = ValueType::I32;
  v.count = x.size();
  v.raw = reinterpret_cast<const uint8_t*>(x.data());
  set_value(key, v);
}

void Writer::set_alignment(uint32_t alignment) {
  if (alignment < 8 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument(
        "gguf: alignment " + std::to_string(alignment) +
        " is not a power of two of at least 8 (GGUF spec: a multiple of 8)");
  impl_->alignment = alignment;
  Value v = scalar(ValueType::U32);
  v.i = alignment;
  impl_->set("general.alignment", encode(v));
}

void Writer::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                        const void* data) {
  if (ne.empty() || ne.size() > size_t(kMaxDims))
    throw std::invalid_argument("gguf: tensor '" + name + "' must have 1..4 dimensions");
  if (!traits(type).gguf)
    throw std::invalid_argument("gguf: tensor '" + name + "' has a type GGUF cannot store");
  for (const auto& t : impl_->tensors)
    if (t.name == name) throw std::invalid_argument("gguf: duplicate tensor '" + name + "'");
  int64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) throw std::invalid_argument("gguf: tensor '" + name + "' has a dimension <= 0");
    if (d > 0) {
      if (ne[d] > std::numeric_limits<int64_t>::max() / rows)
        throw std::invalid_argument("gguf: tensor '" + name + "' is too large");
      rows *= ne[d];
    }
  }
  const auto rb = row_bytes(type, ne[0]);
  if (!rb || (*rb > 0 && rows > std::numeric_limits<int64_t>::max() / *rb))
    throw std::invalid_argument("gguf: tensor '" + name + "' row of " + std::to_string(ne[0]) +
                                " elements does not fit type " + traits(type).name);
  TensorEntry t;
  t.name = name;
  t.type = type;
  t.ne = ne;
  t.n_bytes = uint64_t(*rb * rows);
  t.has_data = data != nullptr;
  if (data) {
    const auto* p = static_cast<const uint8_t*>(data);
    t.data.assign(p, p + t.n_bytes);
  }
  impl_->tensors.push_back(std::move(t));
}

std::vector<uint8_t> Writer::to_bytes() const {
  Bytes out;
  impl_->emit([&](const void* p, size_t n) { put_bytes(out, p, n); });
  return out;
}

void Writer::write(const std::string& path) const {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "gguf: cannot create " + tmp);
  int err = 0;
  impl_->emit([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0 && err == 0) {
      const ssize_t w = ::write(fd, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      b += w;
      n -= size_t(w);
    }
  });
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw std::system_error(err, std::generic_category(), "gguf: cannot write " + path);
  }
}

}  // namespace kvrun::gguf

// gguf_value.cpp — GgufError, value type names and File's typed accessors (see gguf.h).
//
// Conversions: get_int accepts every integer type (a u64 above INT64_MAX is an error);
// get_float accepts f32/f64 and every integer type; bool and string accessors accept only their
// own type. Array accessors apply the same rules per element. Array elements are stored packed
// and little-endian (GGUF spec), so they are decoded with memcpy (no alignment assumed).
#include <cstring>
#include <limits>
#include <string>

#include "gguf.h"

namespace kvrun::gguf {

namespace {

std::string with_offset(const std::string& msg, uint64_t offset) {
  const bool prefixed = msg.rfind("gguf:", 0) == 0;
  return (prefixed ? msg : "gguf: " + msg) + " (at byte offset " + std::to_string(offset) + ")";
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

/// The file offset of the pair holding `v` (for messages), or the file size.
uint64_t offset_of(const File& f, const Value* v) {
  for (const auto& kv : f.metadata())
    if (&kv.value == v) return kv.offset;
  return f.file_size();
}

[[noreturn]] void wrong_type(const File& f, std::string_view key, const Value* v,
                             const std::string& expected) {
  std::string got = value_type_name(v->type);
  if (v->type == ValueType::ARRAY) got += std::string(" of ") + value_type_name(v->elem_type);
  throw GgufError("key '" + std::string(key) + "' has type " + got + ", expected " + expected,
                  offset_of(f, v));
}

template <class T>
T load(const uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

/// Element `k` of a packed integer array as (value, ok); ok is false for a u64 > INT64_MAX.
bool int_elem(ValueType t, const uint8_t* raw, uint64_t k, int64_t* out) {
  switch (t) {
    case ValueType::U8:
      *out = load<uint8_t>(raw + k);
      return true;
    case ValueType::I8:
      *out = load<int8_t>(raw + k);
      return true;
    case ValueType::U16:
      *out = load<uint16_t>(raw + 2 * k);
      return true;
    case ValueType::I16:
      *out = load<int16_t>(raw + 2 * k);
      return true;
    case ValueType::U32:
      *out = load<uint32_t>(raw + 4 * k);
      return true;
    case ValueType::I32:
      *out = load<int32_t>(raw + 4 * k);
      return true;
    case ValueType::I64:
      *out = load<int64_t>(raw + 8 * k);
      return true;
    case ValueType::U64: {
      const auto u = load<uint64_t>(raw + 8 * k);
      *out = int64_t(u);
      return u <= uint64_t(std::numeric_limits<int64_t>::max());
    }
    default:
      return false;
  }
}

}  // namespace

GgufError::GgufError(const std::string& msg, uint64_t offset)
    : std::runtime_error(with_offset(msg, offset)), offset_(offset) {}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "?";
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type)) wrong_type(*this, key, v, "an integer");
  if (v->type == ValueType::U64 && v->u > uint64_t(std::numeric_limits<int64_t>::max()))
    throw GgufError(
        "key '" + std::string(key) + "' value " + std::to_string(v->u) + " is out of int64 range",
        offset_of(*this, v));
  return v->i;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::F32 || v->type == ValueType::F64) return v->f;
  if (v->type == ValueType::U64) return double(v->u);
  if (is_integer(v->type)) return double(v->i);
  wrong_type(*this, key, v, "a number");
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::BOOL) wrong_type(*this, key, v, "bool");
  return v->b;
}

std::optional<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(*this, key, v, "string");
  return v->str;
}

std::optional<std::vector<std::string_view>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING)
    wrong_type(*this, key, v, "array of string");
  return v->strs;
}

std::optional<std::vector<float>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const bool ok =
      v->type == ValueType::ARRAY && (v->elem_type == ValueType::F32 ||
                                      v->elem_type == ValueType::F64 || is_integer(v->elem_type));
  if (!ok) wrong_type(*this, key, v, "array of numbers");
  std::vector<float> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k) {
    if (v->elem_type == ValueType::F32) {
      out[k] = load<float>(v->raw + 4 * k);
    } else if (v->elem_type == ValueType::F64) {
      out[k] = float(load<double>(v->raw + 8 * k));
    } else if (v->elem_type == ValueType::U64) {
      out[k] = float(load<uint64_t>(v->raw + 8 * k));
    } else {
      int64_t x = 0;
      int_elem(v->elem_type, v->raw, k, &x);
      out[k] = float(x);
    }
  }
  return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::ARRAY || !is_integer(v->elem_type))
    wrong_type(*this, key, v, "array of integers");
  std::vector<int64_t> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k)
    if (!int_elem(v->elem_type, v->raw, k, &out[k]))
      throw GgufError("key '" + std::string(key) + "' element " + std::to_string(k) + " value " +
                          std::to_string(uint64_t(out[k])) + " is out of int64 range",
                      offset_of(*this, v));
  return out;
}

Tensor File::view(const TensorInfo& info) const {
  // The mapping is read-only: the view's data must not be written through.
  return Tensor::contiguous(info.type, const_cast<void*>(info.data), info.ne[0], info.ne[1],
                            info.ne[2], info.ne[3]);
}

}  // namespace kvrun::gguf

// fuzz_gguf.cpp — libFuzzer target for the GGUF reader (gguf.h).
//
// Each input is parsed with File::from_memory. Rejection must be a GgufError; anything else
// (a crash, a sanitizer report, another exception type) is a finding. An accepted file has
// every accessor and tensor view exercised, the first row of every tensor decoded with its
// type's reference codec, every tensor's first and last data byte read (so
// ASan sees any out-of-range pointer), and is then re-serialised with the Writer and parsed
// again: the copy must have the same keys, values and tensor bytes (an oracle for both sides).
//
// Built by tests/fuzz/CMakeLists.txt with clang++ -fsanitize=fuzzer,address,undefined; run by
// scripts/fuzz_gguf.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf.h"

namespace {

using kvrun::gguf::File;
using kvrun::gguf::GgufError;
using kvrun::gguf::Value;
using kvrun::gguf::ValueType;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_gguf: oracle failure: %s\n", what);
  std::abort();
}

volatile uint64_t g_sink = 0;  // keeps reads from being optimised away
void consume(uint64_t x) { g_sink = g_sink + x; }

/// Calls every typed accessor on `key`; each either converts or throws GgufError.
void touch_accessors(const File& f, std::string_view key) {
  auto guard = [](auto&& fn) {
    try {
      fn();
    } catch (const GgufError&) {
    }
  };
  guard([&] { consume(uint64_t(f.get_int(key).value_or(0))); });
  guard([&] { consume(uint64_t(f.get_float(key).value_or(0) != 0)); });
  guard([&] { consume(f.get_bool(key).value_or(false)); });
  guard([&] { consume(f.get_string(key).value_or("").size()); });
  guard([&] {
    if (auto a = f.get_string_array(key))
      for (auto s : *a) consume(s.empty() ? 0 : uint8_t(s.back()));
  });
  guard([&] { consume(f.get_float_array(key).value_or(std::vector<float>{}).size()); });
  guard([&] { consume(f.get_int_array(key).value_or(std::vector<int64_t>{}).size()); });
}

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (a.type != ValueType::ARRAY) {
    if (a.type == ValueType::F32 || a.type == ValueType::F64)
      return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;  // NaNs compare by bits
    return a.i == b.i && a.u == b.u && a.b == b.b && a.str == b.str;
  }
  if (a.elem_type != b.elem_type || a.count != b.count) return false;
  if (a.strs != b.strs || a.items.size() != b.items.size()) return false;
  for (size_t k = 0; k < a.items.size(); ++k)
    if (!same_value(a.items[k], b.items[k])) return false;
  if ((a.raw == nullptr) != (b.raw == nullptr)) return a.count == 0;
  if (a.raw == nullptr) return true;
  // Element size: the packed byte count is the distance to the next thing; compare via count.
  size_t sz = 0;
  switch (a.elem_type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      sz = 1;
      break;
    case ValueType::U16:
    case ValueType::I16:
      sz = 2;
      break;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      sz = 4;
      break;
    default:
      sz = 8;
  }
  return std::memcmp(a.raw, b.raw, size_t(a.count) * sz) == 0;
}

void round_trip(const File& f) {
  kvrun::gguf::Writer w;
  for (const auto& kv : f.metadata()) w.set_value(std::string(kv.key), kv.value);
  for (const auto& t : f.tensors())
    w.add_tensor(std::string(t.name), t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data);
  const auto bytes = w.to_bytes();
  File g = File::from_memory(bytes.data(), bytes.size());  // must not throw
  if (g.metadata().size() != f.metadata().size()) fail("key count");
  if (g.tensors().size() != f.tensors().size()) fail("tensor count");
  if (g.alignment() != f.alignment()) fail("alignment");
  for (size_t k = 0; k < f.metadata().size(); ++k) {
    if (g.metadata()[k].key != f.metadata()[k].key) fail("key");
    if (!same_value(g.metadata()[k].value, f.metadata()[k].value)) fail("value");
  }
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const auto& a = f.tensors()[k];
    const auto& b = g.tensors()[k];
    if (a.name != b.name || a.type != b.type || a.n_dims != b.n_dims || a.n_bytes != b.n_bytes)
      fail("tensor info");
    for (int d = 0; d < 4; ++d)
      if (a.ne[d] != b.ne[d]) fail("tensor shape");
    if (std::memcmp(a.data, b.data, size_t(a.n_bytes)) != 0) fail("tensor data");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    File f = File::from_memory(data, size);
    for (const auto& kv : f.metadata()) {
      if (f.find(kv.key) != &kv.value) fail("find");
      touch_accessors(f, kv.key);
      consume(std::string(kvrun::gguf::value_type_name(kv.value.type)).size());
    }
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) fail("find_tensor");
      if (!t.data) fail("null tensor data in a fully-checked file");
      const auto* p = static_cast<const uint8_t*>(t.data);
      consume(p[0] + p[t.n_bytes - 1]);
      kvrun::Tensor v = f.view(t);
      if (v.n_bytes() != t.n_bytes) fail("view size");
      // Decode the first row with the type's reference codec: every decoder must accept
      // arbitrary bytes (any scale, any code) without reading outside its row.
      if (kvrun::traits(t.type).to_float && v.ne[0] <= (1 << 16)) {
        std::vector<float> row(size_t(v.ne[0]));
        v.row_to_float(row.data(), 0);
        consume(row.empty() ? 0 : size_t(row.back() == row.back()));
      }
    }
    round_trip(f);
  } catch (const GgufError&) {
    // Rejected: the expected outcome for most inputs.
  }
  return 0;
}

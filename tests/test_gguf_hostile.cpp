// test_gguf_hostile.cpp — the GGUF reader on hostile input: each malformed file is built by hand
// (or from a Writer file, then patched) and must give a GgufError whose message names the
// problem, never a crash, and never an allocation beyond what the file's size justifies.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <random>

#include "gguf.h"
#include "test_util.h"

// ---- allocation tracking: replaces global operator new/delete for this test binary ----
namespace {
std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest{0};
std::atomic<size_t> g_total{0};

void* tracked_alloc(size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    g_total += n;
    size_t prev = g_largest.load();
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return tracked_alloc(n); }
void* operator new[](size_t n) { return tracked_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace kvrun::gguf {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

/// Hand assembly of GGUF bytes (layout: gguf.h).
struct G {
  Bytes b;
  static G header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    G g;
    g.raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
    return g;
  }
  G& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  G& u8(uint8_t v) { return raw(&v, 1); }
  G& u32(uint32_t v) { return raw(&v, 4); }
  G& u64(uint64_t v) { return raw(&v, 8); }
  G& str(std::string_view s) { return u64(s.size()).raw(s.data(), s.size()); }
  G& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  G& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (auto n : ne) u64(n);
    return u32(type).u64(offset);
  }
  G& pad(size_t align = 32) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  G& data(size_t n, uint8_t fill = 0x5a) {
    b.resize(b.size() + n, fill);
    return *this;
  }
};

/// Parses `bytes` and requires a GgufError mentioning `needle` (and at `offset` if given).
void expect_error(const Bytes& bytes, const std::string& needle,
                  std::optional<uint64_t> offset = std::nullopt) {
  try {
    File::from_memory(bytes.data(), bytes.size());
    ADD_FAILURE() << "accepted; expected a GgufError mentioning '" << needle << "'";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to mention: " << needle;
    EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    if (offset) {
      EXPECT_EQ(e.offset(), *offset) << e.what();
    }
  }
}

/// A valid small file with one F32 tensor of 8 elements (random data), for patching.
G one_tensor_file(std::vector<uint64_t> ne = {8}, uint32_t type = 0, uint64_t offset = 0,
                  size_t data_bytes = 32) {
  G g = G::header(1, 1);
  g.kv_u32("general.alignment", 32).tensor("t", std::move(ne), type, offset).pad();
  const auto rnd = test::random_floats(data_bytes / 4 + 1, 42);
  g.raw(rnd.data(), data_bytes);
  return g;
}

TEST(GgufHostile, HandBuiltBaselineIsAccepted) {
  // The builder's valid file parses: the cases below fail because of their one defect.
  const G g = one_tensor_file();
  File f = File::from_memory(g.b.data(), g.b.size());
  EXPECT_EQ(f.tensors().at(0).n_bytes, 32u);
  EXPECT_EQ(f.data_offset(), 96u);
}

TEST(GgufHostile, BadMagic) {
  G g = one_tensor_file();
  g.b[3] = 'X';
  expect_error(g.b, "bad magic", 0);
  expect_error(Bytes{'G', 'G'}, "truncated", 0);
  expect_error(Bytes{}, "magic", 0);
}

TEST(GgufHostile, VersionOneIsUnsupported) {
  expect_error(G::header(0, 0, 1).b, "version 1", 4);
  expect_error(G::header(0, 0, 1).b, "not supported");
}

TEST(GgufHostile, UnknownVersions) {
  expect_error(G::header(0, 0, 4).b, "unsupported GGUF version 4", 4);
  expect_error(G::header(0, 0, 0).b, "unsupported GGUF version 0", 4);
  expect_error(G::header(0, 0, 0x03000000).b, "unsupported GGUF version");  // big-endian 3
}

TEST(GgufHostile, AbsurdTensorCount) {
  expect_error(G::header(uint64_t(1) << 62, 0).b, "tensor count 4611686018427387904", 8);
  expect_error(G::header(1000, 0).data(100).b, "tensor count 1000 is impossible");
}

TEST(GgufHostile, AbsurdMetadataCount) {
  expect_error(G::header(0, kU64Max).b, "metadata count 18446744073709551615", 16);
  expect_error(G::header(0, 50).kv_u32("a", 1).b, "metadata count 50 is impossible");
}

TEST(GgufHostile, StringLengthBeyondTheFile) {
  G key = G::header(0, 1);
  key.u64(kU64Max).data(100);
  expect_error(key.b, "key length 18446744073709551615 exceeds the 100 bytes left", 24);
  G val = G::header(0, 1);
  val.str("k").u32(8).u64(101).data(100);
  expect_error(val.b, "string value length 101 exceeds the 100 bytes left", 24 + 9 + 4);
  G name = G::header(1, 0);
  name.u64(uint64_t(1) << 40).data(64);
  expect_error(name.b, "tensor name length 1099511627776 exceeds");
}

TEST(GgufHostile, ArrayCountsBeyondTheFile) {
  // u8 elements need 1 byte each, strings 8, nested arrays 12.
  G u8s = G::header(0, 1);
  u8s.str("a").u32(9).u32(0).u64(65).data(64);
  expect_error(u8s.b, "array count 65 of u8", 24 + 9 + 8);
  G strs = G::header(0, 1);
  strs.str("a").u32(9).u32(8).u64(9).data(64);
  expect_error(strs.b, "array count 9 of string needs at least 8 bytes each");
  G arrs = G::header(0, 1);
  arrs.str("a").u32(9).u32(9).u64(uint64_t(1) << 60).data(64);
  expect_error(arrs.b, "array count 1152921504606846976 of array");
  G f64s = G::header(0, 1);
  f64s.str("a").u32(9).u32(12).u64(kU64Max / 4).data(64);
  expect_error(f64s.b, "of f64");
}

/// A key "a" holding arrays nested `depth` levels deep (the innermost: one u8).
G nested_file(int depth) {
  G g = G::header(0, 1);
  g.str("a").u32(9);
  for (int d = 1; d < depth; ++d) g.u32(9).u64(1);
  g.u32(0).u64(1).u8(7);
  return g;
}

TEST(GgufHostile, ArraysNestedTooDeep) {
  const G ok = nested_file(kMaxArrayDepth);
  File f = File::from_memory(ok.b.data(), ok.b.size());
  const Value* v = f.find("a");
  for (int d = 1; d < kMaxArrayDepth; ++d) v = &v->items.at(0);
  EXPECT_EQ(v->elem_type, ValueType::U8);
  EXPECT_EQ(v->raw[0], 7);
  expect_error(nested_file(kMaxArrayDepth + 1).b, "nested deeper than 8");
  expect_error(nested_file(1000).b, "nested deeper than 8");
}

TEST(GgufHostile, UnknownValueTypes) {
  G g = G::header(0, 1);
  g.str("k").u32(13).u32(0);
  expect_error(g.b, "unknown value type 13", 24 + 9);
  G h = G::header(0, 1);
  h.str("k").u32(0xffffffffu).u64(0);
  expect_error(h.b, "unknown value type 4294967295");
  G a = G::header(0, 1);
  a.str("k").u32(9).u32(42).u64(0);
  expect_error(a.b, "unknown array element type 42", 24 + 9 + 4);
}

TEST(GgufHostile, DuplicateKeys) {
  G g = G::header(0, 3);
  g.kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 3);
  expect_error(g.b, "duplicate key 'a'", 24 + 2 * 17);
}

TEST(GgufHostile, DuplicateTensorNames) {
  G g = G::header(2, 0);
  g.tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().data(64);
  expect_error(g.b, "duplicate tensor name 'w'");
}

TEST(GgufHostile, TensorDimensionCounts) {
  G zero = G::header(1, 0);
  zero.str("t").u32(0).u32(0).u64(0).pad().data(32);
  expect_error(zero.b, "tensor 't' has n_dims 0", 24 + 9);
  expect_error(one_tensor_file({2, 2, 2, 2, 2}).b, "has n_dims 5");
  G huge = G::header(1, 0);
  huge.str("t").u32(0x80000000u).data(64);
  expect_error(huge.b, "has n_dims 2147483648");
}

TEST(GgufHostile, NonPositiveDimensions) {
  expect_error(one_tensor_file({8, 0}).b, "dimension 1 is 0");
  expect_error(one_tensor_file({uint64_t(-8)}).b, "dimension 0 is -8");
  expect_error(one_tensor_file({8, 1, kU64Max}).b, "dimension 2 is -1");
}

TEST(GgufHostile, ElementCountAndByteSizeOverflow) {
  expect_error(one_tensor_file({uint64_t(1) << 32, uint64_t(1) << 32}).b,
               "element count overflows int64");
  // 2^62 elements fit int64, but 2^62 f64 elements take 2^65 bytes.
  expect_error(one_tensor_file({uint64_t(1) << 31, uint64_t(1) << 31}, 28).b,
               "byte size overflows int64");
  expect_error(one_tensor_file({uint64_t(1) << 62}, 0).b, "byte size overflows");  // one row
}

TEST(GgufHostile, UnknownTensorTypes) {
  expect_error(one_tensor_file({8}, 4).b, "unknown type id 4");        // Q4_2, removed from GGUF
  expect_error(one_tensor_file({8}, 99).b, "unknown type id 99");      // never assigned
  expect_error(one_tensor_file({8}, 0x100).b, "unknown type id 256");  // kvrun-only FP8
  expect_error(one_tensor_file({8}, 0xffffffffu).b, "unknown type id 4294967295");
}

TEST(GgufHostile, RowNotAMultipleOfTheBlock) {
  // Q4_0 (id 2) has blocks of 32 elements: a row of 48 is malformed.
  expect_error(one_tensor_file({48, 2}, 2, 0, 64).b,
               "row of 48 elements is not a multiple of q4_0's block of 32");
  expect_error(one_tensor_file({100}, 12, 0, 64).b, "q4_K's block of 256");
}

TEST(GgufHostile, OffsetNotAligned) {
  expect_error(one_tensor_file({8}, 0, 16).b, "offset 16 is not a multiple of the alignment 32");
  G g = G::header(1, 1);
  g.kv_u32("general.alignment", 64).tensor("t", {8}, 0, 32).pad(64).data(64);
  expect_error(g.b, "offset 32 is not a multiple of the alignment 64");
}

TEST(GgufHostile, TensorDataBeyondTheFile) {
  G short_data = one_tensor_file({8}, 0, 0, 31);
  expect_error(short_data.b, "lies beyond the end of the file");
  expect_error(one_tensor_file({8}, 0, 64).b, "data [64, 96) lies beyond");
  expect_error(one_tensor_file({8}, 0, kU64Max - 31).b, "data range overflows");
  // Header padding missing: the data section would start past the end.
  G g = G::header(1, 0);
  g.tensor("t", {8}, 0, 0);
  expect_error(g.b, "lies beyond the end of the file");
}

TEST(GgufHostile, OverlappingTensors) {
  G g = G::header(3, 0);
  g.tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 128).tensor("c", {8}, 0, 32).pad().data(160);
  expect_error(g.b, "tensor 'a' data [0, 64) overlaps tensor 'c' at 32");
  G same = G::header(2, 0);
  same.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 0).pad().data(32);
  expect_error(same.b, "overlaps");
}

TEST(GgufHostile, BadAlignmentValues) {
  for (uint32_t a : {0u, 3u, 48u, 0xffffffffu}) {
    G g = G::header(0, 1);
    g.kv_u32("general.alignment", a);
    expect_error(g.b, "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  for (uint32_t a : {1u, 2u, 4u}) {  // powers of two below the spec's multiple of 8
    G g = G::header(0, 1);
    g.kv_u32("general.alignment", a);
    expect_error(g.b, "general.alignment " + std::to_string(a) + " is below 8");
  }
  G wide = G::header(0, 1);
  wide.str("general.alignment").u32(10).u64(32);
  expect_error(wide.b, "general.alignment has type u64, expected u32");
  G text = G::header(0, 1);
  text.str("general.alignment").u32(8).str("32");
  expect_error(text.b, "general.alignment has type string");
}

TEST(GgufHostile, TextIsNotValidatedAndBoolBytesAreLenient) {
  G g = G::header(0, 2);
  g.str("k\xff\xfe").u32(8).str("\xc3\x28 invalid utf-8").str("b").u32(7).u8(2);
  File f = File::from_memory(g.b.data(), g.b.size());
  EXPECT_EQ(*f.get_string("k\xff\xfe"), "\xc3\x28 invalid utf-8");
  EXPECT_TRUE(*f.get_bool("b"));
}

TEST(GgufHostile, MetadataOnlyAcceptsMissingDataButNothingElse) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvrun_gguf_hostile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const Bytes& b) {
    const std::string p = (dir / "f.gguf").string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    return p;
  };
  G g = one_tensor_file({8}, 0, 1 << 20, 0);  // data far beyond the end
  const std::string path = write(g.b);
  EXPECT_THROW(File::open(path), GgufError);
  File f = File::open_metadata_only(path);
  EXPECT_EQ(f.tensors().at(0).data, nullptr);
  G overlap = G::header(2, 0);
  overlap.tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad();
  try {
    File::open_metadata_only(write(overlap.b));
    ADD_FAILURE() << "overlap accepted";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// ---- truncation ----

Bytes small_valid_file() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("n", 5);
  w.set_f64("x", 0.25);
  w.set_string_array("tokens", {"a", "bc", "", "def"});
  w.set_f32_array("scores", test::random_floats(5, 3));
  w.set_bool("flag", true);
  const auto f32 = test::random_floats(2 * 32, 9);
  w.add_tensor("w", DType::F32, {32, 2}, f32.data());
  const Bytes q8(34 * 2, 0x11);
  w.add_tensor("q", DType::Q8_0, {64}, q8.data());
  return w.to_bytes();
}

/// Every prefix of `bytes` shorter than `complete` must be rejected with a GgufError.
void expect_every_prefix_rejected(const Bytes& bytes, size_t complete) {
  for (size_t n = 0; n < complete; ++n) {
    try {
      File::from_memory(bytes.data(), n);
      ADD_FAILURE() << "prefix of " << n << " bytes accepted";
      return;
    } catch (const GgufError&) {
    }
  }
}

TEST(GgufHostile, TruncationAtEveryLengthOfASmallFile) {
  const Bytes bytes = small_valid_file();
  File full = File::from_memory(bytes.data(), bytes.size());
  uint64_t end = 0;  // end of the last tensor's data: shorter prefixes are incomplete
  for (const auto& t : full.tensors())
    end = std::max(end, full.data_offset() + t.offset + t.n_bytes);
  ASSERT_LE(end, bytes.size());
  expect_every_prefix_rejected(bytes, size_t(end));
  for (size_t n = size_t(end); n <= bytes.size(); ++n)  // only trailing padding is missing
    EXPECT_NO_THROW(File::from_memory(bytes.data(), n)) << n;
}

TEST(GgufHostile, TruncatedFilesOnDiskThroughMmap) {
  const Bytes bytes = small_valid_file();
  const File full = File::from_memory(bytes.data(), bytes.size());
  const fs::path p = fs::temp_directory_path() / ("kvrun_gguf_trunc_" + std::to_string(::getpid()));
  std::mt19937 rng(11);
  std::vector<size_t> lengths = {0, 1, 4, 23, 24, bytes.size() / 2, bytes.size() - 100};
  for (int k = 0; k < 20; ++k) lengths.push_back(rng() % (bytes.size() - 100));
  for (size_t n : lengths) {
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(n));
    EXPECT_THROW(File::open(p.string()), GgufError) << n;
    // Metadata-only: cut in the header → error; cut in the data section → accepted, no data.
    if (n + full.alignment() <= full.data_offset()) {
      EXPECT_THROW(File::open_metadata_only(p.string()), GgufError) << n;
    } else if (n >= full.data_offset()) {
      File f = File::open_metadata_only(p.string());
      EXPECT_EQ(f.tensors().at(0).data, nullptr) << n;
      EXPECT_EQ(f.metadata().size(), full.metadata().size());
    }
  }
  fs::remove(p);
}

TEST(GgufHostile, TruncationOfRealFixtures) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  for (const char* rel : {"models/stories260K-F32.gguf", "models/stories260K-pad-Q4_K_M.gguf",
                          "vocab/ggml-vocab-gpt-2.gguf"}) {
    SCOPED_TRACE(rel);
    if (!fs::exists(test::fixture(rel))) continue;
    std::ifstream in(test::fixture(rel), std::ios::binary);
    Bytes bytes(16384);
    in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    ASSERT_EQ(size_t(in.gcount()), bytes.size());
    expect_every_prefix_rejected(bytes, bytes.size());
  }
}

// ---- allocations stay proportional to the file ----

TEST(GgufHostile, AllocationsAreBoundedByTheFileSize) {
  std::vector<Bytes> inputs = {
      G::header(uint64_t(1) << 40, 1).kv_u32("a", 1).b,
      G::header(0, uint64_t(1) << 40).kv_u32("a", 1).b,
  };
  for (uint32_t elem : {0u, 8u, 9u, 12u}) {  // u8, string, array, f64 arrays with huge counts
    G g = G::header(0, 1);
    g.str("a").u32(9).u32(elem).u64(uint64_t(1) << 61).data(256);
    inputs.push_back(g.b);
  }
  G strs = G::header(0, 1);  // the largest string array 2000 bytes can justify: 250 elements
  strs.str("a").u32(9).u32(8).u64(250);
  for (int k = 0; k < 250; ++k) strs.u64(0);
  inputs.push_back(strs.b);
  G nested = G::header(0, 1);  // worst case per byte: 100 empty nested arrays, 12 bytes each
  nested.str("a").u32(9).u32(9).u64(100);
  for (int k = 0; k < 100; ++k) nested.u32(0).u64(0);
  inputs.push_back(nested.b);
  for (const auto& in : inputs) {
    g_largest = 0;
    g_total = 0;
    g_tracking = true;
    try {
      File::from_memory(in.data(), in.size());
    } catch (const GgufError&) {
    }
    g_tracking = false;
    // Generous bounds (exception text, hash buckets): what matters is no count-sized allocation.
    EXPECT_LE(g_largest.load(), 16 * in.size() + 4096) << "input of " << in.size() << " bytes";
    EXPECT_LE(g_total.load(), 64 * in.size() + 65536) << "input of " << in.size() << " bytes";
  }
}

// ---- inputs kept from fuzzing ----

TEST(GgufHostile, FuzzRegressionsAndSeedsDoNotCrash) {
  const fs::path fuzz_dir = fs::path(KVRUN_TEST_DATA).parent_path() / "fuzz";
  size_t n = 0;
  for (const char* sub : {"regressions", "seeds"}) {
    if (!fs::is_directory(fuzz_dir / sub)) continue;
    for (const auto& e : fs::directory_iterator(fuzz_dir / sub)) {
      if (e.path().extension() == ".md") continue;
      std::ifstream in(e.path(), std::ios::binary);
      const Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ++n;
      try {
        File f = File::from_memory(b.data(), b.size());
        for (const auto& kv : f.metadata()) EXPECT_EQ(f.find(kv.key), &kv.value);
        // Seeds are valid files by construction; hand-made "hand-*" regressions are invalid.
        EXPECT_NE(e.path().filename().string().rfind("hand-", 0), 0u) << e.path() << " accepted";
      } catch (const GgufError&) {
        EXPECT_NE(std::string(sub), "seeds") << e.path() << " was rejected";
      }
    }
  }
  EXPECT_GE(n, 4u) << "tests/fuzz/seeds should hold the Writer-made seed files";
}

}  // namespace
}  // namespace kvrun::gguf

// test_gguf.cpp — GGUF reader/writer: round trips of every value type and of tensor data,
// alignment, v2 headers, metadata-only files, accessors, and every real fixture file.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "gguf.h"
#include "test_util.h"

namespace kvrun::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

/// A scratch directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kvrun_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(Gguf, RoundTripEveryScalarType) {
  std::mt19937_64 rng(1234);
  const auto u8 = uint8_t(rng() | 0x80);
  const auto u16 = uint16_t(rng() | 0x8000);
  const auto i8 = int8_t(-int(rng() % 100) - 1);
  const auto i16 = int16_t(-int(rng() % 30000) - 1);
  const auto u32 = uint32_t(rng() | 0x80000000u);
  const auto i32 = int32_t(-int32_t(rng() % 1000000) - 1);
  const uint64_t u64 = rng() | (1ull << 63);
  const auto i64 = -int64_t(rng() >> 2) - 1;
  std::normal_distribution<double> nd(0, 100);
  const auto f32 = float(nd(rng));
  const double f64 = nd(rng);
  std::string text = "h\xc3\xa9llo \xff\xfe not utf-8";
  text.push_back('\0');  // embedded NUL survives (length-prefixed strings)
  text += "tail";

  Writer w;
  w.set_u8("k.u8", u8);
  w.set_i8("k.i8", i8);
  w.set_u16("k.u16", u16);
  w.set_i16("k.i16", i16);
  w.set_u32("k.u32", u32);
  w.set_i32("k.i32", i32);
  w.set_u64("k.u64", u64);
  w.set_i64("k.i64", i64);
  w.set_f32("k.f32", f32);
  w.set_f64("k.f64", f64);
  w.set_bool("k.true", true);
  w.set_bool("k.false", false);
  w.set_string("k.str", text);
  w.set_string("k.empty", "");
  const auto bytes = w.to_bytes();
  File f = File::from_memory(bytes.data(), bytes.size());

  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata().size(), 14u);
  EXPECT_EQ(f.metadata()[0].key, "k.u8");  // insertion order kept
  EXPECT_EQ(f.metadata()[13].key, "k.empty");
  EXPECT_EQ(f.find("k.u8")->type, ValueType::U8);
  EXPECT_EQ(f.find("k.i16")->type, ValueType::I16);
  EXPECT_EQ(f.find("k.u64")->type, ValueType::U64);
  EXPECT_EQ(f.find("k.f64")->type, ValueType::F64);
  EXPECT_EQ(*f.get_int("k.u8"), u8);
  EXPECT_EQ(*f.get_int("k.i8"), i8);
  EXPECT_EQ(*f.get_int("k.u16"), u16);
  EXPECT_EQ(*f.get_int("k.i16"), i16);
  EXPECT_EQ(*f.get_int("k.u32"), int64_t(u32));
  EXPECT_EQ(*f.get_int("k.i32"), i32);
  EXPECT_EQ(f.find("k.u64")->u, u64);
  EXPECT_EQ(*f.get_int("k.i64"), i64);
  EXPECT_EQ(*f.get_float("k.f32"), double(f32));
  EXPECT_EQ(*f.get_float("k.f64"), f64);
  EXPECT_EQ(*f.get_float("k.i16"), double(i16));  // integers convert to float
  EXPECT_TRUE(*f.get_bool("k.true"));
  EXPECT_FALSE(*f.get_bool("k.false"));
  EXPECT_EQ(*f.get_string("k.str"), text);
  EXPECT_EQ(f.get_string("k.str")->size(), text.size());
  EXPECT_EQ(*f.get_string("k.empty"), "");
  EXPECT_FALSE(f.get_int("k.absent").has_value());
  EXPECT_EQ(f.find("k.absent"), nullptr);
  EXPECT_STREQ(value_type_name(ValueType::STRING), "string");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(77)), "?");
}

TEST(Gguf, RoundTripArraysIncludingNestedAndStrings) {
  std::mt19937 rng(99);
  std::vector<std::string> strs;
  for (int k = 0; k < 40; ++k) {
    std::string s(rng() % 12, '\0');
    for (auto& c : s) c = char(rng());  // arbitrary bytes: text is not validated
    strs.push_back(s);
  }
  const auto floats = test::random_floats(33, 7);
  std::vector<int32_t> ints(17);
  for (auto& x : ints) x = int32_t(rng());
  std::vector<uint64_t> u64s = {1, 2, uint64_t(1) << 40};
  std::vector<int16_t> i16s = {-7, 300, int16_t(rng())};

  // [[i16 x3], [string x2], [[u64 x3]]]: three levels.
  Value inner_u64;
  inner_u64.type = ValueType::ARRAY;
  inner_u64.elem_type = ValueType::U64;
  inner_u64.count = u64s.size();
  inner_u64.raw = reinterpret_cast<const uint8_t*>(u64s.data());
  Value a0 = inner_u64, a1 = inner_u64, a2 = inner_u64;
  a0.elem_type = ValueType::I16;
  a0.count = i16s.size();
  a0.raw = reinterpret_cast<const uint8_t*>(i16s.data());
  a1.elem_type = ValueType::STRING;
  a1.count = 2;
  a1.raw = nullptr;
  a1.strs = {strs[0], strs[1]};
  a2.elem_type = ValueType::ARRAY;
  a2.count = 1;
  a2.raw = nullptr;
  a2.items = {inner_u64};
  Value nested = a2;
  nested.count = 3;
  nested.items = {a0, a1, a2};

  Writer w;
  w.set_string_array("tokens", strs);
  w.set_f32_array("scores", floats);
  w.set_i32_array("types", ints);
  w.set_value("nested", nested);
  w.set_string_array("empty", {});
  const auto bytes = w.to_bytes();
  File f = File::from_memory(bytes.data(), bytes.size());

  auto got_strs = *f.get_string_array("tokens");
  ASSERT_EQ(got_strs.size(), strs.size());
  for (size_t k = 0; k < strs.size(); ++k) EXPECT_EQ(got_strs[k], strs[k]) << k;
  EXPECT_EQ(*f.get_float_array("scores"), floats);
  auto got_ints = *f.get_int_array("types");
  ASSERT_EQ(got_ints.size(), ints.size());
  for (size_t k = 0; k < ints.size(); ++k) EXPECT_EQ(got_ints[k], ints[k]);
  EXPECT_EQ(f.get_float_array("types")->at(3), float(ints[3]));
  EXPECT_TRUE(f.get_string_array("empty")->empty());

  const Value* n = f.find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->elem_type, ValueType::ARRAY);
  ASSERT_EQ(n->items.size(), 3u);
  EXPECT_EQ(n->items[0].elem_type, ValueType::I16);
  ASSERT_EQ(n->items[0].count, 3u);
  EXPECT_EQ(std::memcmp(n->items[0].raw, i16s.data(), 6), 0);
  EXPECT_EQ(n->items[1].strs, (std::vector<std::string_view>{strs[0], strs[1]}));
  ASSERT_EQ(n->items[2].items.size(), 1u);
  EXPECT_EQ(n->items[2].items[0].elem_type, ValueType::U64);
  EXPECT_EQ(std::memcmp(n->items[2].items[0].raw, u64s.data(), 24), 0);
  // Re-serialising what was read gives the same bytes.
  Writer w2;
  for (const auto& kv : f.metadata()) w2.set_value(std::string(kv.key), kv.value);
  EXPECT_EQ(w2.to_bytes(), bytes);
}

TEST(Gguf, AccessorTypeErrorsNameTheKey) {
  Writer w;
  w.set_string("s", "text");
  w.set_u64("big", (uint64_t(1) << 63) + 5);
  w.set_f32("f", 2.5f);
  w.set_f32_array("fa", {1.0f, 2.0f});
  Value big;
  const uint64_t bigs[2] = {3, ~uint64_t(0)};
  big.type = ValueType::ARRAY;
  big.elem_type = ValueType::U64;
  big.count = 2;
  big.raw = reinterpret_cast<const uint8_t*>(bigs);
  w.set_value("bigs", big);
  const auto bytes = w.to_bytes();
  File f = File::from_memory(bytes.data(), bytes.size());
  auto expect_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no GgufError; expected one mentioning " << needle;
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { f.get_int("s"); }, "'s' has type string");
  expect_error([&] { f.get_float("s"); }, "'s'");
  expect_error([&] { f.get_bool("f"); }, "'f' has type f32");
  expect_error([&] { f.get_string("f"); }, "'f'");
  expect_error([&] { f.get_int("f"); }, "expected an integer");
  expect_error([&] { f.get_int("big"); }, "out of int64 range");
  expect_error([&] { f.get_string_array("fa"); }, "'fa' has type array of f32");
  expect_error([&] { f.get_int_array("fa"); }, "'fa'");
  expect_error([&] { f.get_int_array("bigs"); }, "element 1");
  expect_error([&] { f.get_float_array("s"); }, "'s'");
  EXPECT_EQ(*f.get_float("big"), double((uint64_t(1) << 63) + 5));
  EXPECT_EQ(f.get_float_array("bigs")->at(0), 3.0f);
}

struct TensorCase {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
};

void check_tensor_round_trip(uint32_t alignment) {
  const std::vector<TensorCase> cases = {
      {"f32", DType::F32, {7}},          {"f16", DType::F16, {5, 3}},
      {"bf16", DType::BF16, {4, 2, 3}},  {"q4_0", DType::Q4_0, {64, 3}},
      {"q8_0", DType::Q8_0, {32, 2, 2}}, {"q4_K", DType::Q4_K, {256, 2}},
      {"q6_K", DType::Q6_K, {512}},      {"i32", DType::I32, {3, 1, 2, 2}},
      {"q5_1", DType::Q5_1, {32}},       {"i8", DType::I8, {13}},
  };
  Writer w;
  if (alignment != 32) w.set_alignment(alignment);
  w.set_string("general.architecture", "test");
  std::vector<std::vector<uint8_t>> datas;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    int64_t rows = 1;
    for (size_t d = 1; d < c.ne.size(); ++d) rows *= c.ne[d];
    datas.push_back(random_bytes(size_t(*row_bytes(c.type, c.ne[0]) * rows), 1000 + k));
    w.add_tensor(c.name, c.type, c.ne, datas.back().data());
  }
  const auto bytes = w.to_bytes();
  File f = File::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  ASSERT_EQ(f.tensors().size(), cases.size());
  const auto* base = static_cast<const uint8_t*>(f.tensors()[0].data) - f.tensors()[0].offset;
  for (size_t k = 0; k < cases.size(); ++k) {
    const TensorInfo& t = f.tensors()[k];
    SCOPED_TRACE(cases[k].name);
    EXPECT_EQ(t.name, cases[k].name);
    EXPECT_EQ(t.type, cases[k].type);
    EXPECT_EQ(t.n_dims, int(cases[k].ne.size()));
    for (int d = 0; d < kMaxDims; ++d)
      EXPECT_EQ(t.ne[d], d < t.n_dims ? cases[k].ne[size_t(d)] : 1);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(static_cast<const uint8_t*>(t.data), base + t.offset);
    ASSERT_EQ(t.n_bytes, datas[k].size());
    EXPECT_EQ(std::memcmp(t.data, datas[k].data(), t.n_bytes), 0);
    EXPECT_EQ(f.find_tensor(cases[k].name), &t);
    Tensor v = f.view(t);
    EXPECT_EQ(v.n_bytes(), t.n_bytes);
    EXPECT_EQ(v.nb[1], size_t(*row_bytes(t.type, t.ne[0])));
    EXPECT_EQ(v.data, t.data);
  }
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
}

TEST(Gguf, TensorsOfSeveralTypesRoundTripAlignment32) { check_tensor_round_trip(32); }
TEST(Gguf, TensorsOfSeveralTypesRoundTripAlignment64) { check_tensor_round_trip(64); }
TEST(Gguf, TensorsOfSeveralTypesRoundTripAlignment256) { check_tensor_round_trip(256); }

TEST(Gguf, Version2HeaderParses) {
  Writer w;
  w.set_u32("a", 17);
  const auto data = random_bytes(64 * 4, 5);
  w.add_tensor("t", DType::F32, {64}, data.data());
  auto bytes = w.to_bytes();
  ASSERT_EQ(bytes[4], 3);  // version field, little-endian uint32 at offset 4
  bytes[4] = 2;
  File f = File::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(*f.get_int("a"), 17);
  EXPECT_EQ(std::memcmp(f.find_tensor("t")->data, data.data(), data.size()), 0);
}

TEST(Gguf, WriteToFileAndMmapOpen) {
  TempDir dir;
  Writer w;
  w.set_string("general.name", "mapped");
  const auto data = random_bytes(34 * 4, 8);
  w.add_tensor("q", DType::Q8_0, {64, 2}, data.data());
  const std::string path = (dir.path / "m.gguf").string();
  w.write(path);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}), 1)
      << "the temporary file was left behind";
  File f = File::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), w.to_bytes().size());
  EXPECT_EQ(*f.get_string("general.name"), "mapped");
  EXPECT_EQ(std::memcmp(f.find_tensor("q")->data, data.data(), data.size()), 0);
  File moved = std::move(f);  // views stay valid across a move
  EXPECT_EQ(*moved.get_string("general.name"), "mapped");
  EXPECT_THROW(File::open((dir.path / "missing.gguf").string()), std::system_error);
  EXPECT_THROW(w.write((dir.path / "no_such_dir" / "x.gguf").string()), std::system_error);
}

TEST(Gguf, MetadataOnlyFiles) {
  TempDir dir;
  Writer w;
  w.set_u32("n", 3);
  w.add_tensor("big", DType::F32, {1024, 1024}, nullptr);
  w.add_tensor("small", DType::F16, {8}, nullptr);
  const auto bytes = w.to_bytes();
  EXPECT_THROW(File::from_memory(bytes.data(), bytes.size()), GgufError);
  const std::string path = (dir.path / "meta.gguf").string();
  w.write(path);
  EXPECT_THROW(File::open(path), GgufError);
  File f = File::open_metadata_only(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].data, nullptr);
  EXPECT_EQ(f.tensors()[1].data, nullptr);
  EXPECT_EQ(f.tensors()[0].n_bytes, 4u * 1024 * 1024);
  EXPECT_EQ(f.tensors()[1].offset, 4u * 1024 * 1024);
  EXPECT_EQ(f.view(f.tensors()[1]).ne[0], 8);
  // A complete file opened metadata-only keeps its data pointers.
  Writer w2;
  const auto data = random_bytes(32, 3);
  w2.add_tensor("t", DType::I8, {32}, data.data());
  w2.write(path);
  File g = File::open_metadata_only(path);
  ASSERT_NE(g.tensors()[0].data, nullptr);
  EXPECT_EQ(std::memcmp(g.tensors()[0].data, data.data(), 32), 0);
}

TEST(Gguf, WriterReplacesKeysAndRejectsBadInput) {
  Writer w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_u32("a", 2);
  const auto bytes = w.to_bytes();
  File f = File::from_memory(bytes.data(), bytes.size());
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(*f.get_int("a"), 2);
  const uint8_t data[1024] = {1};
  EXPECT_THROW(w.set_alignment(0), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(48), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(4), std::invalid_argument);  // below the spec's multiple of 8
  EXPECT_THROW(w.add_tensor("z", DType::F32, {0}, data), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("z", DType::F32, {}, data), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("z", DType::F32, {1, 1, 1, 1, 1}, data), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("z", DType::Q4_0, {33}, data), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("z", DType::FP8_E4M3, {8}, data), std::invalid_argument);
  w.add_tensor("z", DType::F32, {4}, data);
  EXPECT_THROW(w.add_tensor("z", DType::F32, {4}, data), std::invalid_argument);
}

// ---- real files made by llama.cpp ----

std::vector<fs::path> fixture_files(const std::string& sub) {
  std::vector<fs::path> out;
  const fs::path dir = test::fixture(sub);
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GgufFixtures, EveryModelAndVocabFileOpens) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  auto files = fixture_files("models");
  const auto vocab = fixture_files("vocab");
  files.insert(files.end(), vocab.begin(), vocab.end());
  EXPECT_GE(files.size(), 22u);
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    File f = File::open(p.string());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.file_size(), fs::file_size(p));
    auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    EXPECT_GE(tokens->size(), 512u);
    EXPECT_TRUE(f.get_string("tokenizer.ggml.model").has_value());
    const bool is_model = p.parent_path().filename() == "models";
    EXPECT_EQ(f.tensors().size(), is_model ? 48u : 0u);
    for (const auto& t : f.tensors()) {
      ASSERT_NE(t.data, nullptr);
      EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size());
    }
  }
}

TEST(GgufFixtures, Stories260KF32Facts) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  File f = File::open(test::fixture("models/stories260K-F32.gguf").string());
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("llama.block_count"), 5);
  EXPECT_EQ(*f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(*f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f.get_int("llama.context_length"), 128);
  EXPECT_NEAR(*f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_FALSE(f.find("llama.rope.freq_base"));
  EXPECT_EQ(*f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*f.get_int("tokenizer.ggml.eos_token_id"), 2);
  auto tokens = *f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::F32);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  // Real trained weights: finite, not all zero, small.
  std::vector<float> w(64 * 512);
  std::memcpy(w.data(), emb->data, emb->n_bytes);
  double sum_sq = 0;
  for (float x : w) {
    ASSERT_TRUE(std::isfinite(x));
    sum_sq += double(x) * x;
  }
  EXPECT_GT(sum_sq, 1.0);
  EXPECT_LT(sum_sq / double(w.size()), 10.0);
  for (int l = 0; l < 5; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const TensorInfo* k = f.find_tensor(b + "attn_k.weight");
    ASSERT_NE(k, nullptr) << b;
    EXPECT_EQ(k->ne[0], 64);
    EXPECT_EQ(k->ne[1], 32);  // 4 KV heads x head_dim 8
    const TensorInfo* down = f.find_tensor(b + "ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->ne[0], 172);
    EXPECT_EQ(down->ne[1], 64);
  }
}

// The tensor-type table of the fixtures README ("Tensor types chosen by llama-quantize").
struct TypeColumn {
  const char* file;
  DType embd, output, qk, v, v_l24, attn_out, gate_up, down, down_l24;
};

TEST(GgufFixtures, QuantizedTensorTypesMatchTheReadmeTable) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-Q4_K_M.gguf");
  using D = DType;
  const TypeColumn cols[] = {
      {"stories260K-F16", D::F16, D::F16, D::F16, D::F16, D::F16, D::F16, D::F16, D::F16, D::F16},
      {"stories260K-Q4_K_M", D::Q5_0, D::Q8_0, D::Q5_0, D::Q5_0, D::Q8_0, D::Q5_0, D::Q5_0, D::F16,
       D::F16},
      {"stories260K-Q5_K_M", D::Q5_1, D::Q8_0, D::Q5_1, D::Q5_1, D::Q8_0, D::Q5_1, D::Q5_1, D::F16,
       D::F16},
      {"stories260K-Q6_K", D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::F16,
       D::F16},
      {"stories260K-pad-F16", D::F16, D::F16, D::F16, D::F16, D::F16, D::F16, D::F16, D::F16,
       D::F16},
      {"stories260K-pad-Q8_0", D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0,
       D::Q8_0, D::Q8_0},
      {"stories260K-pad-Q4_0", D::Q4_0, D::Q8_0, D::Q4_0, D::Q4_0, D::Q4_0, D::Q4_0, D::Q4_0,
       D::Q4_0, D::Q4_0},
      {"stories260K-pad-Q4_K_M", D::Q5_0, D::Q8_0, D::Q5_0, D::Q5_0, D::Q8_0, D::Q4_K, D::Q5_0,
       D::Q4_K, D::Q6_K},
      {"stories260K-pad-Q5_K_M", D::Q5_1, D::Q8_0, D::Q5_1, D::Q5_1, D::Q8_0, D::Q5_K, D::Q5_1,
       D::Q5_K, D::Q6_K},
      {"stories260K-pad-Q6_K", D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q8_0, D::Q6_K, D::Q8_0,
       D::Q6_K, D::Q6_K},
  };
  for (const auto& c : cols) {
    SCOPED_TRACE(c.file);
    File f = File::open(test::fixture(std::string("models/") + c.file + ".gguf").string());
    auto type_of = [&](const std::string& name) {
      const TensorInfo* t = f.find_tensor(name);
      EXPECT_NE(t, nullptr) << name;
      return t ? t->type : D::I64;
    };
    EXPECT_EQ(type_of("token_embd.weight"), c.embd);
    EXPECT_EQ(type_of("output.weight"), c.output);
    EXPECT_EQ(type_of("output_norm.weight"), D::F32);
    for (int l = 0; l < 5; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      const bool l24 = l == 2 || l == 4;
      SCOPED_TRACE(b);
      EXPECT_EQ(type_of(b + "attn_q.weight"), c.qk);
      EXPECT_EQ(type_of(b + "attn_k.weight"), c.qk);
      EXPECT_EQ(type_of(b + "attn_v.weight"), l24 ? c.v_l24 : c.v);
      EXPECT_EQ(type_of(b + "attn_output.weight"), c.attn_out);
      EXPECT_EQ(type_of(b + "ffn_gate.weight"), c.gate_up);
      EXPECT_EQ(type_of(b + "ffn_up.weight"), c.gate_up);
      EXPECT_EQ(type_of(b + "ffn_down.weight"), l24 ? c.down_l24 : c.down);
      EXPECT_EQ(type_of(b + "attn_norm.weight"), D::F32);
      EXPECT_EQ(type_of(b + "ffn_norm.weight"), D::F32);
    }
    const bool pad = std::string(c.file).find("-pad-") != std::string::npos;
    EXPECT_EQ(*f.get_int("llama.feed_forward_length"), pad ? 256 : 172);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->ne[0], pad ? 256 : 172);
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->ne[1], pad ? 256 : 64);
  }
}

TEST(GgufFixtures, VocabFilesHaveTheirTokenCounts) {
  KVRUN_REQUIRE_FIXTURE("vocab/ggml-vocab-llama-spm.gguf");
  // Counts and models from the fixtures README (vocab table) and the files themselves.
  const std::map<std::string, std::pair<size_t, std::string>> expected = {
      {"llama-spm", {32000, "llama"}},     {"phi-3", {32064, "llama"}},
      {"gpt-2", {50257, "gpt2"}},          {"deepseek-llm", {102400, "gpt2"}},
      {"deepseek-coder", {32256, "gpt2"}}, {"bert-bge", {30522, "bert"}},
  };
  for (const auto& [name, want] : expected) {
    const std::string rel = "vocab/ggml-vocab-" + name + ".gguf";
    if (!fs::exists(test::fixture(rel))) continue;
    File f = File::open(test::fixture(rel).string());
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), want.first) << name;
    EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), want.second) << name;
  }
}

}  // namespace
}  // namespace kvrun::gguf

// test_gguf_split.cpp — split GGUF models (llama.cpp's gguf-split layout, issue 24): the first
// part opens the others, tensors and data equal the unsplit file's, every broken set of parts is
// a clear error, and the kvrun binary runs and describes a split model as the single file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf.h"
#include "gguf_split_util.h"
#include "test_util.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModel = "models/stories260K-F32.gguf";

/// The GgufError message of opening `path`, or "" when it opens.
std::string open_error(const std::string& path) {
  try {
    gguf::File::open(path);
  } catch (const gguf::GgufError& e) {
    return e.what();
  }
  return "";
}

/// Cuts `path` to `bytes`.
void cut(const std::string& path, uint64_t bytes) { fs::resize_file(path, bytes); }

TEST(GgufSplit, PartsOpenAsTheUnsplitModel) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const gguf::File full = gguf::File::open(test::fixture(kModel).string());
  const auto parts = test::write_gguf_split(full, (dir / "m").string(), 3);
  const gguf::File f = gguf::File::open(parts[0]);
  EXPECT_EQ(f.split_count(), 3);
  EXPECT_EQ(full.split_count(), 1);
  ASSERT_EQ(f.tensors().size(), full.tensors().size());
  for (const gguf::TensorInfo& t : full.tensors()) {
    const gguf::TensorInfo* s = f.find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->type, t.type) << t.name;
    EXPECT_EQ(std::memcmp(s->ne, t.ne, sizeof t.ne), 0) << t.name;
    ASSERT_EQ(s->n_bytes, t.n_bytes) << t.name;
    ASSERT_NE(s->data, nullptr) << t.name;
    EXPECT_EQ(std::memcmp(s->data, t.data, t.n_bytes), 0) << t.name;
  }
  EXPECT_EQ(f.get_int("llama.block_count"), full.get_int("llama.block_count"));
  const gguf::File::DataExtent e = f.data_extent();
  uint64_t on_disk = 0;
  for (const auto& p : parts) on_disk += fs::file_size(p);
  EXPECT_EQ(e.file_bytes, on_disk);
  EXPECT_EQ(e.present, e.needed);
  EXPECT_GE(e.needed, full.data_extent().needed);
  // A one-part "split" is an ordinary file.
  const auto one = test::write_gguf_split(full, (dir / "one").string(), 1);
  EXPECT_EQ(gguf::File::open(one[0]).split_count(), 1);
}

TEST(GgufSplit, BrokenPartSetsAreClearErrors) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const gguf::File full = gguf::File::open(test::fixture(kModel).string());
  const auto parts = test::write_gguf_split(full, (dir / "m").string(), 3);

  std::string err = open_error(parts[1]);  // a later part
  EXPECT_NE(err.find("is part 2 of 3 of a split model: open its first part (" + parts[0]),
            std::string::npos)
      << err;

  const std::string renamed = (dir / "renamed.gguf").string();
  fs::copy_file(parts[0], renamed);
  err = open_error(renamed);
  EXPECT_NE(err.find("name is not PREFIX-00001-of-00003.gguf"), std::string::npos) << err;

  const std::string saved = (dir / "saved.gguf").string();
  fs::rename(parts[2], saved);  // a missing part
  err = open_error(parts[0]);
  EXPECT_NE(err.find("part 3 of 3 cannot be opened"), std::string::npos) << err;

  fs::copy_file(saved, parts[2]);  // a part cut short: open() refuses, naming the part ...
  cut(parts[2], fs::file_size(parts[2]) - 8);
  err = open_error(parts[0]);
  EXPECT_NE(err.find("split part " + parts[2]), std::string::npos) << err;
  EXPECT_NE(err.find("beyond the end of the file"), std::string::npos) << err;
  // ... open_metadata_only() accepts it without data, and the extent shows the shortfall
  const gguf::File meta = gguf::File::open_metadata_only(parts[0]);
  EXPECT_EQ(meta.split_count(), 3);
  for (const gguf::TensorInfo& t : meta.tensors()) EXPECT_EQ(t.data, nullptr) << t.name;
  EXPECT_EQ(meta.data_extent().present + 8, meta.data_extent().needed);

  // Parts that do not belong together: part 2 of another split, a tensor in two parts, and a
  // wrong split.tensors.count.
  const auto other = test::write_gguf_split(full, (dir / "o").string(), 2);
  fs::remove(parts[2]);
  fs::copy_file(saved, parts[2]);
  fs::remove(parts[1]);
  fs::copy_file(other[1], parts[1]);
  err = open_error(parts[0]);
  EXPECT_NE(err.find("it is not part 2 of 3"), std::string::npos) << err;

  auto write_part = [&](int k, int n, int32_t n_tensors, const std::string& name) {
    gguf::Writer w;
    w.set_u16("split.no", uint16_t(k - 1));
    w.set_u16("split.count", uint16_t(n));
    w.set_i32("split.tensors.count", n_tensors);
    const float x[4] = {1, 2, 3, 4};
    w.add_tensor(name, DType::F32, {4}, x);
    const std::string p = test::split_part_path((dir / "d").string(), k, n);
    w.write(p);
    return p;
  };
  const std::string d1 = write_part(1, 2, 2, "a");
  write_part(2, 2, 2, "a");
  err = open_error(d1);
  EXPECT_NE(err.find("tensor 'a' is also in an earlier part"), std::string::npos) << err;
  write_part(2, 2, 3, "b");  // its count differs from the first part's
  err = open_error(d1);
  EXPECT_NE(err.find("split.tensors.count differs from the first part's"), std::string::npos)
      << err;
  write_part(1, 2, 3, "a");  // both say 3, the parts hold 2
  err = open_error(d1);
  EXPECT_NE(err.find("split.tensors.count is 3 but its parts hold 2 tensors"), std::string::npos)
      << err;
  write_part(1, 2, 2, "a");
  write_part(2, 2, 2, "b");
  EXPECT_EQ(open_error(d1), "");
}

// The binary: -m on the first part generates what the unsplit model generates; info describes
// the parts and reports a part cut short as a truncated download.
TEST(GgufSplit, KvrunRunsAndDescribesASplitModel) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const std::string src = test::fixture(kModel).string();
  const auto parts = test::write_gguf_split(gguf::File::open(src), (dir / "m").string(), 2);
  const std::string gen = " -p 'Once upon a time' -n 12 --temp 0";
  const auto a = test::run_command(test::kvrun_binary() + " -m '" + src + "'" + gen);
  const auto b = test::run_command(test::kvrun_binary() + " -m '" + parts[0] + "'" + gen);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);

  auto r = test::run_command(test::kvrun_binary() + " info -m '" + parts[0] + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("in 2 split files"), std::string::npos) << r.out;
  r = test::run_command(test::kvrun_binary() + " info -m '" + parts[0] + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["split_count"], 2);
  EXPECT_EQ(j["file_bytes"].get<uint64_t>(), fs::file_size(parts[0]) + fs::file_size(parts[1]));
  EXPECT_EQ(j["truncated"], false);

  cut(parts[1], fs::file_size(parts[1]) - 100);
  r = test::run_command(test::kvrun_binary() + " info -m '" + parts[0] + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("truncated:"), std::string::npos) << r.err;
  r = test::run_command(test::kvrun_binary() + " -m '" + parts[0] + "'" + gen);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("split part " + parts[1]), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvrun

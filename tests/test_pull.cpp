// test_pull.cpp — `kvrun pull`, -hf and -mu against a local hub: an HTTP server started here on
// 127.0.0.1 that answers the Hugging Face API's shapes (tree listing with LFS sha256, resolve
// URLs with Range) and serves the stories260K fixtures. No network. Covered: quant selection,
// the cache, a connection dropped mid-file (resumed with Range), a wrong hash (refused, .part
// kept, nothing loaded), the bearer token, offline use of the cache, unsafe listing paths, split
// models, and the CLI end to end. Hashes are checked against coreutils' sha256sum.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf.h"
#include "gguf_split_util.h"
#include "test_util.h"
#include "tools/pull/pull.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kRepo = "kvrun-test/stories260K-GGUF";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string sha256sum(const fs::path& p) {
  const auto r = test::run_command("sha256sum '" + p.string() + "'");
  return r.out.substr(0, 64);
}

/// The local hub: files of one repository, with switches for the failure cases.
class FakeHub {
 public:
  struct File {
    std::string bytes;
    std::string sha256;  ///< what the listing says ("" = not in LFS)
  };

  FakeHub() {
    srv_.Get(R"(/api/models/([^/]+/[^/]+)/tree/main)", [this](const auto& req, auto& res) {
      std::lock_guard<std::mutex> lock(mu_);
      auth_ = req.get_header_value("Authorization");
      if (req.matches[1] != repo_) {
        res.status = 404;
        return;
      }
      json list = json::array();
      for (const auto& [path, f] : files_) {
        json e = {{"type", "file"}, {"path", path}, {"size", f.bytes.size()}};
        if (!f.sha256.empty()) e["lfs"] = {{"oid", f.sha256}, {"size", f.bytes.size()}};
        list.push_back(e);
      }
      list.push_back({{"type", "directory"}, {"path", "docs"}});
      res.set_content(list.dump(), "application/json");
    });
    srv_.Get(R"(/([^/]+/[^/]+)/resolve/main/(.+))", [this](const auto& req, auto& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++n_data_;
      if (req.has_header("Range")) ++n_range_;
      auto it = files_.find(req.matches[2]);
      if (req.matches[1] != repo_ || it == files_.end()) {
        res.status = 404;
        return;
      }
      const std::string* bytes = &it->second.bytes;
      const size_t cut = drop_next_ ? bytes->size() / 2 : bytes->size();
      drop_next_ = false;
      // A provider that stops at `cut` makes the server close the connection mid-body.
      res.set_content_provider(bytes->size(), "application/octet-stream",
                               [bytes, cut](size_t off, size_t len, httplib::DataSink& sink) {
                                 if (off >= cut) return false;
                                 const size_t n = std::min(len, cut - off);
                                 sink.write(bytes->data() + off, std::min<size_t>(n, 65536));
                                 return true;
                               });
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeHub() {
    srv_.stop();
    thread_.join();
  }

  void add(const std::string& path, std::string bytes, bool lfs = true) {
    File f{std::move(bytes), ""};
    if (lfs) {
      test::TempDir d;
      std::ofstream(d / "f", std::ios::binary) << f.bytes;
      f.sha256 = sha256sum(d / "f");
    }
    files_[path] = std::move(f);
  }
  void set_sha(const std::string& path, const std::string& sha) { files_[path].sha256 = sha; }
  void drop_next() { drop_next_ = true; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int n_data() const { return n_data_; }
  int n_range() const { return n_range_; }
  std::string auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return auth_;
  }

 private:
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::string repo_ = kRepo, auth_;
  std::map<std::string, File> files_;
  bool drop_next_ = false;
  std::atomic<int> n_data_{0}, n_range_{0};
};

pull::PullConfig config(const FakeHub& hub, const test::TempDir& cache) {
  pull::PullConfig c;
  c.endpoint = hub.endpoint();
  c.cache_dir = cache.path().string();
  return c;
}

std::vector<pull::RemoteFile> listing(std::initializer_list<const char*> names) {
  std::vector<pull::RemoteFile> v;
  for (const char* n : names) v.push_back({n, 10, ""});
  return v;
}

std::string chosen(const std::vector<pull::RemoteFile>& files, const std::string& quant,
                   const std::string& hf_file = "") {
  std::string s;
  for (const auto& f : pull::select_gguf(files, quant, hf_file))
    s += (s.empty() ? "" : ",") + f.path;
  return s;
}

TEST(PullSelect, QuantTagsDefaultsSplitsAndErrors) {
  const auto files =
      listing({"m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "mmproj-m-Q4_K_M.gguf", "README.md",
               "big/m-F16-00002-of-00002.gguf", "big/m-F16-00001-of-00002.gguf"});
  EXPECT_EQ(chosen(files, ""), "m-Q4_K_M.gguf");  // default, mmproj never chosen
  EXPECT_EQ(chosen(files, "q8_0"), "m-Q8_0.gguf");
  EXPECT_EQ(chosen(files, "Q4_K_S"), "m-Q4_K_S.gguf");
  EXPECT_EQ(chosen(files, "F16"), "big/m-F16-00001-of-00002.gguf,big/m-F16-00002-of-00002.gguf");
  EXPECT_EQ(chosen(files, "", "m-Q8_0.gguf"), "m-Q8_0.gguf");
  EXPECT_THROW(chosen(files, "Q4_K"), pull::PullError);  // Q4_K_M and Q4_K_S: ambiguous
  try {
    chosen(files, "IQ2_XS");
    FAIL() << "no match must throw";
  } catch (const pull::PullError& e) {
    EXPECT_NE(std::string(e.what()).find("m-Q8_0.gguf"), std::string::npos) << e.what();
  }
  EXPECT_THROW(chosen(files, "", "nope.gguf"), pull::PullError);
  // One GGUF and no quant: that one. A split model with a part missing: refused.
  EXPECT_EQ(chosen(listing({"x-f32.gguf"}), ""), "x-f32.gguf");
  EXPECT_THROW(chosen(listing({"a.gguf", "b.gguf"}), ""), pull::PullError);
  EXPECT_THROW(chosen(listing({"m-00001-of-00003.gguf", "m-00003-of-00003.gguf"}), ""),
               pull::PullError);
}

TEST(PullSelect, RepositoryNames) {
  EXPECT_EQ(pull::parse_hf_ref("bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0").repo,
            "bartowski/Llama-3.2-1B-Instruct-GGUF");
  EXPECT_EQ(pull::parse_hf_ref("a/b:Q8_0").quant, "Q8_0");
  EXPECT_EQ(pull::parse_hf_ref("a/b").quant, "");
  for (const char* bad : {"", "a", "a/b/c", "../etc", "a/..", "a/b:", "/a/b", "a b/c"})
    EXPECT_THROW(pull::parse_hf_ref(bad), pull::PullError) << bad;
}

struct PullE2E : ::testing::Test {
  void SetUp() override {
    if (!fs::exists(test::fixture("models/stories260K-Q4_K_M.gguf")))
      GTEST_SKIP() << "fixture models/stories260K-Q4_K_M.gguf not found (set KVRUN_FIXTURES)";
    q4 = read_file(test::fixture("models/stories260K-Q4_K_M.gguf"));
    hub.add("stories260K-Q4_K_M.gguf", q4);
    hub.add("stories260K-Q6_K.gguf", read_file(test::fixture("models/stories260K-Q6_K.gguf")));
    hub.add("README.md", "# test\n", false);
  }
  FakeHub hub;
  test::TempDir cache;
  std::string q4;
};

TEST_F(PullE2E, DownloadsVerifiesAndReusesTheCache) {
  const auto cfg = config(hub, cache);
  const auto paths = pull::pull_hf(cfg, kRepo, "");
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths[0], (cache.path() / "hf" / kRepo / "stories260K-Q4_K_M.gguf").string());
  EXPECT_EQ(read_file(paths[0]), q4);
  EXPECT_EQ(sha256sum(paths[0]), pull::sha256_file(paths[0]));
  EXPECT_FALSE(fs::exists(paths[0] + ".part"));
  const int fetched = hub.n_data();
  EXPECT_EQ(pull::pull_hf(cfg, std::string(kRepo) + ":q6_k", "")[0],
            (cache.path() / "hf" / kRepo / "stories260K-Q6_K.gguf").string());
  EXPECT_EQ(hub.n_data(), fetched + 1);
  pull::pull_hf(cfg, kRepo, "");  // cached and verified: no data request
  EXPECT_EQ(hub.n_data(), fetched + 1);
}

TEST_F(PullE2E, DroppedConnectionResumesWithRange) {
  hub.drop_next();
  const auto paths = pull::pull_hf(config(hub, cache), kRepo, "");
  EXPECT_EQ(read_file(paths.at(0)), q4);
  EXPECT_GE(hub.n_data(), 2);
  EXPECT_GE(hub.n_range(), 1);
}

TEST_F(PullE2E, WrongHashIsRefusedAndTheFileNeverUsed) {
  hub.set_sha("stories260K-Q4_K_M.gguf", std::string(64, 'a'));
  try {
    pull::pull_hf(config(hub, cache), kRepo, "");
    FAIL() << "a wrong hash must throw";
  } catch (const pull::PullError& e) {
    EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
  }
  const fs::path dest = cache.path() / "hf" / kRepo / "stories260K-Q4_K_M.gguf";
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_TRUE(fs::exists(dest.string() + ".part"));
  const auto r =
      test::run_command("HF_ENDPOINT=" + hub.endpoint() + " KVRUN_CACHE='" + cache.path().string() +
                        "' " + test::kvrun_binary() + " -hf " + kRepo + " -p Once -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("sha256"), std::string::npos) << r.err;
}

TEST_F(PullE2E, TokenOfflineCacheAndUnsafePaths) {
  auto cfg = config(hub, cache);
  cfg.token = "hf_secret";
  pull::pull_hf(cfg, kRepo, "");
  EXPECT_EQ(hub.auth(), "Bearer hf_secret");
  cfg.endpoint = "http://127.0.0.1:1";  // nothing listens: the cached copy is used
  EXPECT_EQ(read_file(pull::pull_hf(cfg, kRepo, "").at(0)), q4);
  EXPECT_THROW(pull::pull_hf(cfg, kRepo, "stories260K-F16.gguf"), pull::PullError);
  EXPECT_THROW(pull::pull_hf(config(hub, cache), "kvrun-test/no-such-repo", ""), pull::PullError);
  hub.add("../escape-Q8_0.gguf", "x");
  EXPECT_THROW(pull::pull_hf(config(hub, cache), std::string(kRepo) + ":Q8_0", ""),
               pull::PullError);
  EXPECT_FALSE(fs::exists(cache.path() / "hf" / "kvrun-test" / "escape-Q8_0.gguf"));
}

TEST_F(PullE2E, SplitModelIsFetchedWholeAndLoads) {
  // Two real parts (gguf-split's layout) of the Q4_K_M fixture: -hf fetches both and runs the
  // model from them as from the single file.
  test::TempDir parts_dir;
  const gguf::File whole =
      gguf::File::open(test::fixture("models/stories260K-Q4_K_M.gguf").string());
  const auto parts = test::write_gguf_split(whole, (parts_dir / "s-F32").string(), 2);
  hub.add("split/s-F32-00001-of-00002.gguf", read_file(parts[0]));
  hub.add("split/s-F32-00002-of-00002.gguf", read_file(parts[1]));
  const std::string env =
      "HF_ENDPOINT=" + hub.endpoint() + " KVRUN_CACHE='" + cache.path().string() + "' ";
  auto r = test::run_command(env + test::kvrun_binary() + " pull " + kRepo + ":F32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  const std::string gen = " -p 'Once upon a time' -n 8 --temp 0";
  r = test::run_command(env + test::kvrun_binary() + " -hf " + kRepo + ":F32" + gen);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ref =
      test::run_command(test::kvrun_binary() + " -m '" +
                        test::fixture("models/stories260K-Q4_K_M.gguf").string() + "'" + gen);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(r.out, ref.out);
}

TEST_F(PullE2E, CliPullHfAndModelUrl) {
  const std::string env =
      "HF_ENDPOINT=" + hub.endpoint() + " KVRUN_CACHE='" + cache.path().string() + "' ";
  auto r = test::run_command(env + test::kvrun_binary() + " pull " + kRepo);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, (cache.path() / "hf" / kRepo / "stories260K-Q4_K_M.gguf").string() + "\n");
  // -hf runs the cached model: the same completion as -m on the fixture.
  const std::string args = " -p 'Once upon a time' -n 8 --temp 0";
  r = test::run_command(env + test::kvrun_binary() + " -hf " + kRepo + args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto want =
      test::run_command(test::kvrun_binary() + " -m '" +
                        test::fixture("models/stories260K-Q4_K_M.gguf").string() + "'" + args);
  EXPECT_EQ(r.out, want.out);
  // -mu: any URL, into <cache>/url/.
  const std::string url = hub.endpoint() + "/" + kRepo + "/resolve/main/stories260K-Q6_K.gguf";
  r = test::run_command(env + test::kvrun_binary() + " pull -mu " + url);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, (cache.path() / "url" / "stories260K-Q6_K.gguf").string() + "\n");
  // Usage errors: two sources, and no model for serve.
  r = test::run_command(env + test::kvrun_binary() + " -m x.gguf -hf " + kRepo + " -p hi");
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_command(test::kvrun_binary() + " serve --port 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-hf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvrun

// pull_model.cpp — `kvrun pull` / -hf / -mu on top of the listing and the download (pull.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tools/pull/pull.h"

namespace kvrun::pull {
namespace fs = std::filesystem;
namespace {

/// A repository path is used as a path under the cache: refuse what would leave it.
void check_relative(const std::string& path) {
  const fs::path p(path);
  bool bad = path.empty() || p.is_absolute() || path.find('\\') != std::string::npos;
  for (const auto& part : p) bad = bad || part == ".." || part == ".";
  if (bad) throw PullError("the listing names an unsafe path '" + path + "'");
}

std::string read_sidecar(const fs::path& p) {
  std::ifstream in(p.string() + ".sha256");
  std::string s;
  in >> s;
  return s;
}

/// A cached file that is complete and verified (its recorded or recomputed sha256 matches).
bool cached_ok(const fs::path& dest, const RemoteFile& f) {
  std::error_code ec;
  if (!fs::is_regular_file(dest, ec)) return false;
  if (f.size >= 0 && int64_t(fs::file_size(dest, ec)) != f.size) return false;
  if (f.sha256.empty() || read_sidecar(dest) == f.sha256) return true;
  if (sha256_file(dest.string()) != f.sha256) return false;
  std::ofstream(dest.string() + ".sha256") << f.sha256 << "\n";
  return true;
}

/// The GGUF files of `dir` as a listing (no hashes): what -hf can use without the hub.
std::vector<RemoteFile> cached_listing(const fs::path& dir) {
  std::vector<RemoteFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".gguf")
      out.push_back({fs::relative(e.path(), dir).string(), int64_t(e.file_size()), ""});
  return out;
}

ProgressFn progress_for(const PullConfig& cfg, const std::string& name) {
  if (!cfg.progress) return {};
  return terminal_progress(name);
}

}  // namespace

std::vector<std::string> pull_hf(const PullConfig& cfg, const std::string& ref_text,
                                 const std::string& hf_file) {
  const HfRef ref = parse_hf_ref(ref_text);
  const fs::path dir = fs::path(cfg.cache_dir) / "hf" / ref.repo;
  std::vector<RemoteFile> files;
  try {
    files = list_repo_files(cfg, ref.repo);
  } catch (const PullError& e) {
    std::vector<RemoteFile> chosen;
    try {
      chosen = select_gguf(cached_listing(dir), ref.quant, hf_file);
    } catch (const PullError&) {
      throw e;  // nothing usable cached: the hub's error is the one to report
    }
    std::fprintf(stderr, "kvrun: %s; using the copy in %s\n", e.what(), dir.c_str());
    std::vector<std::string> paths;
    for (const RemoteFile& f : chosen) paths.push_back((dir / f.path).string());
    return paths;
  }
  std::vector<std::string> paths;
  for (const RemoteFile& f : select_gguf(files, ref.quant, hf_file)) {
    check_relative(f.path);
    const fs::path dest = dir / f.path;
    if (!cached_ok(dest, f)) {
      std::error_code ec;
      fs::remove(dest, ec);  // incomplete or altered: fetch it again
      const std::string url = cfg.endpoint + "/" + ref.repo + "/resolve/main/" + f.path;
      download_file(cfg, url, dest.string(), f.size, f.sha256, progress_for(cfg, f.path));
    }
    paths.push_back(dest.string());
  }
  return paths;
}

std::string pull_url(const PullConfig& cfg, const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) throw PullError("'" + url + "' is not a URL");
  std::string name = url.substr(0, url.find_first_of("?#"));
  name = name.substr(name.rfind('/') + 1);
  if (name.empty() || name.size() <= 3 + scheme) throw PullError("'" + url + "' names no file");
  check_relative(name);
  const fs::path dest = fs::path(cfg.cache_dir) / "url" / name;
  std::error_code ec;
  if (!fs::is_regular_file(dest, ec))
    download_file(cfg, url, dest.string(), -1, "", progress_for(cfg, name));
  return dest.string();
}

}  // namespace kvrun::pull

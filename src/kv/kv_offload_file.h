// kv_offload_file.h — the KV cache's slow tier on the CPU backend: one sparse file in
// --kv-offload-dir, mapped shared into memory, so blocks past the fast budget live in the page
// cache and on disk instead of anonymous RAM (docs/kv-cache.md, "Tiers").
//
// The file is named kvrun-offload-<pid>.kv, created with O_EXCL and mode 0600, sized with
// posix_fallocate (so a full disk fails at start, not
// with SIGBUS mid-run; a sparse ftruncate where the file system cannot allocate) and removed by the
// destructor. A process killed before its destructor ran leaves its file behind; every new
// OffloadFile first removes the files of processes that no longer exist
// (remove_stale_offload_files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvrun {

/// One mapped offload file (move-only). Throws std::runtime_error (with the path and errno text)
/// when the directory is missing or not writable, the file cannot be created or sized, or the
/// mapping fails.
class OffloadFile {
 public:
  /// Creates `dir`/kvrun-offload-<pid>.kv of `bytes` bytes (≥ 1) and maps it read/write.
  OffloadFile(const std::string& dir, int64_t bytes);
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  uint8_t* data() const { return data_; }
  int64_t size() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  int64_t bytes_ = 0;
};

/// Removes the offload files in `dir` whose process (the pid in the name) no longer exists;
/// returns their paths. Files of live processes, and files not named kvrun-offload-<pid>.kv, are
/// left alone. A missing directory yields an empty list.
std::vector<std::string> remove_stale_offload_files(const std::string& dir);

/// Bytes the file system holding `dir` has free for an unprivileged user (statvfs f_bavail ×
/// f_frsize); -1 when `dir` cannot be queried.
int64_t offload_dir_free_bytes(const std::string& dir);

}  // namespace kvrun

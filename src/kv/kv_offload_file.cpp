// kv_offload_file.cpp — see kv_offload_file.h.
#include "kv/kv_offload_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace kvrun {

namespace {

constexpr const char* kPrefix = "kvrun-offload-";
constexpr const char* kSuffix = ".kv";

std::string errno_text() { return std::strerror(errno); }

/// The pid in "kvrun-offload-<pid>.kv", or -1 when the name is not an offload file's.
long pid_of(const std::string& name) {
  const std::string pre = kPrefix, suf = kSuffix;
  if (name.size() <= pre.size() + suf.size() || name.rfind(pre, 0) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  if (digits.empty() || digits.size() > 9) return -1;
  long pid = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return -1;
    pid = pid * 10 + (ch - '0');
  }
  return pid > 0 ? pid : -1;
}

}  // namespace

std::vector<std::string> remove_stale_offload_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const long pid = pid_of(it->path().filename().string());
    if (pid < 0 || pid == long(getpid())) continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (std::filesystem::remove(it->path(), ec)) removed.push_back(it->path().string());
  }
  return removed;
}

int64_t offload_dir_free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return -1;
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

OffloadFile::OffloadFile(const std::string& dir, int64_t bytes) : bytes_(bytes) {
  if (bytes < 1) throw std::invalid_argument("KV offload file: size must be at least 1 byte");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error("--kv-offload-dir " + dir + ": not a directory");
  path_ = (std::filesystem::path(dir) / (kPrefix + std::to_string(getpid()) + kSuffix)).string();
  // A file with our own pid is a leftover of an earlier process that had the same pid.
  unlink(path_.c_str());
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw std::runtime_error("--kv-offload-dir: cannot create " + path_ + ": " + errno_text());
  // Allocated up front, so a full disk is an error here and never a SIGBUS while writing a
  // block through the mapping; file systems without fallocate get a sparse file.
  int rc = posix_fallocate(fd_, 0, off_t(bytes));
  if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(fd_, off_t(bytes)) == 0 ? 0 : errno;
  if (rc != 0) {
    close(fd_);
    unlink(path_.c_str());
    throw std::runtime_error("--kv-offload-dir: cannot allocate " + std::to_string(bytes) +
                             " bytes for " + path_ + ": " + std::strerror(rc) + " (" +
                             std::to_string(offload_dir_free_bytes(dir)) +
                             " bytes free; lower --kv-offload-max)");
  }
  void* p =
      mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_text();
    close(fd_);
    unlink(path_.c_str());
    throw std::runtime_error("--kv-offload-dir: cannot map " + path_ + ": " + why);
  }
  data_ = static_cast<uint8_t*>(p);
}

OffloadFile::~OffloadFile() {
  if (data_) munmap(data_, size_t(bytes_));
  if (fd_ >= 0) close(fd_);
  if (!path_.empty()) unlink(path_.c_str());
}

}  // namespace kvrun

// prefix_store.cpp — block files of the persistent prefix cache (see prefix_store.h).
#include "kv/prefix_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace kvrun {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'R', 'U', 'N', 'P', 'B', '1'};
constexpr uint32_t kVersion = 1;
constexpr const char* kExt = ".kvb";
constexpr const char* kTmpPrefix = ".tmp-";

/// The fixed header of a block file (little-endian host layout; 64 bytes).
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t key;
  uint64_t model_id;
  uint64_t hash;  ///< chained prefix hash of the block
  uint32_t type_k;
  uint32_t type_v;
  uint32_t n_layer;
  uint32_t k_row_bytes;
  uint32_t v_row_bytes;
  uint32_t payload_bytes;
};
static_assert(sizeof(FileHeader) == 64);

std::string hex16(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

/// Writes all of `n` bytes; false on error.
bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= size_t(w);
  }
  return true;
}

/// Reads the whole file at `path` into `out` when its size is exactly `want`; false otherwise.
bool read_exact(const std::string& path, size_t want, std::vector<uint8_t>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && size_t(st.st_size) == want;
  if (ok) {
    out.resize(want);
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::read(fd, out.data() + got, want - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += size_t(r);
    }
    ok = got == want;
  }
  ::close(fd);
  return ok;
}

}  // namespace

struct PrefixStore::Impl {
  fs::path dir;
  int64_t max_bytes = 0;
  PrefixStoreLayout layout;
  PrefixStoreStats st;
  bool warned = false;
  uint64_t clock = 0;  // LRU order of this process: higher = more recent
  struct Entry {
    int64_t bytes = 0;
    uint64_t used = 0;  // LRU stamp
  };
  std::unordered_map<uint64_t, Entry> files;  // key → entry
  std::map<uint64_t, uint64_t> lru;           // stamp → key

  uint64_t key_of(uint64_t hash) const {
    const uint64_t parts[5] = {layout.model_id, uint64_t(layout.type_k), uint64_t(layout.type_v),
                               uint64_t(layout.block_size), hash};
    return XXH3_64bits(parts, sizeof parts);
  }
  fs::path path_of(uint64_t key) const { return dir / (hex16(key) + kExt); }
  size_t file_bytes() const {
    return sizeof(FileHeader) + size_t(layout.block_size) * 4 + size_t(layout.payload_bytes()) + 8;
  }

  void touch(uint64_t key, Entry& e) {
    if (e.used) lru.erase(e.used);
    e.used = ++clock;
    lru[e.used] = key;
  }
  void drop(uint64_t key) {
    auto it = files.find(key);
    if (it == files.end()) return;
    std::error_code ec;
    fs::remove(path_of(key), ec);
    st.bytes -= it->second.bytes;
    lru.erase(it->second.used);
    files.erase(it);
  }
  void trim() {
    while (st.bytes > max_bytes && !lru.empty()) {
      drop(lru.begin()->second);
      ++st.n_evicted;
    }
  }
  void warn(const std::string& what) {
    if (warned) return;
    warned = true;
    std::fprintf(stderr, "kvrun: warning: --kv-cache-dir %s: %s (blocks are not persisted)\n",
                 dir.c_str(), what.c_str());
  }
};

PrefixStore::PrefixStore(const std::string& dir, int64_t max_bytes, const PrefixStoreLayout& layout)
    : impl_(std::make_unique<Impl>()) {
  if (max_bytes <= 0) throw std::invalid_argument("--kv-cache-dir-max must be positive");
  if (layout.block_size < 1 || layout.n_layer < 1 || layout.k_row_bytes < 1 ||
      layout.v_row_bytes < 0 || layout.payload_bytes() > int64_t(UINT32_MAX))
    throw std::invalid_argument("prefix store: bad block layout");
  Impl& s = *impl_;
  s.dir = dir;
  s.max_bytes = max_bytes;
  s.layout = layout;
  std::error_code ec;
  if (!fs::exists(s.dir, ec)) {
    fs::create_directories(s.dir, ec);
    if (ec) throw std::runtime_error("--kv-cache-dir " + dir + ": " + ec.message());
    fs::permissions(s.dir, fs::perms::owner_all, ec);
  }
  if (!fs::is_directory(s.dir, ec))
    throw std::runtime_error("--kv-cache-dir " + dir + ": not a directory");
  // Index block files by age (oldest first) so the LRU order survives restarts.
  std::multimap<fs::file_time_type, std::pair<uint64_t, int64_t>> by_age;
  for (const auto& e : fs::directory_iterator(s.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) == 0) {  // left by a process that died while writing
      fs::remove(e.path(), ec);
      continue;
    }
    if (name.size() != 16 + std::strlen(kExt) || !name.ends_with(kExt) || !e.is_regular_file(ec))
      continue;
    char* end = nullptr;
    const uint64_t key = std::strtoull(name.substr(0, 16).c_str(), &end, 16);
    by_age.emplace(e.last_write_time(ec), std::make_pair(key, int64_t(e.file_size(ec))));
  }
  if (ec) throw std::runtime_error("--kv-cache-dir " + dir + ": " + ec.message());
  for (const auto& [t, kb] : by_age) {
    Impl::Entry& en = s.files[kb.first];
    en.bytes = kb.second;
    s.st.bytes += kb.second;
    s.touch(kb.first, en);
  }
  s.trim();
}

PrefixStore::~PrefixStore() = default;

bool PrefixStore::contains(uint64_t hash) const {
  return impl_->files.count(impl_->key_of(hash)) != 0;
}

void PrefixStore::save(uint64_t hash, std::span<const int32_t> tokens,
                       std::span<const uint8_t> payload) {
  Impl& s = *impl_;
  const PrefixStoreLayout& L = s.layout;
  if (int64_t(tokens.size()) != L.block_size || int64_t(payload.size()) != L.payload_bytes())
    throw std::invalid_argument("PrefixStore::save: tokens or payload of the wrong size");
  const uint64_t key = s.key_of(hash);
  if (s.files.count(key)) return;  // already persisted (same key = same content)
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.block_size = uint32_t(L.block_size);
  h.key = key;
  h.model_id = L.model_id;
  h.hash = hash;
  h.type_k = uint32_t(L.type_k);
  h.type_v = uint32_t(L.type_v);
  h.n_layer = uint32_t(L.n_layer);
  h.k_row_bytes = uint32_t(L.k_row_bytes);
  h.v_row_bytes = uint32_t(L.v_row_bytes);
  h.payload_bytes = uint32_t(payload.size());
  XXH3_state_t* x = XXH3_createState();
  XXH3_64bits_reset(x);
  XXH3_64bits_update(x, &h, sizeof h);
  XXH3_64bits_update(x, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(x, payload.data(), payload.size());
  const uint64_t sum = XXH3_64bits_digest(x);
  XXH3_freeState(x);

  const fs::path tmp = s.dir / (kTmpPrefix + hex16(key) + "-" + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    s.warn(std::strerror(errno));
    return;
  }
  const bool ok = write_all(fd, &h, sizeof h) &&
                  write_all(fd, tokens.data(), tokens.size_bytes()) &&
                  write_all(fd, payload.data(), payload.size()) && write_all(fd, &sum, sizeof sum);
  const int err = errno;
  ::close(fd);
  std::error_code ec;
  if (!ok) {
    fs::remove(tmp, ec);
    s.warn(std::strerror(err));
    return;
  }
  fs::rename(tmp, s.path_of(key), ec);
  if (ec) {
    fs::remove(tmp, ec);
    s.warn(ec.message());
    return;
  }
  Impl::Entry& e = s.files[key];
  e.bytes = int64_t(s.file_bytes());
  s.st.bytes += e.bytes;
  s.touch(key, e);
  ++s.st.n_saved;
  s.trim();
}

bool PrefixStore::load(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> payload) {
  Impl& s = *impl_;
  const PrefixStoreLayout& L = s.layout;
  if (int64_t(tokens.size()) != L.block_size || int64_t(payload.size()) != L.payload_bytes())
    throw std::invalid_argument("PrefixStore::load: tokens or payload of the wrong size");
  const uint64_t key = s.key_of(hash);
  auto it = s.files.find(key);
  if (it == s.files.end()) return false;
  std::vector<uint8_t> buf;
  bool ok = read_exact(s.path_of(key).string(), s.file_bytes(), buf);
  if (ok) {
    FileHeader h{};
    std::memcpy(&h, buf.data(), sizeof h);
    const uint8_t* tok = buf.data() + sizeof h;
    const uint8_t* pay = tok + tokens.size_bytes();
    uint64_t sum = 0;
    std::memcpy(&sum, pay + payload.size(), sizeof sum);
    ok = std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kVersion &&
         h.key == key && h.model_id == L.model_id && h.hash == hash &&
         h.type_k == uint32_t(L.type_k) && h.type_v == uint32_t(L.type_v) &&
         h.block_size == uint32_t(L.block_size) && h.n_layer == uint32_t(L.n_layer) &&
         h.k_row_bytes == uint32_t(L.k_row_bytes) && h.v_row_bytes == uint32_t(L.v_row_bytes) &&
         h.payload_bytes == uint32_t(payload.size()) &&
         std::memcmp(tok, tokens.data(), tokens.size_bytes()) == 0 &&
         XXH3_64bits(buf.data(), buf.size() - sizeof sum) == sum;
    if (ok) std::memcpy(payload.data(), pay, payload.size());
  }
  if (!ok) {
    s.drop(key);
    ++s.st.n_rejected;
    return false;
  }
  s.touch(key, it->second);
  std::error_code ec;
  fs::last_write_time(s.path_of(key), fs::file_time_type::clock::now(), ec);  // LRU across runs
  ++s.st.n_loaded;
  return true;
}

PrefixStoreStats PrefixStore::stats() const {
  PrefixStoreStats st = impl_->st;
  st.n_files = int64_t(impl_->files.size());
  return st;
}

const std::string& PrefixStore::dir() const { return impl_->dir.native(); }

uint64_t model_file_id(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot stat " + path);
  }
  const uint64_t size = uint64_t(st.st_size);
  XXH3_state_t* x = XXH3_createState();
  XXH3_64bits_reset(x);
  XXH3_64bits_update(x, &size, sizeof size);
  std::vector<uint8_t> buf(size_t(4) << 20);
  auto hash_range = [&](uint64_t off, size_t n) {
    const ssize_t r = ::pread(fd, buf.data(), n, off_t(off));
    if (r > 0) XXH3_64bits_update(x, buf.data(), size_t(r));
  };
  hash_range(0, buf.size());
  constexpr uint64_t kChunks = 64, kChunk = 64 << 10;
  if (size > buf.size() + kChunk)
    for (uint64_t i = 0; i < kChunks; ++i)
      hash_range(buf.size() + (size - buf.size() - kChunk) * i / (kChunks - 1), kChunk);
  const uint64_t id = XXH3_64bits_digest(x);
  XXH3_freeState(x);
  ::close(fd);
  return id;
}

}  // namespace kvrun

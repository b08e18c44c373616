// pull.h — getting a model: `kvrun pull`, `-hf REPO[:QUANT]`, `--hf-file`, `-mu URL`.
//
// Files come from a Hugging Face compatible hub over HTTP(S) with libcurl:
//   listing   GET {endpoint}/api/models/{repo}/tree/main?recursive=true
//             → [{"type": "file", "path", "size", "lfs": {"oid": sha256, "size"}}, ...]
//   data      GET {endpoint}/{repo}/resolve/main/{path}   (redirects followed)
// as documented for the Hub's HTTP API (huggingface.co/docs/hub/api) and used by huggingface_hub
// and llama.cpp. The endpoint is $HF_ENDPOINT (default https://huggingface.co); $HF_TOKEN, when
// set, is sent as "Authorization: Bearer" to the endpoint (not to the hosts it redirects to).
//
// Downloads go to "<file>.part" beside the final name and resume with an HTTP Range request
// (after a dropped connection, automatically, and on the next run); a finished file is checked
// against the size and the sha256 (the LFS oid) the listing gives before it is renamed into
// place, so a file with a wrong hash is never loaded (the .part stays for inspection / resume).
// The cache is $KVRUN_CACHE, else $XDG_CACHE_HOME/kvrun, else ~/.cache/kvrun; a model of repo
// "user/name" lives in <cache>/hf/user/name/<path>.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvrun::pull {

/// A listing, download or verification failure; the message says what and where.
class PullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "user/repo[:QUANT]" split in two; the quant ("" when not given) is matched case-insensitively
/// against file names. Throws PullError for anything that is not "owner/name".
struct HfRef {
  std::string repo;   ///< "owner/name"
  std::string quant;  ///< e.g. "Q4_K_M"; "" = Q4_K_M if present, else the only GGUF
};
HfRef parse_hf_ref(const std::string& text);

/// One file of a repository listing.
struct RemoteFile {
  std::string path;    ///< path inside the repository
  int64_t size = 0;    ///< bytes
  std::string sha256;  ///< lowercase hex (the LFS oid); "" for a file not in LFS
};

/// Where and how to fetch.
struct PullConfig {
  std::string endpoint;   ///< no trailing slash
  std::string token;      ///< bearer token, "" for none
  std::string cache_dir;  ///< root of the cache
  bool progress = false;  ///< a progress line on stderr (bytes, rate, ETA)
  int max_attempts = 5;   ///< tries per file; each resumes where the last one stopped
};

/// $HF_ENDPOINT, $HF_TOKEN, the cache directory from the environment (see the file comment),
/// progress on when stderr is a terminal.
PullConfig config_from_env();

/// The repository's files. Throws PullError (HTTP error, unreachable host, malformed JSON).
std::vector<RemoteFile> list_repo_files(const PullConfig& cfg, const std::string& repo);

/// The GGUF file(s) to fetch: `hf_file` when given (exact path), else the GGUF whose name
/// contains `quant` (default Q4_K_M, or the only GGUF); multimodal projector files (mmproj) are
/// never chosen. A split model ("name-00001-of-00003.gguf") gives all its parts in order.
/// Throws PullError naming the GGUF files there are when nothing or more than one model matches.
std::vector<RemoteFile> select_gguf(const std::vector<RemoteFile>& files, const std::string& quant,
                                    const std::string& hf_file);

/// Progress of one download: bytes done of total (total 0 when unknown).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

/// A progress line for `name` on stderr, rewritten in place at most 5 times a second: MiB done
/// of total, rate, ETA; a newline when done == total.
ProgressFn terminal_progress(const std::string& name);

/// Downloads `url` to `dest` through "dest.part", resuming a partial file, retrying dropped
/// connections, then checking `size` (≥ 0 to check) and `sha256` ("" to skip) before renaming.
/// `bearer` is sent only to `url`'s own host. Throws PullError; a hash mismatch leaves the
/// .part file in place.
void download_file(const PullConfig& cfg, const std::string& url, const std::string& dest,
                   int64_t size, const std::string& sha256, const ProgressFn& progress = {});

/// `kvrun pull` / -hf: the model's local paths (one, or the parts of a split model in order),
/// downloaded into the cache unless already there and verified. When the hub cannot be reached,
/// a matching model already in the cache is used (with a note on stderr). Paths in a listing
/// that would leave the cache directory ("..", absolute) are refused. Throws PullError.
std::vector<std::string> pull_hf(const PullConfig& cfg, const std::string& ref,
                                 const std::string& hf_file);

/// -mu URL: downloads into <cache>/url/<file name of the URL> (no hash to check) and returns the
/// path; a finished file already there is reused. Throws PullError.
std::string pull_url(const PullConfig& cfg, const std::string& url);

/// Lowercase hex SHA-256 of a file (FIPS 180-4, through OpenSSL). Throws PullError.
std::string sha256_file(const std::string& path);

}  // namespace kvrun::pull

// batch_output.h — the output file of `kvrun batch`: one JSON line per document, appended and
// handed to the kernel as one whole line as soon as it is done, so a crash loses at most the
// line being written; a rerun reads the ids already there and cuts off a line left incomplete.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvrun {

/// What an existing output file already holds.
struct BatchResumeState {
  std::set<std::string> done;         ///< id keys (id.dump()) of complete lines
  int64_t n_lines = 0;                ///< complete lines kept
  int64_t n_cut_bytes = 0;            ///< bytes of a cut-short final line that were removed
  std::vector<std::string> warnings;  ///< e.g. "line 7: not JSON, ignored"
};

/// Scans `path` (absent: nothing done). A final line without '\n', or a final line that is not a
/// JSON object with an "id", was cut short by a crash: the file is truncated to the end of the
/// last complete line (its document is redone). A bad line in the middle is reported and
/// ignored. Throws std::runtime_error when the file cannot be read or truncated.
BatchResumeState scan_batch_output(const std::filesystem::path& path);

/// Appends result lines to the output file. With `ordered`, results are written in the order
/// of their index (0, 1, 2, ...; an index may be marked empty), otherwise as they come.
class BatchWriter {
 public:
  /// Opens `path` for appending (created when absent). Throws std::runtime_error.
  BatchWriter(const std::filesystem::path& path, bool ordered);
  ~BatchWriter();
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  /// Result `index`: written now (unordered) or when every smaller index is settled. Throws
  /// std::runtime_error when the write fails.
  void put(int64_t index, const nlohmann::ordered_json& record);
  /// Index `index` produces no line (a failed or cancelled document).
  void skip(int64_t index);
  /// Writes every buffered result (in index order), gaps or not (at the end of a run).
  void flush_all();
  /// Lines written so far.
  int64_t n_written() const { return n_written_; }

 private:
  void write_line(const nlohmann::ordered_json& record);
  void drain();
  int fd_ = -1;
  bool ordered_ = false;
  int64_t next_ = 0;
  std::map<int64_t, std::optional<nlohmann::ordered_json>> pending_;
  int64_t n_written_ = 0;
};

}  // namespace kvrun

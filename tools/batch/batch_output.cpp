// batch_output.cpp — the `kvrun batch` output file (batch_output.h).
#include "tools/batch/batch_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvrun {
namespace {

/// The id key of a result line, or "" when the line is not an object with an id.
std::string line_key(const std::string& line) {
  auto j = nlohmann::ordered_json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  auto id = j.find("id");
  if (id == j.end() || !(id->is_string() || id->is_number_integer())) return "";
  return id->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

BatchResumeState scan_batch_output(const std::filesystem::path& path) {
  BatchResumeState st;
  if (!std::filesystem::exists(path)) return st;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  f.close();

  size_t keep = data.size();  // bytes to keep
  const size_t last_nl = data.rfind('\n');
  const size_t complete_end = last_nl == std::string::npos ? 0 : last_nl + 1;
  if (complete_end < data.size()) keep = complete_end;  // final line without '\n'

  std::vector<std::pair<size_t, std::string>> lines;  // (start offset, text) of complete lines
  for (size_t pos = 0; pos < complete_end;) {
    const size_t end = data.find('\n', pos);
    lines.emplace_back(pos, data.substr(pos, end - pos));
    pos = end + 1;
  }
  // A final complete line that does not parse was cut short too (e.g. a torn write).
  while (!lines.empty() && keep == lines.back().first + lines.back().second.size() + 1 &&
         !lines.back().second.empty() && line_key(lines.back().second).empty()) {
    keep = lines.back().first;
    lines.pop_back();
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].second.empty()) continue;
    const std::string key = line_key(lines[i].second);
    if (key.empty()) {
      st.warnings.push_back("line " + std::to_string(i + 1) + ": not a result line, ignored");
      continue;
    }
    st.done.insert(key);
    ++st.n_lines;
  }
  if (keep < data.size()) {
    st.n_cut_bytes = int64_t(data.size() - keep);
    std::error_code ec;
    std::filesystem::resize_file(path, keep, ec);
    if (ec) throw std::runtime_error("cannot truncate " + path.string() + ": " + ec.message());
  }
  return st;
}

BatchWriter::BatchWriter(const std::filesystem::path& path, bool ordered) : ordered_(ordered) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
}

BatchWriter::~BatchWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void BatchWriter::write_line(const nlohmann::ordered_json& record) {
  const std::string line =
      record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // One write() for the whole line: a kill between lines never leaves half a line behind.
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("cannot write the output: ") + std::strerror(errno));
    }
    off += size_t(n);
  }
  ++n_written_;
}

void BatchWriter::drain() {
  while (!pending_.empty() && pending_.begin()->first == next_) {
    if (pending_.begin()->second) write_line(*pending_.begin()->second);
    pending_.erase(pending_.begin());
    ++next_;
  }
}

void BatchWriter::put(int64_t index, const nlohmann::ordered_json& record) {
  if (!ordered_) return write_line(record);
  pending_[index] = record;
  drain();
}

void BatchWriter::skip(int64_t index) {
  if (!ordered_) return;
  pending_[index] = std::nullopt;
  drain();
}

void BatchWriter::flush_all() {
  for (auto& [i, rec] : pending_)
    if (rec) write_line(*rec);
  pending_.clear();
}

}  // namespace kvrun

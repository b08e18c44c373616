// batch_input.cpp — reading `kvrun batch` documents (batch_input.h).
#include "tools/batch/batch_input.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace kvrun {
namespace {

using ojson = nlohmann::ordered_json;

std::string dump_id(const ojson& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Adds `doc` unless its id was seen; then records a duplicate.
void add_doc(BatchInput& in, std::unordered_map<std::string, int64_t>& seen, BatchDoc doc) {
  auto [it, fresh] = seen.emplace(doc.key, doc.line);
  if (!fresh) {
    in.duplicates.push_back(
        {doc.line, "duplicate id " + doc.key +
                       (it->second > 0 ? " (first on line " + std::to_string(it->second) + ")"
                                       : std::string())});
    return;
  }
  in.docs.push_back(std::move(doc));
}

}  // namespace

BatchInput parse_batch_jsonl(const std::string& data) {
  BatchInput in;
  std::unordered_map<std::string, int64_t> seen;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string line = data.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; }))
      continue;
    ojson j;
    try {
      j = ojson::parse(line);
    } catch (const std::exception& e) {
      in.invalid.push_back({line_no, std::string("not JSON: ") + e.what()});
      continue;
    }
    if (!j.is_object()) {
      in.invalid.push_back({line_no, "not a JSON object"});
      continue;
    }
    auto id = j.find("id");
    if (id == j.end() || !(id->is_string() || id->is_number_integer())) {
      in.invalid.push_back({line_no, "no \"id\" (a string or an integer)"});
      continue;
    }
    auto text = j.find("text");
    if (text == j.end() || !text->is_string()) {
      in.invalid.push_back({line_no, "no \"text\" string"});
      continue;
    }
    BatchDoc doc;
    doc.id = *id;
    doc.key = dump_id(doc.id);
    doc.text = text->get<std::string>();
    doc.line = line_no;
    j.erase("text");
    doc.fields = std::move(j);
    add_doc(in, seen, std::move(doc));
  }
  return in;
}

BatchInput read_batch_jsonl(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_batch_jsonl(ss.str());
}

BatchInput read_batch_folder(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const auto ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".txt" || ext == ".md")) files.push_back(e.path());
  }
  if (ec) throw std::runtime_error("cannot list " + dir.string() + ": " + ec.message());
  std::sort(files.begin(), files.end());
  BatchInput in;
  std::unordered_map<std::string, int64_t> seen;
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    if (!f) {
      in.invalid.push_back({0, "cannot read " + p.string()});
      continue;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    BatchDoc doc;
    doc.id = p.filename().string();
    doc.key = dump_id(doc.id);
    doc.text = ss.str();
    doc.fields = ojson::object({{"id", doc.id}});
    add_doc(in, seen, std::move(doc));
  }
  return in;
}

}  // namespace kvrun

// batch_input.h — the documents of `kvrun batch`: JSON lines ({"id": ..., "text": ..., extra
// fields}) or a folder of .txt/.md files. Bad lines and repeated ids are reported, never fatal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvrun {

/// One document to process.
struct BatchDoc {
  nlohmann::ordered_json id;      ///< as given: a string or an integer (folder: the file name)
  std::string key;                ///< id.dump(): the identity used for duplicates and resume
  std::string text;               ///< the text to summarize
  nlohmann::ordered_json fields;  ///< the input object without "text" (copied to the output)
  int64_t line = 0;               ///< 1-based line of the input file (0 for folder inputs)
};

/// A problem with one input line or file, reported and skipped.
struct BatchInputIssue {
  int64_t line = 0;     ///< 1-based line number (0: a folder entry)
  std::string message;  ///< what is wrong, e.g. "not JSON: ..." or "duplicate id \"a\" (...)"
};

/// Everything read from an input.
struct BatchInput {
  std::vector<BatchDoc> docs;               ///< in input order, duplicates removed
  std::vector<BatchInputIssue> invalid;     ///< malformed lines (skipped)
  std::vector<BatchInputIssue> duplicates;  ///< lines whose id an earlier line has (skipped)
};

/// Parses JSON lines from `data`. Blank lines are ignored. A line that is not a JSON object, has
/// no "id" (string or integer) or no "text" string is malformed; a repeated id is a duplicate.
BatchInput parse_batch_jsonl(const std::string& data);

/// Reads a JSON-lines file (see parse_batch_jsonl). Throws std::runtime_error when unreadable.
BatchInput read_batch_jsonl(const std::filesystem::path& path);

/// Reads every regular .txt and .md file of `dir` (not recursive), sorted by name; the id is the
/// file name. Throws std::runtime_error when `dir` cannot be listed.
BatchInput read_batch_folder(const std::filesystem::path& dir);

}  // namespace kvrun

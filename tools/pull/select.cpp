// select.cpp — which GGUF file(s) of a repository listing `-hf REPO[:QUANT]` means (pull.h).
#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tools/pull/pull.h"

namespace kvrun::pull {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_model_gguf(const RemoteFile& f) {
  const std::string u = upper(basename_of(f.path));
  return u.size() > 5 && u.compare(u.size() - 5, 5, ".GGUF") == 0 &&
         u.find("MMPROJ") == std::string::npos;
}

/// A model: one file, or the parts of a split file in order.
struct Group {
  std::string key;  ///< the path, or the split prefix
  int n_parts = 1;  ///< parts the names announce
  std::vector<RemoteFile> files;
};

/// llama.cpp's gguf-split naming: "<prefix>-00001-of-00003.gguf".
const std::regex& split_name() {
  static const std::regex re(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)", std::regex::icase);
  return re;
}

std::vector<Group> group_models(const std::vector<RemoteFile>& files) {
  std::map<std::string, Group> by_key;
  for (const RemoteFile& f : files) {
    if (!is_model_gguf(f)) continue;
    std::smatch m;
    if (std::regex_match(f.path, m, split_name())) {
      Group& g = by_key[m[1].str()];
      g.key = m[1].str();
      g.n_parts = std::stoi(m[3].str());
      g.files.push_back(f);
    } else {
      Group& g = by_key[f.path];
      g.key = f.path;
      g.files.push_back(f);
    }
  }
  std::vector<Group> out;
  for (auto& [key, g] : by_key) {
    std::sort(g.files.begin(), g.files.end(),
              [](const RemoteFile& a, const RemoteFile& b) { return a.path < b.path; });
    out.push_back(std::move(g));
  }
  return out;
}

std::string list_names(const std::vector<Group>& groups) {
  if (groups.empty()) return "none";
  std::string s;
  for (const Group& g : groups) {
    if (!s.empty()) s += ", ";
    s += g.n_parts > 1 ? g.key + " (" + std::to_string(g.n_parts) + " parts)" : g.key;
  }
  return s;
}

/// `q` occurs in the file name as a whole tag: not preceded by a letter or digit, not followed
/// by one or by '_' ("Q4_K" is not a whole tag of "Q4_K_M").
bool whole_tag(const std::string& name, const std::string& q) {
  for (size_t at = name.find(q); at != std::string::npos; at = name.find(q, at + 1)) {
    const bool before = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const size_t end = at + q.size();
    const bool after = end >= name.size() ||
                       !(std::isalnum(static_cast<unsigned char>(name[end])) || name[end] == '_');
    if (before && after) return true;
  }
  return false;
}

std::vector<RemoteFile> checked(const Group& g) {
  if (int(g.files.size()) != g.n_parts)
    throw PullError("split model " + g.key + " announces " + std::to_string(g.n_parts) +
                    " parts but the repository has " + std::to_string(g.files.size()));
  return g.files;
}

}  // namespace

std::vector<RemoteFile> select_gguf(const std::vector<RemoteFile>& files, const std::string& quant,
                                    const std::string& hf_file) {
  const std::vector<Group> groups = group_models(files);
  if (!hf_file.empty()) {
    for (const Group& g : groups)
      for (const RemoteFile& f : g.files)
        if (f.path == hf_file) return checked(g);
    throw PullError("no file '" + hf_file +
                    "' in the repository (GGUF models there: " + list_names(groups) + ")");
  }
  const std::string q = upper(quant.empty() ? "Q4_K_M" : quant);
  std::vector<const Group*> hits, whole;
  for (const Group& g : groups) {
    const std::string name = upper(basename_of(g.key));
    if (name.find(q) == std::string::npos) continue;
    hits.push_back(&g);
    if (whole_tag(name, q)) whole.push_back(&g);
  }
  if (whole.size() == 1) return checked(*whole.front());
  if (whole.empty() && hits.size() == 1) return checked(*hits.front());
  if (hits.empty() && quant.empty() && groups.size() == 1) return checked(groups.front());
  if (hits.empty())
    throw PullError(std::string(quant.empty() ? "no Q4_K_M model and several GGUF files"
                                              : "no GGUF file matches '" + quant + "'") +
                    " (GGUF models there: " + list_names(groups) + "); name one with :QUANT or " +
                    "--hf-file");
  std::vector<Group> many;
  for (const Group* g : whole.empty() ? hits : whole) many.push_back(*g);
  throw PullError("'" + q + "' matches several models (" + list_names(many) +
                  "); name one with --hf-file");
}

HfRef parse_hf_ref(const std::string& text) {
  HfRef r;
  const size_t colon = text.find(':');
  r.repo = text.substr(0, colon);
  if (colon != std::string::npos) r.quant = text.substr(colon + 1);
  static const std::regex repo_re(R"(^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$)");
  if (!std::regex_match(r.repo, repo_re) || r.repo.find("..") != std::string::npos)
    throw PullError("'" + text + "' is not a repository name (owner/name[:QUANT])");
  if (colon != std::string::npos && r.quant.empty())
    throw PullError("'" + text + "': empty quant after ':'");
  return r;
}

}  // namespace kvrun::pull

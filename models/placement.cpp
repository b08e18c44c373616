// placement.cpp — which device runs each part of a model: -ngl's layer split, -nkvo and the -ot
// rules (see Placement and apply_tensor_overrides in llama.h).
#include <algorithm>
#include <regex>
#include <string>

#include "models/llama.h"

namespace kvrun {

Placement Placement::all_on(Device& host, int64_t n_layer) {
  Placement p;
  p.input = p.output = &host;
  p.layers.assign(size_t(n_layer), &host);
  p.kv.assign(size_t(n_layer), &host);
  p.ffn.assign(size_t(n_layer), &host);
  return p;
}

Placement Placement::split(Device& host, Device& gpu, int64_t n_layer, int64_t n_gpu,
                           bool kv_offload) {
  Placement p = all_on(host, n_layer);
  for (int64_t il = std::max<int64_t>(0, n_layer - n_gpu); il < n_layer; ++il) {
    p.layers[size_t(il)] = &gpu;
    p.ffn[size_t(il)] = &gpu;
    if (kv_offload) p.kv[size_t(il)] = &gpu;
  }
  if (n_gpu > n_layer) p.output = &gpu;
  return p;
}

std::vector<Device*> Placement::devices() const {
  std::vector<Device*> d{input};
  auto add = [&](Device* x) {
    if (std::find(d.begin(), d.end(), x) == d.end()) d.push_back(x);
  };
  for (Device* x : layers) add(x);
  for (Device* x : kv) add(x);
  for (Device* x : ffn) add(x);
  add(output);
  return d;
}

namespace {

/// The layer of an FFN tensor name `blk.N.ffn_…`, or −1 for any other name.
int64_t ffn_layer(const std::string& name) {
  static const std::regex re(R"(^blk\.(\d+)\.ffn_)");
  std::smatch m;
  if (!std::regex_search(name, m, re)) return -1;
  return std::stoll(m[1].str());
}

std::string rule_text(const TensorOverride& r) {
  return "-ot " + r.pattern + "=" + (r.device ? r.device->name() : std::string("?"));
}

}  // namespace

std::vector<int64_t> ffn_override_rules(const gguf::File& f, int64_t n_layer,
                                        const std::vector<TensorOverride>& rules) {
  std::vector<std::regex> res;
  for (const TensorOverride& r : rules) {
    try {
      res.emplace_back(r.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw ModelError(rule_text(r) + ": not a regular expression (" + e.what() + ")");
    }
  }
  std::vector<bool> used(rules.size(), false);
  std::vector<int64_t> by(size_t(n_layer), -1);  // per layer, the rule that moved its FFN
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string name(t.name);
    size_t i = 0;
    while (i < rules.size() && !std::regex_search(name, res[i])) ++i;
    if (i == rules.size()) continue;
    used[i] = true;
    const int64_t il = ffn_layer(name);
    if (il < 0 || il >= n_layer)
      throw ModelError(rule_text(rules[i]) + ": matches " + name +
                       "; -ot places the FFN tensors of a layer (blk.N.ffn_*), -ngl whole layers");
    int64_t& prev = by[size_t(il)];
    if (prev >= 0 && rules[size_t(prev)].device != rules[i].device)
      throw ModelError(rule_text(rules[i]) + " and " + rule_text(rules[size_t(prev)]) + ": layer " +
                       std::to_string(il) + "'s FFN tensors go to two devices (" +
                       rules[size_t(prev)].device->name() + ", " + rules[i].device->name() +
                       "); kvrun runs a layer's FFN on one");
    if (prev < 0) prev = int64_t(i);
  }
  for (size_t i = 0; i < rules.size(); ++i)
    if (!used[i]) throw ModelError(rule_text(rules[i]) + ": matches no tensor of this model");
  return by;
}

void apply_tensor_overrides(Placement& p, const gguf::File& f, int64_t n_layer, bool encoder,
                            const std::vector<TensorOverride>& rules) {
  const std::vector<int64_t> by = ffn_override_rules(f, n_layer, rules);
  for (int64_t il = 0; il < n_layer; ++il) {
    if (by[size_t(il)] < 0) continue;
    const TensorOverride& r = rules[size_t(by[size_t(il)])];
    if (r.device == p.ffn[size_t(il)]) continue;
    if (encoder)
      throw ModelError(rule_text(r) + ": layer " + std::to_string(il) +
                       " is an encoder layer, which runs on one device (no -ot)");
    p.ffn[size_t(il)] = r.device;
  }
}

}  // namespace kvrun

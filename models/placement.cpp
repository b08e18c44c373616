// placement.cpp — which device runs each part of a model: -ngl's layer split, -nkvo and the -ot
// rules (see Placement and apply_tensor_overrides in llama.h).
#include <algorithm>
#include <regex>
#include <string>
#include <string_view>
#include <utility>

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

namespace {

/// The layer of a tensor name `blk.N.…`, or −1.
int64_t tensor_layer(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int64_t il = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) il = il * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? il : -1;
}

/// What `dev` lacks to multiply by tensor t as the model does (upload_llama_weights' checks:
/// expert matrices by matmul_id, any matrix by matmul), or "" when nothing.
std::string matmul_gap(const Device& dev, const gguf::TensorInfo& t) {
  if (t.n_dims >= 3 && t.ne[2] > 1 && !dev.supports(Op::kMatmulId, t.type, DType::F32, t.ne[0]))
    return "the mixture-of-experts ops (moe_route, matmul_id)";
  if (t.n_dims >= 2 && t.ne[1] > 1 && !dev.supports(Op::kMatmul, t.type, DType::F32, t.ne[0]))
    return std::string("matmul of ") + traits(t.type).name + " weights";
  return "";
}

/// "3", "0-47", "1, 4-6": the sorted layer numbers as ranges.
std::string layer_ranges(const std::vector<int64_t>& ls) {
  std::string out;
  for (size_t i = 0; i < ls.size();) {
    size_t j = i;
    while (j + 1 < ls.size() && ls[j + 1] == ls[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ls[i]) +
           (j > i ? "-" + std::to_string(ls[j]) : std::string());
    i = j + 1;
  }
  return out;
}

/// What a layer on `dev` with KV rows on `kv` lacks beyond its matrices, or "".
std::string layer_op_gap(const Device& dev, const Device& kv, const ArchSpec& spec, bool sinks) {
  if (spec.encoder &&
      !(dev.supports(Op::kLayerNorm) && dev.supports(Op::kGelu) && dev.supports(Op::kAttention)))
    return "the encoder ops (layer_norm, gelu, attention)";
  if (spec.mla && !(dev.supports(Op::kMla) && kv.supports(Op::kMla)))
    return "multi-head latent attention";
  if (sinks && !(dev.supports(Op::kAttnSinks) && kv.supports(Op::kAttnSinks)))
    return "attention sinks";
  return "";
}

}  // namespace

std::vector<std::string> fit_placement_to_devices(Placement& p, Device& host, const gguf::File& f,
                                                  const Hparams& hp, const ArchSpec& spec) {
  const size_t n = size_t(hp.n_layer);
  std::vector<std::string> layer_gap(n), ffn_gap(n);
  std::vector<bool> sinks(n, false), moe(n, false);
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t il = tensor_layer(t.name);
    if (il < 0 || il >= hp.n_layer) continue;
    const bool ffn = t.name.find(".ffn_") != std::string_view::npos;
    sinks[size_t(il)] = sinks[size_t(il)] || t.name.find(".attn_sinks") != std::string_view::npos;
    moe[size_t(il)] = moe[size_t(il)] || t.name.find(".ffn_gate_inp.") != std::string_view::npos;
    std::string& gap = ffn ? ffn_gap[size_t(il)] : layer_gap[size_t(il)];
    const Device& dev = ffn ? *p.ffn[size_t(il)] : *p.layers[size_t(il)];
    if (gap.empty() && &dev != &host) gap = matmul_gap(dev, t);
  }
  struct Moved {  // layers moved to the host for one reason
    const Device* dev;
    std::string gap;
    bool ffn;  // the FFN only (else the whole layer)
    std::vector<int64_t> layers;
  };
  std::vector<Moved> moved;
  auto note = [&](const Device& d, const std::string& gap, bool ffn, int64_t il) {
    auto it = std::find_if(moved.begin(), moved.end(), [&](const Moved& m) {
      return m.dev == &d && m.gap == gap && m.ffn == ffn;
    });
    if (it == moved.end()) it = moved.insert(moved.end(), Moved{&d, gap, ffn, {}});
    it->layers.push_back(il);
  };
  for (size_t il = 0; il < n; ++il) {
    Device& dev = *p.layers[il];
    if (&dev != &host) {
      std::string gap = layer_gap[il];
      if (gap.empty()) gap = layer_op_gap(dev, *p.kv[il], spec, sinks[il]);
      if (!gap.empty()) {
        note(dev, gap, false, int64_t(il));
        p.layers[il] = p.ffn[il] = p.kv[il] = &host;
        continue;
      }
    }
    Device& fd = *p.ffn[il];
    if (&fd == &host) continue;
    std::string gap = ffn_gap[il];
    if (gap.empty() && moe[il] && !fd.supports(Op::kMoeRoute))
      gap = "the mixture-of-experts ops (moe_route, matmul_id)";
    if (gap.empty()) continue;
    note(fd, gap, true, int64_t(il));
    p.ffn[il] = &host;
  }
  std::vector<std::string> lines;
  if (p.output != &host) {
    const gguf::TensorInfo* head = f.find_tensor("output.weight");
    if (!head) head = f.find_tensor("token_embd.weight");  // tied
    const std::string gap = head ? matmul_gap(*p.output, *head) : "";
    if (!gap.empty()) {
      lines.push_back(p.output->name() + " lacks " + gap + ": the output head runs on " +
                      host.name());
      p.output = &host;
    }
  }
  for (const Moved& m : moved) {
    const bool many = m.layers.size() > 1;
    lines.push_back(m.dev->name() + " lacks " + m.gap + ": " +
                    (m.ffn ? (many ? "the FFNs of layers " : "the FFN of layer ")
                           : (many ? "layers " : "layer ")) +
                    layer_ranges(m.layers) + (many ? " run" : " runs") + " on " + host.name());
  }
  return lines;
}

}  // namespace kvrun

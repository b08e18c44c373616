// llama.cpp — llama-family weights and forward pass (see llama.h).
#include "models/llama.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>

#include "models/bert.h"
#include "models/rope_scaling.h"

namespace kvrun {

namespace {

std::string shape_str(const int64_t* ne, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

}  // namespace

Tensor load_tensor(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   bool required, int64_t ne2) {
  const gguf::TensorInfo* info = f.find_tensor(name);
  if (!info) {
    if (required) throw ModelError("tensor " + name + " is missing");
    return Tensor{};
  }
  const int64_t want[4] = {ne0, ne1 ? ne1 : 1, ne2, 1};
  const int n_dims = ne2 > 1 ? 3 : ne1 ? 2 : 1;
  for (int i = 0; i < 4; ++i)
    if (info->ne[i] != want[i])
      throw ModelError("tensor " + name + " has shape " + shape_str(info->ne, info->n_dims) +
                       ", expected " + shape_str(want, n_dims));
  if (!info->data) throw ModelError("tensor " + name + " has no data");
  if (ne1 == 0 && info->type != DType::F32)
    throw ModelError("tensor " + name + " is " + traits(info->type).name + ", expected f32");
  return f.view(*info);
}

Tensor load_matrix(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   int64_t ne2) {
  Tensor t = load_tensor(f, name, ne0, ne1, true, ne2);
  if (!cpu_device().supports(Op::kMatmul, t.type, DType::F32, ne0))
    throw ModelError("tensor " + name + " has type " + traits(t.type).name +
                     ", which the CPU matmul does not support");
  return t;
}

namespace {

/// An f32 bias per expert, {m, n_expert} (absent → null view unless `required`).
Tensor get_expert_bias(const gguf::File& f, const std::string& name, int64_t m, int64_t n_expert,
                       bool required) {
  Tensor t = load_tensor(f, name, m, n_expert, required);
  if (t.data && t.type != DType::F32)
    throw ModelError("tensor " + name + " is " + traits(t.type).name + ", expected f32");
  return t;
}

/// The matmuls of weights that read the same input (one backend call: the CPU converts the
/// activations once when the weights pair with the same activation type).
void matmul_shared_input(Backend& be, std::initializer_list<MatmulOut> outs, const float* x,
                         int64_t n) {
  be.matmul_many(outs.begin(), int(outs.size()), x, n);
}

void add_bias(Backend& be, float* y, const Tensor& bias, int64_t rows, int64_t cols) {
  if (bias.data) be.add_row(y, bias, rows, cols);
}

/// Fills w.yarn_div when YaRN is in effect (rope_ext_factor ≠ 0), for the global and the
/// windowed layers' base and scale.
void build_yarn_divisors(const Hparams& hp, LlamaWeights& w) {
  const RopeParams& r = hp.rope;
  const float ext = rope_ext_factor(r);
  if (ext == 0.0f) return;
  const int64_t orig = yarn_n_ctx_orig(r, hp.n_ctx_train);
  const Tensor* src[4] = {nullptr, &w.rope_freqs, &w.rope_short, &w.rope_long};
  for (int swa = 0; swa < 2; ++swa) {
    const float base = swa && r.freq_base_swa > 0 ? r.freq_base_swa : r.freq_base;
    const float scale = swa && r.freq_scale_swa > 0 ? r.freq_scale_swa : rope_freq_scale(r);
    for (int s = 0; s < 4; ++s) {
      const float* ff = src[s] ? static_cast<const float*>(src[s]->data) : nullptr;
      w.yarn_div[swa][s] = yarn_freq_divisors(r.n_rot, orig, base, scale, ext, r.yarn_beta_fast,
                                              r.yarn_beta_slow, ff);
    }
  }
}

}  // namespace

LlamaWeights load_llama_weights(const gguf::File& f, const Hparams& hp, const ArchSpec& spec) {
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v, no = hp.n_head * hp.head_dim_v;
  if (spec.encoder) return load_encoder_weights(f, hp, spec);
  LlamaWeights w;
  w.spec = spec;
  w.tok_embd = load_tensor(f, "token_embd.weight", d, hp.n_vocab);
  w.output_norm = load_tensor(f, "output_norm.weight", d, 0);
  w.output = f.find_tensor("output.weight") || !spec.output_optional
                 ? load_matrix(f, "output.weight", d, hp.n_vocab)
                 : load_matrix(f, "token_embd.weight", d, hp.n_vocab);
  w.rope_freqs = load_tensor(f, "rope_freqs.weight", hp.rope.n_rot / 2, 0, false);
  w.rope_short = load_tensor(f, "rope_factors_short.weight", hp.rope.n_rot / 2, 0, false);
  w.rope_long = load_tensor(f, "rope_factors_long.weight", hp.rope.n_rot / 2, 0, false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LlamaLayer L;
    L.attn_norm = load_tensor(f, p + "attn_norm.weight", d, 0);
    if (spec.mla) {
      load_mla_attention(f, hp, w, L, il);
    } else if (f.find_tensor(p + "attn_qkv.weight")) {
      L.wqkv = load_matrix(f, p + "attn_qkv.weight", d, nq + nk + nv);
    } else {
      L.wq = load_matrix(f, p + "attn_q.weight", d, nq);
      L.wk = load_matrix(f, p + "attn_k.weight", d, nk);
      L.wv = load_matrix(f, p + "attn_v.weight", d, nv);
      L.bq = load_tensor(f, p + "attn_q.bias", nq, 0, false);
      L.bk = load_tensor(f, p + "attn_k.bias", nk, 0, false);
      L.bv = load_tensor(f, p + "attn_v.bias", nv, 0, false);
    }
    L.q_norm = load_tensor(f, p + "attn_q_norm.weight", hp.head_dim, 0, spec.qk_norm);
    L.k_norm = load_tensor(f, p + "attn_k_norm.weight", hp.head_dim, 0, spec.qk_norm);
    L.wo = load_matrix(f, p + "attn_output.weight", no, d);
    L.bo = load_tensor(f, p + "attn_output.bias", d, 0, false);
    L.attn_sinks = load_tensor(f, p + "attn_sinks.weight", hp.n_head, 0, spec.attn_sinks);
    if (spec.ffn_norm_is_post_attention) {  // gpt-oss: the FFN's norm under this name
      L.ffn_norm = load_tensor(f, p + "post_attention_norm.weight", d, 0);
    } else {
      L.attn_post_norm = load_tensor(f, p + "post_attention_norm.weight", d, 0, spec.post_norms);
      L.ffn_norm = load_tensor(f, p + "ffn_norm.weight", d, 0);
    }
    if (spec.moe && il >= hp.n_layer_dense_lead) {
      const int64_t ne = hp.n_expert, ff = hp.n_ff_exp;
      L.ffn_gate_inp = load_matrix(f, p + "ffn_gate_inp.weight", d, ne);
      L.ffn_gate_exps = load_matrix(f, p + "ffn_gate_exps.weight", d, ff, ne);
      L.ffn_up_exps = load_matrix(f, p + "ffn_up_exps.weight", d, ff, ne);
      L.ffn_down_exps = load_matrix(f, p + "ffn_down_exps.weight", ff, d, ne);
      L.ffn_gate_inp_b = load_tensor(f, p + "ffn_gate_inp.bias", ne, 0, spec.moe_bias);
      L.ffn_gate_exps_b = get_expert_bias(f, p + "ffn_gate_exps.bias", ff, ne, spec.moe_bias);
      L.ffn_up_exps_b = get_expert_bias(f, p + "ffn_up_exps.bias", ff, ne, spec.moe_bias);
      L.ffn_down_exps_b = get_expert_bias(f, p + "ffn_down_exps.bias", d, ne, spec.moe_bias);
      L.ffn_exp_probs_b = load_tensor(f, p + "exp_probs_b.bias", ne, 0, false);
      if (hp.n_expert_shared > 0) {  // deepseek2: one SwiGLU of n_ff_exp · n_expert_shared
        const int64_t fs = ff * hp.n_expert_shared;
        L.ffn_gate_shexp = load_matrix(f, p + "ffn_gate_shexp.weight", d, fs);
        L.ffn_up_shexp = load_matrix(f, p + "ffn_up_shexp.weight", d, fs);
        L.ffn_down_shexp = load_matrix(f, p + "ffn_down_shexp.weight", fs, d);
      }
      w.layers.push_back(L);
      continue;
    }
    if (f.find_tensor(p + "ffn_gate.weight")) {
      L.ffn_gate = load_matrix(f, p + "ffn_gate.weight", d, hp.n_ff);
      L.ffn_up = load_matrix(f, p + "ffn_up.weight", d, hp.n_ff);
    } else {
      L.ffn_up = load_matrix(f, p + "ffn_up.weight", d, 2 * hp.n_ff);
    }
    L.ffn_down = load_matrix(f, p + "ffn_down.weight", hp.n_ff, d);
    L.ffn_post_norm = load_tensor(f, p + "post_ffw_norm.weight", d, 0, spec.post_norms);
    w.layers.push_back(L);
  }
  build_yarn_divisors(hp, w);
  return w;
}

bool LlamaWeights::is_derived(const Tensor& t) const {
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (const Buffer& b : derived) {
    const auto* lo = static_cast<const uint8_t*>(b.data());
    if (p >= lo && p < lo + b.size()) return true;
  }
  return false;
}

namespace {

/// The per-layer weights of the attention sub-block (MLA's too, and an encoder's other per-layer
/// ones), which the layer's device holds, in upload order.
std::array<Tensor*, 25> layer_tensors(LlamaLayer& L) {
  return {&L.wq_a,
          &L.q_a_norm,
          &L.wq_b,
          &L.wkv_a,
          &L.kv_a_norm,
          &L.wk_b,
          &L.wv_b,
          &L.attn_norm,
          &L.wqkv,
          &L.wq,
          &L.wk,
          &L.wv,
          &L.bq,
          &L.bk,
          &L.bv,
          &L.q_norm,
          &L.k_norm,
          &L.wo,
          &L.bo,
          &L.attn_sinks,
          &L.attn_post_norm,
          &L.attn_out_norm,
          &L.attn_out_norm_b,
          &L.layer_out_norm,
          &L.layer_out_norm_b};
}

/// The per-layer weights of the FFN sub-block, which Placement::ffn's device holds.
std::array<Tensor*, 19> ffn_tensors(LlamaLayer& L) {
  return {&L.ffn_norm,        &L.ffn_gate,       &L.ffn_up,          &L.ffn_down,
          &L.ffn_post_norm,   &L.ffn_gate_inp,   &L.ffn_gate_exps,   &L.ffn_up_exps,
          &L.ffn_down_exps,   &L.ffn_gate_inp_b, &L.ffn_gate_exps_b, &L.ffn_up_exps_b,
          &L.ffn_down_exps_b, &L.ffn_up_b,       &L.ffn_down_b,      &L.ffn_gate_shexp,
          &L.ffn_up_shexp,    &L.ffn_down_shexp, &L.ffn_exp_probs_b};
}

/// With `release_mapped` (the weights come from a read-only file mapping and now live in device
/// copies), an untied token embedding of `bytes` bytes is copied into host memory (w.derived)
/// and its mapped pages given back: the lookup of a token whose row was never read, or whose page
/// the kernel dropped under memory pressure, otherwise waits on the disk in the middle of a
/// decode step (qwen3-30b-a3b on a 24 GiB machine: 1.5–3.9 ms per step of ~65,
/// docs/benchmarks.md). A `tied` embedding (the same view as `output` before the upload) keeps
/// reading the mapping: the output head's copy already holds its bytes, and a second copy would
/// cost as much memory again.
void keep_token_embd_in_memory(LlamaWeights& w, bool release_mapped, bool tied, int64_t bytes) {
  if (!release_mapped || tied || !w.tok_embd.data || bytes <= 0 || w.is_derived(w.tok_embd)) return;
  Buffer copy{size_t(bytes)};
  std::memcpy(copy.data(), w.tok_embd.data, size_t(bytes));
  gguf::release_mapped_pages(w.tok_embd.data, size_t(bytes));
  w.tok_embd.data = copy.data();
  w.derived.push_back(std::move(copy));
}

}  // namespace

size_t upload_llama_weights(LlamaWeights& w, const Placement& p, bool release_mapped,
                            const std::function<void(int64_t, int64_t)>& progress) {
  size_t bytes = 0;
  int64_t total = 0, done = 0;
  // Before the output head's upload, which may point `output` at a device copy.
  const bool tied = w.tok_embd.data && w.tok_embd.data == w.output.data;
  auto tensor_bytes = [](const Tensor& t) {
    return t.data ? *row_bytes(t.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3] : int64_t(0);
  };
  if (progress) {
    total = tensor_bytes(w.output_norm) + tensor_bytes(w.output);
    for (LlamaLayer& L : w.layers) {
      for (const Tensor* t : layer_tensors(L)) total += tensor_bytes(*t);
      for (const Tensor* t : ffn_tensors(L)) total += tensor_bytes(*t);
    }
  }
  auto up = [&](Tensor& t, Device& dev, const char* what) {
    if (!t.data) return;
    const int64_t nb = tensor_bytes(t);
    if (t.ne[2] > 1 && !dev.supports(Op::kMatmulId, t.type, DType::F32, t.ne[0]))
      throw ModelError(std::string(what) + " (experts) has type " + traits(t.type).name +
                       ", which " + dev.name() + "'s matmul_id does not support");
    if (t.ne[1] > 1 && !dev.supports(Op::kMatmul, t.type, DType::F32, t.ne[0]))
      throw ModelError(std::string(what) + " has type " + traits(t.type).name + ", which " +
                       dev.name() + "'s matmul does not support");
    std::unique_ptr<DeviceBuffer> b = dev.upload_weight(t, release_mapped && !w.is_derived(t));
    done += nb;
    if (progress) progress(done, total);
    if (!b) return;
    bytes += b->size();
    w.uploads.push_back(std::move(b));
  };
  Device& out = *p.output;
  up(w.output_norm, out, "output_norm");
  up(w.output, out, "output");
  up(w.tok_norm, *p.input, "token_embd_norm");
  up(w.tok_norm_b, *p.input, "token_embd_norm bias");
  for (size_t il = 0; il < w.layers.size(); ++il) {
    LlamaLayer& L = w.layers[il];
    Device& dev = *p.layers[il];
    Device& ffn_dev = *p.ffn[il];
    if (L.ffn_gate_inp.data && !ffn_dev.supports(Op::kMoeRoute))
      throw ModelError("layer " + std::to_string(il) + " is a mixture of experts, and " +
                       ffn_dev.name() +
                       " does not support moe_route yet (-ot \"ffn_.*_exps=CPU\" keeps the "
                       "experts on the CPU)");
    if (w.spec.encoder)
      for (Op op : {Op::kLayerNorm, Op::kGelu, Op::kAttention})
        if (!dev.supports(op))
          throw ModelError("layer " + std::to_string(il) + " is an encoder (" + w.spec.name +
                           ") layer, and " + dev.name() + " does not support " + op_name(op) +
                           " yet (run it on the CPU: no -ngl)");
    for (const Device* d : {&dev, p.kv[il]})
      if (w.spec.mla && !d->supports(Op::kMla))
        throw ModelError("layer " + std::to_string(il) + " uses multi-head latent attention, and " +
                         d->name() + " does not support it yet (run it on the CPU: no -ngl)");
    for (const Device* d : {&dev, p.kv[il]})  // the sinks are read where the attention runs
      if (L.attn_sinks.data && !d->supports(Op::kAttnSinks))
        throw ModelError("layer " + std::to_string(il) + " has attention sinks, and " + d->name() +
                         " does not support them yet");
    for (Tensor* t : layer_tensors(L))
      up(*t, dev, ("layer " + std::to_string(il) + " weight").c_str());
    for (Tensor* t : ffn_tensors(L))
      up(*t, ffn_dev, ("layer " + std::to_string(il) + " FFN weight").c_str());
  }
  keep_token_embd_in_memory(w, release_mapped, tied, tensor_bytes(w.tok_embd));
  return bytes;
}

LlamaScratch::LlamaScratch(const Hparams& hp, int64_t n, Device& dev) : n_batch(n), dev_(dev) {
  auto alloc = [&](int64_t cols) {
    bufs_.push_back(dev.alloc(size_t(n * cols) * sizeof(float), BufferUse::kActivations));
    return static_cast<float*>(bufs_.back()->data());
  };
  x = alloc(hp.n_embd);
  xn = alloc(hp.n_embd);
  q = alloc(hp.n_head * hp.head_dim);
  k = alloc(hp.n_head_kv * hp.head_dim);
  v = alloc(hp.n_head_kv * hp.head_dim_v);
  att = alloc(hp.n_head * hp.head_dim_v);
  proj = alloc(hp.n_embd);
  gate = alloc(hp.n_ff);
  up = alloc(hp.n_ff);
}

float* LlamaScratch::grow(int which, int64_t n) {
  std::unique_ptr<DeviceBuffer>& b = grown_[which];
  if (!b || b->size() < size_t(n) * sizeof(float))
    b = dev_.alloc(size_t(n) * sizeof(float), BufferUse::kActivations);
  return static_cast<float*>(b->data());
}

struct LlamaExec::Part {
  Device* dev;
  std::unique_ptr<Backend> be;
  std::unique_ptr<LlamaScratch> scratch;
};

LlamaExec::LlamaExec(const Hparams& hp, const Placement& p, int n_threads, int64_t n_batch)
    : n_batch_(n_batch) {
  for (Device* d : p.devices()) {
    auto part = std::make_unique<Part>();
    part->dev = d;
    part->be = d->make_backend(n_threads);
    part->scratch = std::make_unique<LlamaScratch>(hp, n_batch, *d);
    parts_.push_back(std::move(part));
  }
}

LlamaExec::~LlamaExec() = default;

const LlamaExec::Part& LlamaExec::part(const Device* d) const {
  for (const auto& p : parts_)
    if (p->dev == d) return *p;
  throw std::logic_error("LlamaExec: device " + d->name() + " is not in the placement");
}

Backend& LlamaExec::backend(const Device* d) const { return *part(d).be; }
LlamaScratch& LlamaExec::scratch(const Device* d) const { return *part(d).scratch; }
int LlamaExec::n_threads() const { return parts_.front()->be->n_threads(); }

void LlamaExec::begin_step(const PageTable& pt) {
  for (auto& p : parts_) p->be->begin_step(pt);
}

/// The layer's RoPE: its base and scaling (gemma3's windowed layers differ) and frequency
/// divisors (llama3 rope_freqs, or phi3's LongRoPE short/long by the context size); with YaRN
/// (ext_factor ≠ 0) the divisors of w.yarn_div, which carry the position scale, and its mscale.
RopeConfig layer_rope(const Hparams& hp, const LlamaWeights& w, int64_t il, int64_t n_ctx) {
  const RopeParams& r = hp.rope;
  const bool swa = hp.is_swa(il);
  const float ext = rope_ext_factor(r);
  RopeConfig rc{r.n_rot, r.freq_base, rope_freq_scale(r), nullptr, 1.0f, w.spec.rope_neox};
  if (swa && r.freq_base_swa > 0) rc.freq_base = r.freq_base_swa;
  if (swa && r.freq_scale_swa > 0) rc.freq_scale = r.freq_scale_swa;
  rc.mscale = rope_mscale(r, rc.freq_scale, ext);
  const bool long_ctx = n_ctx > (r.n_ctx_orig > 0 ? r.n_ctx_orig : hp.n_ctx_train);
  const int src = w.rope_freqs.data ? 1 : long_ctx ? 3 : 2;
  if (ext != 0.0f) {
    rc.freq_factors = w.yarn_div[swa ? 1 : 0][src].data();
    rc.freq_scale = 1.0f;
    return rc;
  }
  const Tensor& ff = src == 1 ? w.rope_freqs : src == 3 ? w.rope_long : w.rope_short;
  rc.freq_factors = static_cast<const float*>(ff.data);
  return rc;
}

namespace {

/// Where attention over a GPU layer's host-tier blocks runs with --kv-host-attn cpu: the host's
/// backend and scratch and the layer's host tier as the host addresses it (LlamaBatch::kv_host).
struct HostAttn {
  Backend* be = nullptr;
  LlamaScratch* s = nullptr;
  const KvLayer* kv = nullptr;  ///< null: the device reads its host blocks in place
};

/// The layer's attention split by KV tier (--kv-host-attn cpu): the device `be` over the blocks
/// in its memory and the host over those in the host tier, at the same time (the device's part
/// is queued before the host computes its own), merged on the device by log-sum-exp.
void split_attention(Backend& be, LlamaScratch& s, const HostAttn& host, const KvLayer& kv,
                     const PagedAttnParams& ap, int64_t n, int64_t nq) {
  const size_t f = sizeof(float);
  const int64_t part = n * ap.attn.n_head * attn_state_floats(ap.attn.head_dim_v);
  float* fast = s.grow(LlamaScratch::kAttnPart, part);
  float* slow = s.grow(LlamaScratch::kAttnPart2, part);
  float* host_part = host.s->grow(LlamaScratch::kAttnPart, part);
  PagedAttnParams fa = ap;  // the flash scheme on both sides, as GPUs run it also with -fa off
  fa.flash = true;
  host.be->copy_from(be, s.q, host.s->q, size_t(n * nq) * f);  // (waits for the KV store)
  be.paged_attention_part(kv, fa, KvTier::kFast, s.q, fast);
  host.be->paged_attention_part(*host.kv, fa, KvTier::kSlow, host.s->q, host_part);
  be.copy_from(*host.be, host_part, slow, size_t(part) * f);
  const float* parts[2] = {fast, slow};
  be.attn_merge(fa, parts, 2, n, s.att);
}

/// The KV store and paged attention of one layer: on the layer's backend `be`, or, when the
/// layer's KV rows live on another device (-nkvo), on that device's backend `kv_be`, with Q, K
/// and V copied there and the attention output copied back; split by tier with `host.kv`.
void kv_attention(Backend& be, LlamaScratch& s, Backend& kv_be, LlamaScratch& kv_s,
                  const KvLayer& kv, const PagedAttnParams& ap, int64_t n, int64_t nq, int64_t nk,
                  int64_t nv, const HostAttn& host) {
  if (&kv_be == &be) {
    be.kv_store(kv, ap, s.k, s.v);
    if (host.kv)
      split_attention(be, s, host, kv, ap, n, nq);
    else
      be.paged_attention(kv, ap, s.q, s.att);
    return;
  }
  const size_t f = sizeof(float);
  kv_be.copy_from(be, s.q, kv_s.q, size_t(n * nq) * f);
  kv_be.copy_from(be, s.k, kv_s.k, size_t(n * nk) * f);
  kv_be.copy_from(be, s.v, kv_s.v, size_t(n * nv) * f);
  kv_be.kv_store(kv, ap, kv_s.k, kv_s.v);
  kv_be.paged_attention(kv, ap, kv_s.q, kv_s.att);
  be.copy_from(kv_be, kv_s.att, s.att, size_t(n * (ap.attn.n_head * ap.attn.head_dim_v)) * f);
}

/// x += attention sub-block of layer il over the batch's n rows, on backend `be` (its KV store
/// and attention on `kv_be`).
void attention_block(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be,
                     LlamaScratch& s, Backend& kv_be, LlamaScratch& kv_s, const LlamaBatch& b,
                     int64_t n, const HostAttn& host) {
  if (w.spec.mla) {
    mla_attention_block(hp, w, il, be, s, kv_be, kv_s, b, n);
    return;
  }
  const LlamaLayer& L = w.layers[size_t(il)];
  const ArchSpec& spec = w.spec;
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v;
  be.rms_norm(s.x, &L.attn_norm, s.xn, n, d, hp.rms_eps);
  if (L.wqkv.data) {  // fused: one matmul, then the Q, K, V columns
    float* fused = s.grow(LlamaScratch::kFused, n * (nq + nk + nv));
    be.matmul(L.wqkv, s.xn, n, fused);
    be.copy_cols(fused, n, nq + nk + nv, 0, nq, s.q);
    be.copy_cols(fused, n, nq + nk + nv, nq, nk, s.k);
    be.copy_cols(fused, n, nq + nk + nv, nq + nk, nv, s.v);
  } else {
    matmul_shared_input(be, {{&L.wq, s.q}, {&L.wk, s.k}, {&L.wv, s.v}}, s.xn, n);
    add_bias(be, s.q, L.bq, n, nq);
    add_bias(be, s.k, L.bk, n, nk);
    add_bias(be, s.v, L.bv, n, nv);
  }
  if (L.q_norm.data) {  // per head, before RoPE
    be.rms_norm(s.q, &L.q_norm, s.q, n * hp.n_head, hp.head_dim, hp.rms_eps);
    be.rms_norm(s.k, &L.k_norm, s.k, n * hp.n_head_kv, hp.head_dim, hp.rms_eps);
  }
  const RopeConfig rc = layer_rope(hp, w, il, b.n_ctx);
  be.rope(s.q, n, hp.n_head, hp.head_dim, rc);
  be.rope(s.k, n, hp.n_head_kv, hp.head_dim, rc);
  PagedAttnParams ap;
  ap.attn = {hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
             spec.attn_scale > 0 ? spec.attn_scale : 1.0f / std::sqrt(float(hp.head_dim))};
  if (spec.q_scale > 0) {
    be.scale(s.q, n * nq, spec.q_scale);
    ap.attn.scale = 1.0f;
  }
  ap.flash = b.flash;
  ap.rotate = b.rotate;
  ap.window = hp.is_swa(il) ? hp.n_swa : 0;
  ap.softcap = hp.attn_softcap;
  ap.sinks = static_cast<const float*>(L.attn_sinks.data);
  kv_attention(be, s, kv_be, kv_s, b.kv[il], ap, n, nq, nk, nv, host);
  be.matmul(L.wo, s.att, n, s.proj);
  add_bias(be, s.proj, L.bo, n, d);
  if (L.attn_post_norm.data) be.rms_norm(s.proj, &L.attn_post_norm, s.proj, n, d, hp.rms_eps);
  be.add(s.x, s.proj, n * d);
}

/// x += feed-forward sub-block (SwiGLU or GeGLU) of layer il over n rows, on backend `be`.
void ffn_block(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be, LlamaScratch& s,
               int64_t n) {
  const LlamaLayer& L = w.layers[size_t(il)];
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  be.rms_norm(s.x, &L.ffn_norm, s.xn, n, d, hp.rms_eps);
  if (L.ffn_gate_inp.data) {
    moe_ffn(hp, w.spec, L, be, s, s.xn, n, s.proj);
    be.add(s.x, s.proj, n * d);
    return;
  }
  if (L.ffn_gate.data) {
    matmul_shared_input(be, {{&L.ffn_gate, s.gate}, {&L.ffn_up, s.up}}, s.xn, n);
  } else {  // fused: gate columns first, then up
    float* fused = s.grow(LlamaScratch::kFused, n * 2 * ff);
    be.matmul(L.ffn_up, s.xn, n, fused);
    be.copy_cols(fused, n, 2 * ff, 0, ff, s.gate);
    be.copy_cols(fused, n, 2 * ff, ff, ff, s.up);
  }
  be.glu(glu_kind(w.spec.ffn), s.gate, s.up, s.gate, n, ff);
  be.matmul(L.ffn_down, s.gate, n, s.proj);
  if (L.ffn_post_norm.data) be.rms_norm(s.proj, &L.ffn_post_norm, s.proj, n, d, hp.rms_eps);
  be.add(s.x, s.proj, n * d);
}

/// ffn_block of layer il where its FFN runs: on `be` (the layer's backend), or, when -ot placed
/// the FFN on another device, on that device's backend `f_be` with the residual stream copied
/// there and back.
void ffn_on(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be, LlamaScratch& s,
            Backend& f_be, LlamaScratch& f_s, int64_t n) {
  if (&f_be == &be) {
    ffn_block(hp, w, il, be, s, n);
    return;
  }
  const size_t bytes = size_t(n * hp.n_embd) * sizeof(float);
  f_be.copy_from(be, s.x, f_s.x, bytes);
  ffn_block(hp, w, il, f_be, f_s, n);
  be.copy_from(f_be, f_s.x, s.x, bytes);
}

/// Output norm, head and final soft-cap of b.out_rows on backend `be`; returns the device rows
/// output_fetch copies out: the logits [n_out, n_vocab], or with b.embd the normed rows
/// [n_out, n_embd] themselves. Issues ops only (run_graph may record it).
const float* output_compute(const Hparams& hp, const LlamaWeights& w, Backend& be, LlamaScratch& s,
                            const LlamaBatch& b) {
  const int64_t d = hp.n_embd, n_vocab = hp.n_vocab, n_out = b.n_out;
  // Normalize the wanted rows into consecutive rows of xn (runs of consecutive rows in one
  // call), then one matmul for all of them.
  for (int64_t i = 0; i < n_out;) {
    int64_t j = i + 1;
    while (j < n_out && b.out_rows[j] == b.out_rows[j - 1] + 1) ++j;
    be.rms_norm(s.x + int64_t(b.out_rows[i]) * d, &w.output_norm, s.xn + i * d, j - i, d,
                hp.rms_eps);
    i = j;
  }
  if (b.embd) return s.xn;
  const bool host = be.device().host_memory();
  float* logits = host ? b.logits : s.grow(LlamaScratch::kLogits, n_out * n_vocab);
  be.matmul(w.output, s.xn, n_out, logits);
  if (hp.final_softcap > 0) be.softcap(logits, n_out * n_vocab, hp.final_softcap);
  return logits;
}

/// Copies output_compute's rows `out` into b.logits or b.embd (host) and waits for them.
void output_fetch(const Hparams& hp, Backend& be, const float* out, const LlamaBatch& b) {
  const int64_t cols = b.embd ? hp.n_embd : hp.n_vocab;
  float* dst = b.embd ? b.embd : b.logits;
  if (dst != out) {
    if (be.device().host_memory())
      std::copy(out, out + b.n_out * cols, dst);
    else
      be.download(dst, out, size_t(b.n_out * cols) * sizeof(float));
  }
  be.synchronize();
}

}  // namespace

void llama_forward(const Hparams& hp, const LlamaWeights& w, const Placement& p, LlamaExec& exec,
                   const LlamaBatch& b) {
  if (w.spec.encoder) {
    encoder_forward(hp, w, p, exec, b);
    return;
  }
  const int64_t n = b.pt->n_tokens, d = hp.n_embd;
  exec.begin_step(*b.pt);
  const Device* cur = p.input;
  Backend* be = &exec.backend(cur);
  LlamaScratch* s = &exec.scratch(cur);
  be->get_rows(w.tok_embd, b.tokens, n, s->x);
  if (w.spec.embd_scale) be->scale(s->x, n * d, std::sqrt(float(d)));
  // The residual stream moves to the next device once, where the placement changes.
  auto move_to = [&](const Device* dev) {
    if (dev == cur) return;
    Backend& next = exec.backend(dev);
    LlamaScratch& ns = exec.scratch(dev);
    next.copy_from(*be, s->x, ns.x, size_t(n * d) * sizeof(float));
    cur = dev, be = &next, s = &ns;
  };
  // Each run of consecutive layers on one device (and the output head where it follows them
  // there) is issued as one unit a GPU backend may replay as a graph; a run whose KV rows live
  // or FFN on another device (-nkvo, -ot) copies between backends and is issued directly.
  const float* out = nullptr;
  for (int64_t il = 0; il < hp.n_layer;) {
    move_to(p.layers[size_t(il)]);
    int64_t end = il + 1;
    while (end < hp.n_layer && p.layers[size_t(end)] == cur) ++end;
    // (--kv-host-attn cpu, a step reading host-tier blocks: the host computes part of them)
    bool local = !b.kv_host;
    for (int64_t j = il; j < end; ++j)
      local = local && p.kv[size_t(j)] == cur && p.ffn[size_t(j)] == cur;
    const bool head = end == hp.n_layer && b.n_out > 0 && p.output == cur;
    auto issue = [&, il, end] {
      for (int64_t j = il; j < end; ++j) {
        const Device* kv_dev = p.kv[size_t(j)];
        const Device* ffn_dev = p.ffn[size_t(j)];
        HostAttn host;
        if (b.kv_host && b.kv_host[j].k_slow && kv_dev == cur && cur != p.input)
          host = {&exec.backend(p.input), &exec.scratch(p.input), &b.kv_host[j]};
        attention_block(hp, w, j, *be, *s, exec.backend(kv_dev), exec.scratch(kv_dev), b, n, host);
        ffn_on(hp, w, j, *be, *s, exec.backend(ffn_dev), exec.scratch(ffn_dev), n);
      }
      if (head) out = output_compute(hp, w, *be, *s, b);
    };
    if (local)
      be->run_graph(issue);
    else
      issue();
    il = end;
  }
  if (b.n_out == 0) {
    be->synchronize();  // (the step's KV rows are written before the cache reads them)
    return;
  }
  if (!out) {
    move_to(p.output);
    out = output_compute(hp, w, *be, *s, b);
  }
  output_fetch(hp, *be, out, b);
}

}  // namespace kvrun

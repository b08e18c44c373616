// llama.cpp — llama-family weights and forward pass (see llama.h).
#include "models/llama.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "cpu/cpu_traits.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/pack.h"

namespace kvrun {

namespace {

std::string shape_str(const int64_t* ne, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

/// The tensor `name` with shape {ne0} (ne1 == 0) or {ne0, ne1}; absent → null view unless
/// `required`. Norms and biases (1-D) must be f32; matrices must be usable by the CPU matmul.
Tensor get(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
           bool required = true) {
  const gguf::TensorInfo* info = f.find_tensor(name);
  if (!info) {
    if (required) throw ModelError("tensor " + name + " is missing");
    return Tensor{};
  }
  const int64_t want[4] = {ne0, ne1 ? ne1 : 1, 1, 1};
  for (int i = 0; i < 4; ++i)
    if (info->ne[i] != want[i])
      throw ModelError("tensor " + name + " has shape " + shape_str(info->ne, info->n_dims) +
                       ", expected " + shape_str(want, ne1 ? 2 : 1));
  if (!info->data) throw ModelError("tensor " + name + " has no data");
  if (ne1 == 0 && info->type != DType::F32)
    throw ModelError("tensor " + name + " is " + traits(info->type).name + ", expected f32");
  return f.view(*info);
}

/// A matrix the CPU matmul can multiply by.
Tensor get_matrix(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1) {
  Tensor t = get(f, name, ne0, ne1);
  if (!cpu::matmul_supports(t.type, ne0))
    throw ModelError("tensor " + name + " has type " + traits(t.type).name +
                     ", which the CPU matmul does not support");
  return t;
}

/// The matmuls of weights that read the same input: one call (activations converted once, one
/// pool job) when they pair with the same activation type, else one call each.
void matmul_shared_input(cpu::ThreadPool& pool, std::initializer_list<cpu::MatmulOut> outs,
                         const float* x, int64_t n) {
  const cpu::MatmulOut* o = outs.begin();
  bool same = true;
  for (const cpu::MatmulOut& e : outs)
    same = same && cpu::cpu_traits(e.w->type)->act_type == cpu::cpu_traits(o->w->type)->act_type;
  if (same) {
    cpu::matmul_many(pool, o, int(outs.size()), x, n);
    return;
  }
  for (const cpu::MatmulOut& e : outs) cpu::matmul(pool, *e.w, x, n, e.y);
}

void add_bias(float* y, const Tensor& bias, int64_t rows, int64_t cols) {
  if (!bias.data) return;
  for (int64_t r = 0; r < rows; ++r) cpu::add(y + r * cols, static_cast<float*>(bias.data), cols);
}

}  // namespace

LlamaWeights load_llama_weights(const gguf::File& f, const Hparams& hp, const ArchSpec& spec) {
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v, no = hp.n_head * hp.head_dim_v;
  LlamaWeights w;
  w.spec = spec;
  w.tok_embd = get(f, "token_embd.weight", d, hp.n_vocab);
  w.output_norm = get(f, "output_norm.weight", d, 0);
  w.output = f.find_tensor("output.weight") || !spec.output_optional
                 ? get_matrix(f, "output.weight", d, hp.n_vocab)
                 : get_matrix(f, "token_embd.weight", d, hp.n_vocab);
  w.rope_freqs = get(f, "rope_freqs.weight", hp.rope.n_rot / 2, 0, false);
  w.rope_short = get(f, "rope_factors_short.weight", hp.rope.n_rot / 2, 0, false);
  w.rope_long = get(f, "rope_factors_long.weight", hp.rope.n_rot / 2, 0, false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LlamaLayer L;
    L.attn_norm = get(f, p + "attn_norm.weight", d, 0);
    if (f.find_tensor(p + "attn_qkv.weight")) {
      L.wqkv = get_matrix(f, p + "attn_qkv.weight", d, nq + nk + nv);
    } else {
      L.wq = get_matrix(f, p + "attn_q.weight", d, nq);
      L.wk = get_matrix(f, p + "attn_k.weight", d, nk);
      L.wv = get_matrix(f, p + "attn_v.weight", d, nv);
      L.bq = get(f, p + "attn_q.bias", nq, 0, false);
      L.bk = get(f, p + "attn_k.bias", nk, 0, false);
      L.bv = get(f, p + "attn_v.bias", nv, 0, false);
    }
    L.q_norm = get(f, p + "attn_q_norm.weight", hp.head_dim, 0, spec.qk_norm);
    L.k_norm = get(f, p + "attn_k_norm.weight", hp.head_dim, 0, spec.qk_norm);
    L.wo = get_matrix(f, p + "attn_output.weight", no, d);
    L.attn_post_norm = get(f, p + "post_attention_norm.weight", d, 0, spec.post_norms);
    L.ffn_norm = get(f, p + "ffn_norm.weight", d, 0);
    if (f.find_tensor(p + "ffn_gate.weight")) {
      L.ffn_gate = get_matrix(f, p + "ffn_gate.weight", d, hp.n_ff);
      L.ffn_up = get_matrix(f, p + "ffn_up.weight", d, hp.n_ff);
    } else {
      L.ffn_up = get_matrix(f, p + "ffn_up.weight", d, 2 * hp.n_ff);
    }
    L.ffn_down = get_matrix(f, p + "ffn_down.weight", hp.n_ff, d);
    L.ffn_post_norm = get(f, p + "post_ffw_norm.weight", d, 0, spec.post_norms);
    w.layers.push_back(L);
  }
  return w;
}

size_t pack_llama_weights(LlamaWeights& w, bool release_mapped) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  size_t bytes = 0;
  auto pack = [&](Tensor& t) {
    if (!cpu::pack_supported(t)) return;
    w.packed.push_back(cpu::pack_weight(t));
    t.packed = w.packed.back().data();
    bytes += w.packed.back().size();
    // A tied token embedding still reads its rows through `data`: the lookup faults in the
    // few pages it needs again (the mapping is read-only, so nothing is lost).
    const uintptr_t b = uintptr_t(t.data), e = b + t.nb[1] * size_t(t.ne[1]);
    const uintptr_t pb = (b + page - 1) / page * page, pe = e / page * page;
    if (release_mapped && pe > pb) madvise(reinterpret_cast<void*>(pb), pe - pb, MADV_DONTNEED);
  };
  pack(w.output);
  for (LlamaLayer& L : w.layers)
    for (Tensor* t : {&L.wqkv, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down})
      pack(*t);
  return bytes;
}

LlamaScratch::LlamaScratch(const Hparams& hp, int64_t n)
    : n_batch(n),
      x(size_t(n * hp.n_embd)),
      xn(size_t(n * hp.n_embd)),
      q(size_t(n * hp.n_head * hp.head_dim)),
      k(size_t(n * hp.n_head_kv * hp.head_dim)),
      v(size_t(n * hp.n_head_kv * hp.head_dim_v)),
      att(size_t(n * hp.n_head * hp.head_dim_v)),
      proj(size_t(n * hp.n_embd)),
      gate(size_t(n * hp.n_ff)),
      up(size_t(n * hp.n_ff)),
      pos(size_t(n)) {}

namespace {

/// Copies columns [c0, c0 + n) of every row of src [rows, cols] to dst [rows, n].
void copy_cols(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * cols + c0, n, dst + r * n);
}

/// The layer's RoPE: its base and scaling (gemma3's windowed layers differ) and frequency
/// divisors (llama3 rope_freqs, or phi3's LongRoPE short/long by the context size).
cpu::RopeConfig layer_rope(const Hparams& hp, const LlamaWeights& w, int64_t il, int64_t n_ctx) {
  const RopeParams& r = hp.rope;
  const bool swa = hp.is_swa(il);
  cpu::RopeConfig rc{r.n_rot, r.freq_base,   1.0f / r.scaling_factor,
                     nullptr, r.attn_factor, w.spec.rope_neox};
  if (swa && r.freq_base_swa > 0) rc.freq_base = r.freq_base_swa;
  if (swa && r.freq_scale_swa > 0) rc.freq_scale = r.freq_scale_swa;
  const Tensor& ff = w.rope_freqs.data                                            ? w.rope_freqs
                     : n_ctx > (r.n_ctx_orig > 0 ? r.n_ctx_orig : hp.n_ctx_train) ? w.rope_long
                                                                                  : w.rope_short;
  rc.freq_factors = static_cast<const float*>(ff.data);
  return rc;
}

/// x += attention sub-block of layer il over the batch's n rows.
void attention_block(const Hparams& hp, const LlamaWeights& w, int64_t il, cpu::ThreadPool& pool,
                     LlamaScratch& s, const LlamaBatch& b, int64_t n) {
  const LlamaLayer& L = w.layers[size_t(il)];
  const ArchSpec& spec = w.spec;
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v;
  float* x = s.x.data();
  cpu::rms_norm(x, static_cast<float*>(L.attn_norm.data), s.xn.data(), n, d, hp.rms_eps);
  if (L.wqkv.data) {  // fused: one matmul, then the Q, K, V columns
    s.fused.resize(size_t(n * (nq + nk + nv)));
    cpu::matmul(pool, L.wqkv, s.xn.data(), n, s.fused.data());
    copy_cols(s.fused.data(), n, nq + nk + nv, 0, nq, s.q.data());
    copy_cols(s.fused.data(), n, nq + nk + nv, nq, nk, s.k.data());
    copy_cols(s.fused.data(), n, nq + nk + nv, nq + nk, nv, s.v.data());
  } else {
    matmul_shared_input(pool, {{&L.wq, s.q.data()}, {&L.wk, s.k.data()}, {&L.wv, s.v.data()}},
                        s.xn.data(), n);
    add_bias(s.q.data(), L.bq, n, nq);
    add_bias(s.k.data(), L.bk, n, nk);
    add_bias(s.v.data(), L.bv, n, nv);
  }
  if (L.q_norm.data) {  // per head, before RoPE
    cpu::rms_norm(s.q.data(), static_cast<float*>(L.q_norm.data), s.q.data(), n * hp.n_head,
                  hp.head_dim, hp.rms_eps);
    cpu::rms_norm(s.k.data(), static_cast<float*>(L.k_norm.data), s.k.data(), n * hp.n_head_kv,
                  hp.head_dim, hp.rms_eps);
  }
  const cpu::RopeConfig rc = layer_rope(hp, w, il, b.n_ctx);
  cpu::rope(s.q.data(), n, hp.n_head, hp.head_dim, s.pos.data(), rc);
  cpu::rope(s.k.data(), n, hp.n_head_kv, hp.head_dim, s.pos.data(), rc);
  cpu::PagedAttnParams ap;
  ap.attn = {hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
             spec.attn_scale > 0 ? spec.attn_scale : 1.0f / std::sqrt(float(hp.head_dim))};
  if (spec.q_scale > 0) {
    cpu::scale(s.q.data(), n * nq, spec.q_scale);
    ap.attn.scale = 1.0f;
  }
  ap.flash = b.flash;
  ap.rotate = b.rotate;
  ap.window = hp.is_swa(il) ? hp.n_swa : 0;
  ap.softcap = hp.attn_softcap;
  cpu::paged_kv_store(b.kv[il], ap, s.seqs.data(), b.n_seqs, s.k.data(), s.v.data());
  cpu::paged_attention(pool, b.kv[il], ap, s.seqs.data(), b.n_seqs, s.q.data(), s.att.data());
  cpu::matmul(pool, L.wo, s.att.data(), n, s.proj.data());
  if (L.attn_post_norm.data)
    cpu::rms_norm(s.proj.data(), static_cast<float*>(L.attn_post_norm.data), s.proj.data(), n, d,
                  hp.rms_eps);
  cpu::add(x, s.proj.data(), n * d);
}

/// x += feed-forward sub-block (SwiGLU or GeGLU) of layer il over n rows.
void ffn_block(const Hparams& hp, const LlamaWeights& w, int64_t il, cpu::ThreadPool& pool,
               LlamaScratch& s, int64_t n) {
  const LlamaLayer& L = w.layers[size_t(il)];
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  float* x = s.x.data();
  cpu::rms_norm(x, static_cast<float*>(L.ffn_norm.data), s.xn.data(), n, d, hp.rms_eps);
  if (L.ffn_gate.data) {
    matmul_shared_input(pool, {{&L.ffn_gate, s.gate.data()}, {&L.ffn_up, s.up.data()}}, s.xn.data(),
                        n);
  } else {  // fused: gate columns first, then up
    s.fused.resize(size_t(n * 2 * ff));
    cpu::matmul(pool, L.ffn_up, s.xn.data(), n, s.fused.data());
    copy_cols(s.fused.data(), n, 2 * ff, 0, ff, s.gate.data());
    copy_cols(s.fused.data(), n, 2 * ff, ff, ff, s.up.data());
  }
  if (w.spec.ffn == FfnAct::GeluTanh)
    cpu::geglu(s.gate.data(), s.up.data(), s.gate.data(), n, ff);
  else
    cpu::swiglu(s.gate.data(), s.up.data(), s.gate.data(), n, ff);
  cpu::matmul(pool, L.ffn_down, s.gate.data(), n, s.proj.data());
  if (L.ffn_post_norm.data)
    cpu::rms_norm(s.proj.data(), static_cast<float*>(L.ffn_post_norm.data), s.proj.data(), n, d,
                  hp.rms_eps);
  cpu::add(x, s.proj.data(), n * d);
}

/// Output norm, head and final soft-cap of the rows that want logits.
void output_head(const Hparams& hp, const LlamaWeights& w, cpu::ThreadPool& pool, LlamaScratch& s,
                 const LlamaBatch& b, int64_t n_out) {
  const int64_t d = hp.n_embd, n_vocab = hp.n_vocab, n_seqs = b.n_seqs;
  // Normalize the rows that need logits into consecutive rows of xn, one matmul for all of them.
  int64_t row = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const LlamaSeqSlice& sl = b.seqs[i];
    if (!sl.logits) continue;
    const int64_t k = sl.all_logits ? sl.n_tokens : 1;
    const float* src = s.x.data() + (s.seqs[size_t(i)].q0 + sl.n_tokens - k) * d;
    cpu::rms_norm(src, static_cast<float*>(w.output_norm.data), s.xn.data() + row * d, k, d,
                  hp.rms_eps);
    row += k;
  }
  float* logits = n_seqs == 1 ? b.seqs[0].logits : nullptr;  // one slice: straight into it
  if (!logits) {
    s.logits.resize(size_t(n_out * n_vocab));
    logits = s.logits.data();
  }
  cpu::matmul(pool, w.output, s.xn.data(), n_out, logits);
  if (hp.final_softcap > 0) cpu::softcap(logits, n_out * n_vocab, hp.final_softcap);
  if (n_seqs == 1) return;
  row = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const LlamaSeqSlice& sl = b.seqs[i];
    if (!sl.logits) continue;
    const int64_t k = sl.all_logits ? sl.n_tokens : 1;
    std::copy_n(s.logits.data() + row * n_vocab, k * n_vocab, sl.logits);
    row += k;
  }
}

}  // namespace

void llama_forward(const Hparams& hp, const LlamaWeights& w, cpu::ThreadPool& pool, LlamaScratch& s,
                   const LlamaBatch& b) {
  s.seqs.resize(size_t(b.n_seqs));
  int64_t n = 0, n_out = 0;  // rows, logit rows
  for (int64_t i = 0; i < b.n_seqs; ++i) {
    const LlamaSeqSlice& sl = b.seqs[i];
    cpu::PagedSeq& seq = s.seqs[size_t(i)];
    seq.block_table = sl.block_table;
    seq.pos0 = sl.pos0;
    seq.q0 = n;
    seq.n_q = sl.n_tokens;
    for (int64_t j = 0; j < sl.n_tokens; ++j) s.pos[size_t(n + j)] = int32_t(sl.pos0 + j);
    n += sl.n_tokens;
    if (sl.logits) n_out += sl.all_logits ? sl.n_tokens : 1;
  }
  cpu::get_rows(w.tok_embd, b.tokens, n, s.x.data());
  if (w.spec.embd_scale) cpu::scale(s.x.data(), n * hp.n_embd, std::sqrt(float(hp.n_embd)));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    attention_block(hp, w, il, pool, s, b, n);
    ffn_block(hp, w, il, pool, s, n);
  }
  if (n_out > 0) output_head(hp, w, pool, s, b, n_out);
}

}  // namespace kvrun

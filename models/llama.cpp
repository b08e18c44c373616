// llama.cpp — llama-family weights and forward pass (see llama.h).
#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cpu/matmul.h"
#include "cpu/ops.h"

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

void add_bias(float* y, const Tensor& bias, int64_t rows, int64_t cols) {
  if (!bias.data) return;
  for (int64_t r = 0; r < rows; ++r) cpu::add(y + r * cols, static_cast<float*>(bias.data), cols);
}

}  // namespace

LlamaWeights load_llama_weights(const gguf::File& f, const Hparams& hp) {
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v, no = hp.n_head * hp.head_dim_v;
  LlamaWeights w;
  w.tok_embd = get(f, "token_embd.weight", d, hp.n_vocab);
  w.output_norm = get(f, "output_norm.weight", d, 0);
  w.output = f.find_tensor("output.weight") ? get_matrix(f, "output.weight", d, hp.n_vocab)
                                            : get_matrix(f, "token_embd.weight", d, hp.n_vocab);
  w.rope_freqs = get(f, "rope_freqs.weight", hp.rope.n_rot / 2, 0, false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LlamaLayer L;
    L.attn_norm = get(f, p + "attn_norm.weight", d, 0);
    L.wq = get_matrix(f, p + "attn_q.weight", d, nq);
    L.wk = get_matrix(f, p + "attn_k.weight", d, nk);
    L.wv = get_matrix(f, p + "attn_v.weight", d, nv);
    L.bq = get(f, p + "attn_q.bias", nq, 0, false);
    L.bk = get(f, p + "attn_k.bias", nk, 0, false);
    L.bv = get(f, p + "attn_v.bias", nv, 0, false);
    L.wo = get_matrix(f, p + "attn_output.weight", no, d);
    L.ffn_norm = get(f, p + "ffn_norm.weight", d, 0);
    L.ffn_gate = get_matrix(f, p + "ffn_gate.weight", d, hp.n_ff);
    L.ffn_up = get_matrix(f, p + "ffn_up.weight", d, hp.n_ff);
    L.ffn_down = get_matrix(f, p + "ffn_down.weight", hp.n_ff, d);
    w.layers.push_back(L);
  }
  return w;
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

void llama_forward(const Hparams& hp, const LlamaWeights& w, cpu::ThreadPool& pool, LlamaScratch& s,
                   const LlamaBatch& b) {
  const int64_t d = hp.n_embd, n_vocab = hp.n_vocab;
  cpu::PagedAttnParams ap;
  ap.attn = {hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
             1.0f / std::sqrt(float(hp.head_dim))};
  ap.flash = b.flash;
  ap.rotate = b.rotate;
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
  const int64_t n_seqs = b.n_seqs;
  const cpu::RopeConfig rc{hp.rope.n_rot, hp.rope.freq_base, 1.0f / hp.rope.scaling_factor,
                           static_cast<const float*>(w.rope_freqs.data), w.rope_neox};
  float* x = s.x.data();
  cpu::get_rows(w.tok_embd, b.tokens, n, x);

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LlamaLayer& L = w.layers[size_t(il)];
    // Attention block.
    cpu::rms_norm(x, static_cast<float*>(L.attn_norm.data), s.xn.data(), n, d, hp.rms_eps);
    cpu::matmul(pool, L.wq, s.xn.data(), n, s.q.data());
    cpu::matmul(pool, L.wk, s.xn.data(), n, s.k.data());
    cpu::matmul(pool, L.wv, s.xn.data(), n, s.v.data());
    add_bias(s.q.data(), L.bq, n, L.wq.ne[1]);
    add_bias(s.k.data(), L.bk, n, L.wk.ne[1]);
    add_bias(s.v.data(), L.bv, n, L.wv.ne[1]);
    cpu::rope(s.q.data(), n, hp.n_head, hp.head_dim, s.pos.data(), rc);
    cpu::rope(s.k.data(), n, hp.n_head_kv, hp.head_dim, s.pos.data(), rc);
    cpu::paged_kv_store(b.kv[il], ap, s.seqs.data(), n_seqs, s.k.data(), s.v.data());
    cpu::paged_attention(pool, b.kv[il], ap, s.seqs.data(), n_seqs, s.q.data(), s.att.data());
    cpu::matmul(pool, L.wo, s.att.data(), n, s.proj.data());
    cpu::add(x, s.proj.data(), n * d);
    // Feed-forward block (SwiGLU).
    cpu::rms_norm(x, static_cast<float*>(L.ffn_norm.data), s.xn.data(), n, d, hp.rms_eps);
    cpu::matmul(pool, L.ffn_gate, s.xn.data(), n, s.gate.data());
    cpu::matmul(pool, L.ffn_up, s.xn.data(), n, s.up.data());
    cpu::swiglu(s.gate.data(), s.up.data(), s.gate.data(), n, hp.n_ff);
    cpu::matmul(pool, L.ffn_down, s.gate.data(), n, s.proj.data());
    cpu::add(x, s.proj.data(), n * d);
  }

  if (n_out == 0) return;
  // Normalize the rows that need logits into consecutive rows of xn, one matmul for all of them.
  int64_t row = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const LlamaSeqSlice& sl = b.seqs[i];
    if (!sl.logits) continue;
    const int64_t k = sl.all_logits ? sl.n_tokens : 1;
    const float* src = x + (s.seqs[size_t(i)].q0 + sl.n_tokens - k) * d;
    cpu::rms_norm(src, static_cast<float*>(w.output_norm.data), s.xn.data() + row * d, k, d,
                  hp.rms_eps);
    row += k;
  }
  if (n_seqs == 1) {  // straight into the caller's buffer
    cpu::matmul(pool, w.output, s.xn.data(), n_out, b.seqs[0].logits);
    return;
  }
  s.logits.resize(size_t(n_out * n_vocab));
  cpu::matmul(pool, w.output, s.xn.data(), n_out, s.logits.data());
  row = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const LlamaSeqSlice& sl = b.seqs[i];
    if (!sl.logits) continue;
    const int64_t k = sl.all_logits ? sl.n_tokens : 1;
    std::copy_n(s.logits.data() + row * n_vocab, k * n_vocab, sl.logits);
    row += k;
  }
}

}  // namespace kvrun

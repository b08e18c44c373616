// bert.cpp — bert and nomic-bert (see bert.h): their GGUF keys (llama.cpp's
// src/llama-hparams.cpp: {arch}.attention.layer_norm_epsilon, {arch}.attention.causal,
// tokenizer.ggml.token_type_count, {arch}.pooling_type), weights and forward pass.
#include "models/bert.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/arch.h"
#include "models/rope_scaling.h"

namespace kvrun {

ArchSpec bert_arch(const gguf::File& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  const auto eps = f.get_float(a + "attention.layer_norm_epsilon");
  if (!eps) throw ModelError(a + "attention.layer_norm_epsilon is missing");
  if (!(*eps > 0) || *eps > 1)
    throw ModelError(a + "attention.layer_norm_epsilon = " + std::to_string(*eps) +
                     " is out of range");
  hp.norm_eps = float(*eps);
  if (f.get_bool(a + "attention.causal").value_or(false))
    throw ModelError(a + "attention.causal is true: kvrun runs " + hp.arch +
                     " models with bidirectional attention only");
  const gguf::TensorInfo* types = f.find_tensor("token_types.weight");
  hp.n_vocab_type = f.get_int("tokenizer.ggml.token_type_count")
                        .value_or(types && types->n_dims == 2 ? types->ne[1] : 1);
  if (hp.n_vocab_type < 1 || hp.n_vocab_type > 1024)
    throw ModelError("tokenizer.ggml.token_type_count = " + std::to_string(hp.n_vocab_type) +
                     " is out of range");
  if (hp.n_ff <= 0) throw ModelError(a + "feed_forward_length is missing");
  if (hp.arch == "bert" && hp.n_ctx_train <= 0)
    throw ModelError(a + "context_length is missing (the position embedding rows)");
  ArchSpec s;
  s.encoder = true;
  s.rope_neox = true;  // nomic-bert's RoPE (llama.cpp: rope type NEOX for both)
  s.output_optional = true;
  return s;
}

LlamaWeights load_encoder_weights(const gguf::File& f, const Hparams& hp, const ArchSpec& spec) {
  const bool bert = hp.arch == "bert";
  const int64_t d = hp.n_embd, nq = hp.n_head * hp.head_dim, nk = hp.n_head_kv * hp.head_dim;
  const int64_t nv = hp.n_head_kv * hp.head_dim_v, no = hp.n_head * hp.head_dim_v, ff = hp.n_ff;
  LlamaWeights w;
  w.spec = spec;
  w.tok_embd = load_tensor(f, "token_embd.weight", d, hp.n_vocab);
  w.type_embd = load_tensor(f, "token_types.weight", d, hp.n_vocab_type);
  if (bert) w.pos_embd = load_tensor(f, "position_embd.weight", d, hp.n_ctx_train);
  w.tok_norm = load_tensor(f, "token_embd_norm.weight", d, 0);
  w.tok_norm_b = load_tensor(f, "token_embd_norm.bias", d, 0);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LlamaLayer L;
    if (bert) {
      L.wq = load_matrix(f, p + "attn_q.weight", d, nq);
      L.wk = load_matrix(f, p + "attn_k.weight", d, nk);
      L.wv = load_matrix(f, p + "attn_v.weight", d, nv);
      L.bq = load_tensor(f, p + "attn_q.bias", nq, 0);
      L.bk = load_tensor(f, p + "attn_k.bias", nk, 0);
      L.bv = load_tensor(f, p + "attn_v.bias", nv, 0);
      L.bo = load_tensor(f, p + "attn_output.bias", d, 0);
      L.ffn_up_b = load_tensor(f, p + "ffn_up.bias", ff, 0);
      L.ffn_down_b = load_tensor(f, p + "ffn_down.bias", d, 0);
    } else {
      L.wqkv = load_matrix(f, p + "attn_qkv.weight", d, nq + nk + nv);
      L.ffn_gate = load_matrix(f, p + "ffn_gate.weight", d, ff);
    }
    L.wo = load_matrix(f, p + "attn_output.weight", no, d);
    L.attn_out_norm = load_tensor(f, p + "attn_output_norm.weight", d, 0);
    L.attn_out_norm_b = load_tensor(f, p + "attn_output_norm.bias", d, 0);
    L.ffn_up = load_matrix(f, p + "ffn_up.weight", d, ff);
    L.ffn_down = load_matrix(f, p + "ffn_down.weight", ff, d);
    L.layer_out_norm = load_tensor(f, p + "layer_output_norm.weight", d, 0);
    L.layer_out_norm_b = load_tensor(f, p + "layer_output_norm.bias", d, 0);
    w.layers.push_back(L);
  }
  return w;
}

namespace {

void add_bias(Backend& be, float* y, const Tensor& bias, int64_t rows, int64_t cols) {
  if (bias.data) be.add_row(y, bias, rows, cols);
}

/// x ← one encoder layer of x over n rows, on backend `be` (see bert.h for the block).
void encoder_layer(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be,
                   LlamaScratch& s, int64_t n) {
  const LlamaLayer& L = w.layers[size_t(il)];
  const int64_t d = hp.n_embd, ff = hp.n_ff, nq = hp.n_head * hp.head_dim;
  const int64_t nk = hp.n_head_kv * hp.head_dim, nv = hp.n_head_kv * hp.head_dim_v;
  if (L.wqkv.data) {  // nomic-bert: fused Q, K, V columns
    float* fused = s.grow(LlamaScratch::kFused, n * (nq + nk + nv));
    be.matmul(L.wqkv, s.x, n, fused);
    be.copy_cols(fused, n, nq + nk + nv, 0, nq, s.q);
    be.copy_cols(fused, n, nq + nk + nv, nq, nk, s.k);
    be.copy_cols(fused, n, nq + nk + nv, nq + nk, nv, s.v);
  } else {
    const MatmulOut outs[3] = {{&L.wq, s.q}, {&L.wk, s.k}, {&L.wv, s.v}};
    be.matmul_many(outs, 3, s.x, n);
    add_bias(be, s.q, L.bq, n, nq);
    add_bias(be, s.k, L.bk, n, nk);
    add_bias(be, s.v, L.bv, n, nv);
  }
  if (!w.pos_embd.data) {  // no absolute positions: RoPE (nomic-bert)
    const RopeConfig rc{hp.rope.n_rot, hp.rope.freq_base, rope_freq_scale(hp.rope), nullptr,
                        1.0f,          w.spec.rope_neox};
    be.rope(s.q, n, hp.n_head, hp.head_dim, rc);
    be.rope(s.k, n, hp.n_head_kv, hp.head_dim, rc);
  }
  const AttnParams ap{hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
                      1.0f / std::sqrt(float(hp.head_dim))};
  be.attention(ap, s.q, s.k, s.v, s.att);
  be.matmul(L.wo, s.att, n, s.proj);
  add_bias(be, s.proj, L.bo, n, d);
  be.add(s.proj, s.x, n * d);  // the layer's input added back
  be.layer_norm(s.proj, &L.attn_out_norm, &L.attn_out_norm_b, s.xn, n, d, hp.norm_eps);
  if (L.ffn_gate.data) {  // nomic-bert: SwiGLU
    const MatmulOut outs[2] = {{&L.ffn_gate, s.gate}, {&L.ffn_up, s.up}};
    be.matmul_many(outs, 2, s.xn, n);
    be.glu(GluKind::kSwiGlu, s.gate, s.up, s.gate, n, ff);
  } else {  // bert: GELU
    be.matmul(L.ffn_up, s.xn, n, s.gate);
    add_bias(be, s.gate, L.ffn_up_b, n, ff);
    be.gelu(s.gate, s.gate, n * ff);
  }
  be.matmul(L.ffn_down, s.gate, n, s.proj);
  add_bias(be, s.proj, L.ffn_down_b, n, d);
  be.add(s.proj, s.xn, n * d);  // the FFN's input added back
  be.layer_norm(s.proj, &L.layer_out_norm, &L.layer_out_norm_b, s.x, n, d, hp.norm_eps);
}

/// x ← LayerNorm(token rows + token-type row 0 + position rows) of the batch, on `be` (the
/// input device, host memory: ids and positions are host arrays).
void encoder_input(const Hparams& hp, const LlamaWeights& w, Backend& be, LlamaScratch& s,
                   const LlamaBatch& b, int64_t n) {
  const int64_t d = hp.n_embd;
  be.get_rows(w.tok_embd, b.tokens, n, s.x);
  const std::vector<int32_t> type0(size_t(n), 0);  // every token is of type 0 ("sentence A")
  be.get_rows(w.type_embd, type0.data(), n, s.proj);
  be.add(s.x, s.proj, n * d);
  if (w.pos_embd.data) {
    be.get_rows(w.pos_embd, b.pt->pos, n, s.proj);  // std::out_of_range past n_ctx_train
    be.add(s.x, s.proj, n * d);
  }
  be.layer_norm(s.x, &w.tok_norm, &w.tok_norm_b, s.x, n, d, hp.norm_eps);
}

}  // namespace

void encoder_forward(const Hparams& hp, const LlamaWeights& w, const Placement& p, LlamaExec& exec,
                     const LlamaBatch& b) {
  const PageTable& pt = *b.pt;
  const int64_t n = pt.n_tokens, d = hp.n_embd;
  if (!b.embd && b.n_out > 0)
    throw std::invalid_argument(hp.arch + " is an encoder: it outputs embeddings, not logits");
  for (int64_t i = 0; i < pt.n_seqs; ++i)
    if (pt.seq_indptr[i + 1] > pt.seq_indptr[i] && pt.pos[pt.seq_indptr[i]] != 0)
      throw std::invalid_argument(hp.arch +
                                  ": an encoder sees a whole input in one step (bidirectional "
                                  "attention); sequence rows must start at position 0");
  exec.begin_step(pt);
  const Device* cur = p.input;
  Backend* be = &exec.backend(cur);
  LlamaScratch* s = &exec.scratch(cur);
  encoder_input(hp, w, *be, *s, b, n);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Device* dev = p.layers[size_t(il)];
    if (dev != cur) {  // the residual stream moves once where the placement changes
      Backend& next = exec.backend(dev);
      LlamaScratch& ns = exec.scratch(dev);
      next.copy_from(*be, s->x, ns.x, size_t(n * d) * sizeof(float));
      cur = dev, be = &next, s = &ns;
    }
    encoder_layer(hp, w, il, *be, *s, n);
  }
  for (int64_t i = 0; i < b.n_out; ++i)
    be->download(b.embd + i * d, s->x + int64_t(b.out_rows[i]) * d, size_t(d) * sizeof(float));
  be->synchronize();
}

}  // namespace kvrun

// llama.h — the llama architecture: tensor names, weights and the forward pass.
//
// Tensor names are llama.cpp's GGUF names (token_embd, output_norm, output,
// blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down},
// optional rope_freqs). Shapes are written GGUF-style as {ne0, ne1}: ne0 is the row length
// (the input dimension of a matmul), ne1 the number of rows (its output dimension).
//
// The forward pass (Touvron et al. 2023, "LLaMA"): token embedding; per layer
//   x += Wo · Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)   with n = RMSNorm(x)·attn_norm
//   x += Wdown · (silu(Wgate·n) ⊙ Wup·n)          with n = RMSNorm(x)·ffn_norm
// then logits = Woutput · RMSNorm(x)·output_norm. Weights stay in their stored types.
//
// Every architecture kvrun runs is this block with options (models/arch.h: an ArchSpec per
// architecture, one small file each): Q/K/V biases when present (qwen2), a fused attn_qkv and a
// fused gate/up ffn_up when present (phi3), per-head Q/K RMSNorm (qwen3, gemma3), post-norms,
// embedding scaling, GeGLU and soft-capping (gemma), NeoX RoPE, per-layer RoPE bases and sliding
// windows (gemma, phi3, mistral).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "gguf.h"
#include "models/arch.h"
#include "models/hparams.h"
#include "tensor.h"

namespace kvrun {

/// One transformer block. A Tensor with data == nullptr is absent.
struct LlamaLayer {
  Tensor attn_norm;  ///< {n_embd} f32
  Tensor wqkv;       ///< {n_embd, nq + nk + nv} fused Q, K, V rows (phi3); then wq/wk/wv are absent
  Tensor wq;         ///< {n_embd, n_head · head_dim}
  Tensor wk;         ///< {n_embd, n_head_kv · head_dim}
  Tensor wv;         ///< {n_embd, n_head_kv · head_dim_v}
  Tensor bq;         ///< {n_head · head_dim} f32, optional (qwen2)
  Tensor bk;         ///< {n_head_kv · head_dim} f32, optional
  Tensor bv;         ///< {n_head_kv · head_dim_v} f32, optional
  Tensor q_norm;     ///< {head_dim} f32, optional: RMSNorm weight of every Q head (qwen3, gemma3)
  Tensor k_norm;     ///< {head_dim} f32, optional: the same for K
  Tensor wo;         ///< {n_head · head_dim_v, n_embd}
  Tensor attn_post_norm;  ///< {n_embd} f32, optional (gemma): RMSNorm of the attention output
  Tensor ffn_norm;        ///< {n_embd} f32
  Tensor ffn_gate;        ///< {n_embd, n_ff}; absent when ffn_up is fused
  Tensor ffn_up;          ///< {n_embd, n_ff}, or {n_embd, 2·n_ff} fused: gate rows, then up rows
  Tensor ffn_down;        ///< {n_ff, n_embd}
  Tensor ffn_post_norm;   ///< {n_embd} f32, optional (gemma): RMSNorm of the FFN output
};

/// All weights of a llama-family model: views into the mapped GGUF file (zero-copy).
struct LlamaWeights {
  Tensor tok_embd;     ///< {n_embd, n_vocab}, any type (rows decoded on lookup)
  Tensor output_norm;  ///< {n_embd} f32
  Tensor output;       ///< {n_embd, n_vocab}; the same view as tok_embd when tied
  Tensor rope_freqs;   ///< {n_rot / 2} f32 per-pair frequency divisors (llama3 scaling), optional
  Tensor rope_short;   ///< {n_rot / 2} f32 LongRoPE divisors up to n_ctx_orig (phi3), optional
  Tensor rope_long;    ///< {n_rot / 2} f32 LongRoPE divisors past n_ctx_orig (phi3), optional
  std::vector<LlamaLayer> layers;  ///< [n_layer]
  ArchSpec spec;                   ///< how the architecture runs the block
  /// The packed copies (cpu/pack.h) the matrices' Tensor::packed point into.
  std::vector<Buffer> packed;
};

/// Finds and checks every tensor of `hp`'s model (architecture `spec`) in `file`. Throws ModelError
/// naming a missing tensor, a tensor of the wrong shape, a norm/bias that is not f32, or a weight
/// type the CPU matmul cannot use.
LlamaWeights load_llama_weights(const gguf::File& file, const Hparams& hp, const ArchSpec& spec);

/// Packs every matrix of `w` that the CPU kernels of this process have a packed layout for
/// (cpu/pack.h: q4_0 and q8_0 with a multiple of 16 rows at the avx2/avx512 levels) and points its
/// Tensor::packed at the copy kept in w.packed. With `release_mapped` (only for weights in a
/// read-only file mapping: on other memory MADV_DONTNEED would zero it) the mapped pages of a
/// packed matrix are then given back to the kernel (madvise MADV_DONTNEED; the file's pages stay
/// in the page cache and a later read of `data`, e.g. a tied token embedding's lookup, faults
/// them in again), so the resident size does not double. Results are bit-identical with and
/// without packing. Returns the bytes packed.
size_t pack_llama_weights(LlamaWeights& w, bool release_mapped);

/// Activation buffers for up to `n_batch` tokens, reused across calls.
struct LlamaScratch {
  LlamaScratch(const Hparams& hp, int64_t n_batch);
  int64_t n_batch;
  std::vector<float> x;             ///< [n_batch, n_embd] residual stream
  std::vector<float> xn;            ///< [n_batch, n_embd] normalized input of a sub-block
  std::vector<float> q;             ///< [n_batch, n_head · head_dim]
  std::vector<float> k;             ///< [n_batch, n_head_kv · head_dim]
  std::vector<float> v;             ///< [n_batch, n_head_kv · head_dim_v]
  std::vector<float> att;           ///< [n_batch, n_head · head_dim_v]
  std::vector<float> proj;          ///< [n_batch, n_embd] output of attn_output / ffn_down
  std::vector<float> gate;          ///< [n_batch, n_ff]
  std::vector<float> up;            ///< [n_batch, n_ff]
  std::vector<float> fused;         ///< [n_batch, nq + nk + nv] or [n_batch, 2·n_ff] (phi3)
  std::vector<int32_t> pos;         ///< [n_batch]
  std::vector<cpu::PagedSeq> seqs;  ///< [n_seqs] the attention's view of the batch
  std::vector<float> logits;        ///< [n_out, n_vocab] when several slices ask for logits
};

/// One sequence's part of a batch: `n_tokens` consecutive rows of LlamaBatch::tokens (CSR
/// style, as cpu::PagedSeq), at positions pos0 … pos0+n_tokens−1 of that sequence.
struct LlamaSeqSlice {
  const int32_t* block_table = nullptr;  ///< the sequence's blocks, reserved past pos0+n_tokens
  int64_t pos0 = 0;                      ///< position of its first token; KV rows < pos0 filled
  int64_t n_tokens = 0;                  ///< ≥ 1
  float* logits = nullptr;  ///< [n_out, n_vocab] (n_out = n_tokens or 1), or null for none
  bool all_logits = false;  ///< logits of every token of the slice instead of only the last
};

/// One forward call over a batch of tokens of one or more sequences.
struct LlamaBatch {
  const int32_t* tokens = nullptr;        ///< [Σ seqs[i].n_tokens] ids in [0, n_vocab), by slice
  const LlamaSeqSlice* seqs = nullptr;    ///< [n_seqs] slices in row order
  int64_t n_seqs = 0;                     ///< ≥ 1; Σ n_tokens ≤ scratch.n_batch
  const cpu::PagedKvLayer* kv = nullptr;  ///< [n_layer] paged KV storage of each layer
  bool flash = false;                     ///< online softmax (see cpu::PagedAttnParams)
  bool rotate = false;                    ///< K stored Hadamard-rotated (--kv-rotate)
  int64_t n_ctx = 0;  ///< context per sequence; above rope.n_ctx_orig phi3 uses rope_long
};

/// Runs the batch through the model: writes K/V rows pos0 … pos0+n_tokens−1 of every slice's
/// sequence in every layer and each slice's requested logits. The caller has reserved the blocks
/// of positions < pos0 + n_tokens of each slice. A batch of one slice computes exactly what a
/// single-sequence call did; with several slices the exact attention may sum in another order.
void llama_forward(const Hparams& hp, const LlamaWeights& w, cpu::ThreadPool& pool, LlamaScratch& s,
                   const LlamaBatch& b);

}  // namespace kvrun

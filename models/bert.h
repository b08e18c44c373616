// bert.h — encoder (embedding) models: bert and nomic-bert weights and their forward pass.
//
// Tensor names are llama.cpp's (src/llama-arch.cpp, LLM_ARCH_BERT / LLM_ARCH_NOMIC_BERT):
// token_embd, token_types, position_embd (bert), token_embd_norm{.weight,.bias}, and per layer
// blk.N.{attn_q,attn_k,attn_v}{.weight,.bias} (bert) or blk.N.attn_qkv.weight (nomic-bert),
// attn_output{.weight,.bias}, attn_output_norm{.weight,.bias}, ffn_up{.weight,.bias},
// ffn_gate.weight (nomic-bert), ffn_down{.weight,.bias}, layer_output_norm{.weight,.bias}.
// Biases are bert's; nomic-bert has none.
//
// The forward pass (Devlin et al. 2019, "BERT", §3; post-LayerNorm blocks of Vaswani et al.
// 2017), as llama.cpp's bert graph computes it:
//   x = LayerNorm(tok_embd[t] + token_types[0] + position_embd[pos])  (every token has type 0;
//       nomic-bert has no position rows: its Q and K get NeoX RoPE instead)
//   per layer:
//     a = Wo · Attn(Wq·x + bq, Wk·x + bk, Wv·x + bv) + bo   (bidirectional within a sequence)
//     h = LayerNorm(a + x) · attn_output_norm
//     f = Wdown · gelu(Wup·h + bup) + bdown                 (nomic-bert: silu(Wgate·h) ⊙ Wup·h)
//     x = LayerNorm(f + h) · layer_output_norm
// The output rows are x itself (no output norm or head): the token embeddings that
// engine/embed.h pools (the GGUF's {arch}.pooling_type) and normalizes.
#pragma once

#include "models/llama.h"

namespace kvrun {

/// Finds and checks every tensor of the encoder `hp` describes (bert or nomic-bert, told apart
/// by hp.arch) in `file`: host views into the mapping, in the LlamaWeights fields the encoder
/// uses (tok_embd, type_embd, pos_embd, tok_norm{,_b}; per layer wq/wk/wv + biases or wqkv, wo,
/// bo, attn_out_norm{,_b}, ffn_up{,_b}, ffn_gate, ffn_down{,_b}, layer_out_norm{,_b}). Throws
/// ModelError naming a missing or mis-shaped tensor.
LlamaWeights load_encoder_weights(const gguf::File& file, const Hparams& hp, const ArchSpec& spec);

/// The encoder's forward over a step's rows (called by llama_forward for ArchSpec::encoder):
/// writes the final hidden rows of b.out_rows into b.embd. Attention is bidirectional within
/// each sequence of the step and reads no KV cache, so every sequence must be whole in the step
/// (its first row at position 0). Throws std::invalid_argument when b.embd is null (an encoder
/// has no logits) or a sequence does not start at position 0. pt.n_tokens ≤ exec.n_batch().
void encoder_forward(const Hparams& hp, const LlamaWeights& w, const Placement& p, LlamaExec& exec,
                     const LlamaBatch& b);

}  // namespace kvrun

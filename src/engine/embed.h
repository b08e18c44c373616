// embed.h — embeddings: one vector per input text from the model's output-normed hidden states
// (what the output head would multiply), pooled over the tokens and normalized, as llama.cpp's
// llama-embedding and llama-server's /embedding compute them.
//
// Pooling (GGUF key {arch}.pooling_type, llama.cpp's enum llama_pooling_type: 0 none, 1 mean,
// 2 cls, 3 last): mean = average of every token's row; cls = the first token's row; last = the
// last token's row (decoder embedding models such as Qwen3-Embedding); none = every row.
// Normalization (llama.cpp's --embd-normalize): -1 none, 0 max-abs scaled to 32760, 1 taxicab,
// 2 Euclidean (the default), p > 2 the p-norm.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/model.h"

namespace kvrun {

/// How token rows become one embedding (see the file comment).
enum class Pooling { kNone, kMean, kCls, kLast };

/// "none", "mean", "cls", "last" → Pooling; nullopt for anything else.
std::optional<Pooling> parse_pooling(std::string_view name);
/// The name parse_pooling reads.
const char* pooling_name(Pooling p);
/// The model's {arch}.pooling_type when the file has one kvrun knows (0–3), else `fallback`.
Pooling model_pooling(const Model& model, Pooling fallback = Pooling::kMean);

/// Normalizes `v` in place by llama.cpp's embd_normalize rule `norm` (see the file comment); a
/// zero vector stays zero.
void normalize_embedding(std::span<float> v, int norm);

/// Embeds `tokens` (≥ 1, ≤ ctx.n_ctx()) with a context built with ContextParams::embeddings:
/// resets it, evaluates every token (prefill chunks of its n_batch), pools and normalizes.
/// Returns [n_embd] (pooled) or [n_tokens × n_embd] (kNone, each row normalized). Throws
/// ContextError (empty input, overflow, a context not in embeddings mode).
std::vector<float> embed_tokens(Context& ctx, std::span<const int32_t> tokens, Pooling pooling,
                                int norm = 2);

/// Embeds several inputs as embed_tokens does each, in order. For an encoder model, consecutive
/// inputs that fit n_batch together run in one step (Context::eval_each; halved when the pool
/// cannot hold them at once); a decoder's run one after another. Throws ContextError as
/// embed_tokens (an empty input, one longer than the context).
std::vector<std::vector<float>> embed_inputs(Context& ctx,
                                             std::span<const std::vector<int32_t>> inputs,
                                             Pooling pooling, int norm = 2);

}  // namespace kvrun

// embed.cpp — see embed.h.
#include "engine/embed.h"

#include <algorithm>
#include <cmath>

namespace kvrun {

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "none") return Pooling::kNone;
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "last") return Pooling::kLast;
  return std::nullopt;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone:
      return "none";
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
  }
  return "?";
}

Pooling model_pooling(const Model& model, Pooling fallback) {
  const auto v = model.file().get_int(model.hparams().arch + ".pooling_type");
  if (!v || *v < 0 || *v > 3) return fallback;
  static const Pooling kByValue[] = {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast};
  return kByValue[*v];
}

void normalize_embedding(std::span<float> v, int norm) {
  double sum = 0.0;
  if (norm < 0) return;
  if (norm == 0) {  // max-abs, scaled to the int16 range as llama.cpp does
    for (float x : v) sum = std::max(sum, double(std::fabs(x)));
    sum /= 32760.0;
  } else if (norm == 2) {
    for (float x : v) sum += double(x) * x;
    sum = std::sqrt(sum);
  } else {
    for (float x : v) sum += std::pow(std::fabs(double(x)), norm);
    sum = std::pow(sum, 1.0 / norm);
  }
  const float scale = sum > 0.0 ? float(1.0 / sum) : 0.0f;
  for (float& x : v) x *= scale;
}

namespace {

/// Pools `n` rows of width d and normalizes (see embed_tokens).
std::vector<float> pool_rows(std::span<const float> rows, size_t n, size_t d, Pooling pooling,
                             int norm) {
  std::vector<float> out;
  switch (pooling) {
    case Pooling::kNone:
      out.assign(rows.begin(), rows.end());
      for (size_t i = 0; i < n; ++i) normalize_embedding(std::span(out).subspan(i * d, d), norm);
      return out;
    case Pooling::kMean: {
      std::vector<double> acc(d, 0.0);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < d; ++j) acc[j] += rows[i * d + j];
      out.resize(d);
      for (size_t j = 0; j < d; ++j) out[j] = float(acc[j] / double(n));
      break;
    }
    case Pooling::kCls:
      out.assign(rows.begin(), rows.begin() + long(d));
      break;
    case Pooling::kLast:
      out.assign(rows.end() - long(d), rows.end());
      break;
  }
  normalize_embedding(out, norm);
  return out;
}

/// Embeds `inputs` of an encoder in one step (appended to `out`); a group the pool cannot hold
/// at once is split in halves.
void embed_group(Context& ctx, std::span<const std::vector<int32_t>> inputs, Pooling pooling,
                 int norm, std::vector<std::vector<float>>& out) {
  std::vector<std::span<const float>> rows;
  try {
    ctx.reset();
    rows = ctx.eval_each(inputs);
  } catch (const KvCacheFull&) {
    if (inputs.size() == 1) throw;
    const size_t half = inputs.size() / 2;
    embed_group(ctx, inputs.first(half), pooling, norm, out);
    embed_group(ctx, inputs.subspan(half), pooling, norm, out);
    return;
  }
  const size_t d = size_t(ctx.model().hparams().n_embd);
  for (size_t i = 0; i < inputs.size(); ++i)
    out.push_back(pool_rows(rows[i], inputs[i].size(), d, pooling, norm));
}

}  // namespace

std::vector<float> embed_tokens(Context& ctx, std::span<const int32_t> tokens, Pooling pooling,
                                int norm) {
  if (tokens.empty()) throw ContextError("embed: no tokens");
  ctx.reset();
  const std::span<const float> rows = ctx.eval(tokens, /*all_logits=*/true);
  const size_t n = tokens.size(), d = rows.size() / n;
  if (rows.size() != n * size_t(ctx.model().hparams().n_embd))
    throw ContextError("embed: the context does not output embeddings (ContextParams)");
  return pool_rows(rows, n, d, pooling, norm);
}

std::vector<std::vector<float>> embed_inputs(Context& ctx,
                                             std::span<const std::vector<int32_t>> inputs,
                                             Pooling pooling, int norm) {
  std::vector<std::vector<float>> out;
  if (!ctx.model().encoder()) {
    for (const auto& in : inputs) out.push_back(embed_tokens(ctx, in, pooling, norm));
    return out;
  }
  for (size_t i = 0; i < inputs.size();) {  // consecutive inputs while they fit n_batch
    if (inputs[i].empty()) throw ContextError("embed: no tokens");
    size_t j = i;
    int64_t total = 0;
    while (j < inputs.size() && total + int64_t(inputs[j].size()) <= ctx.n_batch())
      total += int64_t(inputs[j++].size());
    if (j == i) throw ContextError("embed: an input is longer than the context");
    embed_group(ctx, inputs.subspan(i, j - i), pooling, norm, out);
    i = j;
  }
  return out;
}

}  // namespace kvrun

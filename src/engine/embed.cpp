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

std::vector<float> embed_tokens(Context& ctx, std::span<const int32_t> tokens, Pooling pooling,
                                int norm) {
  if (tokens.empty()) throw ContextError("embed: no tokens");
  ctx.reset();
  const std::span<const float> rows = ctx.eval(tokens, /*all_logits=*/true);
  const size_t n = tokens.size(), d = rows.size() / n;
  if (rows.size() != n * size_t(ctx.model().hparams().n_embd))
    throw ContextError("embed: the context does not output embeddings (ContextParams)");
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

}  // namespace kvrun

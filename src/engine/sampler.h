// sampler.h — the sampler chain: next-token choice from one row of logits.
//
// The chain follows llama.cpp's default (common/common.h `common_params_sampling::samplers` and
// common/sampling.cpp `common_sampler_init`, as of Feb 2025), which is
//   logit-bias → penalties → DRY → top-k → typical-p → top-p → min-p → XTC → temperature → dist.
// kvrun implements the stages with an effect at llama.cpp's defaults (logit-bias, DRY, typical-p
// and XTC are off there) and skips the others:
//   penalties → top-k → top-p → min-p → temperature → seeded draw.
// Note that top-p and min-p see the distribution *before* temperature, as in llama.cpp.
// At temp ≤ 0 the result is the argmax of the penalised logits (llama.cpp's temperature stage
// keeps only the max logit then); truncation never removes the max, so that is the same token.
//
// A request may give its own chain (SamplerParams::chain, llama-server's `samplers`): the stages
// it names run in its order, then the draw; stages it leaves out do not run (as in llama.cpp's
// common_sampler_init, which builds the chain from that list). That chain may hold the `infill`
// stage (infill_filter below), which llama.vim asks for.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kvrun {

/// The seed value meaning "pick a random seed" (llama.cpp's LLAMA_DEFAULT_SEED convention).
inline constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

/// A stage of a sampler chain (llama.cpp's common_sampler_type of the same name).
enum class SamplerStage : uint8_t {
  kPenalties,    ///< repetition / presence / frequency penalties (apply_penalties)
  kTopK,         ///< top_k_filter
  kTopP,         ///< top_p_filter
  kMinP,         ///< min_p_filter
  kTemperature,  ///< temperature_scale; at temp ≤ 0 it keeps only the most likely token
  kInfill,       ///< infill_filter (needs Sampler::set_infill_vocab)
};

/// Sampling settings; defaults are llama.cpp's (common_params_sampling, Feb 2025).
struct SamplerParams {
  /// Temperature: logits are divided by it before the draw. ≤ 0 means greedy (argmax).
  float temp = 0.8f;
  /// Keep the k most likely tokens. ≤ 0 disables (keeps all).
  int32_t top_k = 40;
  /// Nucleus: keep the smallest most-likely-first prefix whose probability mass is ≥ top_p.
  /// ≥ 1 disables.
  float top_p = 0.95f;
  /// Drop tokens with p < min_p · p_max (llama.cpp PR #3841). ≤ 0 disables.
  float min_p = 0.05f;
  /// Penalties look at the last `repeat_last_n` accepted tokens; 0 disables them, < 0 means the
  /// whole history (llama.cpp uses the context size for -1).
  int32_t repeat_last_n = 64;
  /// Repetition penalty (CTRL paper, Keskar et al. 2019, as llama.cpp applies it): a logit of a
  /// token in the window is divided by this when positive and multiplied when ≤ 0. 1 = off.
  float repeat_penalty = 1.0f;
  /// OpenAI presence penalty: subtracted once from the logit of every token in the window.
  float presence_penalty = 0.0f;
  /// OpenAI frequency penalty: subtracted count(token in window) times from its logit.
  float frequency_penalty = 0.0f;
  /// RNG seed; kRandomSeed picks one from std::random_device. Same seed + same logits + same
  /// accepted tokens → the same samples.
  uint32_t seed = kRandomSeed;
  /// The chain's stages in order (llama-server's `samplers`); nullopt: the default chain of the
  /// file comment. With a chain, penalties apply only where it names them, temperature likewise
  /// (absent: logits are not scaled), and the draw follows the last stage; at temp ≤ 0 the draw
  /// is the most likely token left (kvrun's rule: temperature 0 is greedy whatever the chain).
  std::optional<std::vector<SamplerStage>> chain = std::nullopt;
};

/// A token still in the running: its id and its (possibly modified) logit.
struct Candidate {
  int32_t id = 0;      ///< token id, an index into the logits
  float logit = 0.0f;  ///< current logit (natural-log scale, unnormalised)
};

/// Applies the penalties to `logits` (one value per vocab entry) in place, for the tokens in
/// `window` (the recent token ids; ids outside [0, logits.size()) are ignored). For a token that
/// occurs c > 0 times: first the repetition penalty (l > 0 ? l / repeat_penalty
/// : l · repeat_penalty), then l −= c · frequency_penalty + presence_penalty. This is llama.cpp's
/// penalties sampler (src/llama-sampling.cpp) and OpenAI's formula
/// (platform.openai.com/docs/advanced-usage, "frequency and presence penalties").
void apply_penalties(std::span<float> logits, std::span<const int32_t> window,
                     const SamplerParams& params);

/// Sorts `c` most likely first (ties: lower id first) and keeps the first k; k ≤ 0 or
/// k ≥ c.size() keeps all (but still sorts).
void top_k_filter(std::vector<Candidate>& c, int32_t k);

/// Sorts `c` most likely first and keeps the shortest prefix whose softmax mass is ≥ p (at least
/// one token). p ≥ 1 keeps all. (Holtzman et al. 2019, "The Curious Case of Neural Text
/// Degeneration".)
void top_p_filter(std::vector<Candidate>& c, float p);

/// Keeps the tokens whose probability is ≥ min_p · p_max, i.e. logit ≥ max_logit + ln(min_p);
/// order is preserved. min_p ≤ 0 keeps all; the max is always kept.
void min_p_filter(std::vector<Candidate>& c, float min_p);

/// Divides every logit by `temp` (> 0; callers handle temp ≤ 0 as greedy).
void temperature_scale(std::vector<Candidate>& c, float temp);

/// apply_penalties for a candidate list: the same formula on each candidate's logit, counting
/// its id's occurrences in `window`.
void apply_penalties(std::vector<Candidate>& c, std::span<const int32_t> window,
                     const SamplerParams& params);

/// What the infill stage needs of the vocabulary (text/tokenizer.h gives it in TokenStream).
struct InfillVocab {
  std::function<bool(int32_t)> is_eog;        ///< end-of-generation ids
  std::function<std::string(int32_t)> piece;  ///< a token's text; "" for control tokens
  int32_t eot = -1;  ///< the token chosen when no text token is left (end of turn, else EOS)
};

/// llama.cpp's `infill` sampler for fill-in-the-middle, as llama.h documents it
/// (llama_sampler_init_infill: "meant to be used after top_k + top_p sampling"), on the
/// candidates' softmax p:
///  1. when 3 · p(EOG) · n > p(text) (p(EOG) the summed probability of the end-of-generation
///     candidates, n the number of candidates, p(text) that of the others) only the EOG
///     candidates stay. llama.h's comment states the rule without the factor 3; llama.cpp's
///     src/llama-sampling.cpp applies it, and kvrun follows the behaviour;
///  2. otherwise candidates whose pieces are prefixes of one another are combined: taken most
///     likely first, each candidate absorbs every other one left whose piece is a prefix of its
///     own or has its own as a prefix (p added, the other removed). Empty pieces (control
///     tokens, EOG) never combine. llama.h's example: "hel" .5, "hell" .2, "hello" .1,
///     "dummy" .1 → "hel" .8, "dummy" .1;
///  3. text candidates with p < 0.2 are removed (EOG ones stay); when no text candidate is left
///     the result is the single token `eot`; else the ps are renormalized and text candidates
///     under 1 / (n_text + 1) are removed too, and the rest renormalized (thresholds from
///     llama.cpp's src/llama-sampling.cpp).
/// The resulting distribution replaces the logits (logit = ln p), so later stages and the draw
/// see it. Without `eot` (< 0) and no text candidate left, the EOG candidates stay, or the most
/// likely candidate when there is none. O(n · piece length) plus a sort.
void infill_filter(std::vector<Candidate>& c, const InfillVocab& vocab);

/// Index of the first maximum of `logits`. Throws std::invalid_argument when empty.
int32_t argmax(std::span<const float> logits);

/// Restricts which tokens a Sampler may pick (a grammar: text/grammar_vocab.h via TokenStream).
/// Sampler::sample tries the chain's pick first and asks for the full mask only when allows()
/// rejects it, as llama.cpp's common_sampler_sample does (common/sampling.cpp).
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  /// Whether token `id` may be picked now.
  virtual bool allows(int32_t id) = 0;
  /// Sets the logit of every token that may not be picked to −∞ (`logits` has n_vocab values).
  /// Returns false when no token may be picked.
  virtual bool mask(std::span<float> logits) = 0;
};

/// The sampler chain of one session: settings, RNG and accepted-token history.
class Sampler {
 public:
  /// Seeds the RNG from params.seed (or a random seed when it is kRandomSeed).
  explicit Sampler(const SamplerParams& params = {});

  /// Picks the next token from one row of logits (length n_vocab, raw model output; not
  /// modified). Runs the chain in the order given in the file comment. Does not record the
  /// token: call accept(). Throws std::invalid_argument when `logits` is empty.
  /// With a `filter`, a pick it rejects is redrawn from the logits masked by it (the chain runs
  /// again over the allowed tokens, with a new draw); returns −1 when it allows no token.
  int32_t sample(std::span<const float> logits, TokenFilter* filter = nullptr);

  /// Records a token in the penalty history. To match llama.cpp, accept the prompt tokens too.
  void accept(int32_t token);

  /// Clears the history and re-seeds the RNG with seed(), so a run can be replayed.
  void reset();

  /// The vocabulary for the infill stage; sample() throws std::logic_error when the chain has
  /// that stage and none was set.
  void set_infill_vocab(InfillVocab vocab) { infill_ = std::move(vocab); }

  /// The seed in use (the drawn one when params.seed was kRandomSeed).
  uint32_t seed() const { return seed_; }

  /// The settings.
  const SamplerParams& params() const { return params_; }

 private:
  /// The chain after the penalties: argmax or top-k → top-p → min-p → temperature → draw.
  int32_t pick(const std::vector<float>& logits);
  /// A request's own chain (params_.chain) over the logits, penalties included, then the draw.
  int32_t pick_chain(const std::vector<float>& logits);
  /// Draws from softmax of the candidates (at temp ≤ 0: the most likely one).
  int32_t draw(const std::vector<Candidate>& c);

  SamplerParams params_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::deque<int32_t> history_;  // at most repeat_last_n tokens when repeat_last_n ≥ 0
  InfillVocab infill_;
};

}  // namespace kvrun

// bench_grammar.cpp — the cost of grammar-constrained sampling per token on real vocabularies
// (the fixtures' gpt-2: 50257 tokens, deepseek-llm: 102400) for a nested JSON Schema.
//
// A JSON document valid for the schema is tokenized with each vocabulary; the benchmarks walk
// its tokens (teacher forcing) and time, per token position:
//   GrammarMaskCold     the full mask of a fresh grammar state (empty DFA and mask cache: the
//                       first request's worst case),
//   GrammarMaskWarm     the full mask with the DFA built but the mask cache bypassed (a state
//                       not seen before in a running generation),
//   GrammarMaskCached   what a generation pays per token when the mask is needed: mask() with
//                       its per-state cache, plus accept(),
//   SampleUnconstrained / SampleConstrained   Sampler::sample over random logits of n_vocab
//                       without and with the grammar filter (with random logits the pick is
//                       nearly always rejected, so the constrained run pays the mask every time).
// Counters: median_us, p90_us, max_us over all positions (the per-token distribution).
// Needs KVRUN_FIXTURES (or the build's fixture dir); skipped with a message without the vocab.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "engine/sampler.h"
#include "gguf.h"
#include "text/grammar.h"
#include "text/grammar_vocab.h"
#include "text/tokenizer.h"
#include "tools/grammar/json_schema.h"

namespace kvrun::bench {
namespace {

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "maxLength": 64},
    "created": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "owner": {"type": "object", "properties": {
      "name": {"type": "string"}, "email": {"type": "string"},
      "roles": {"type": "array", "items": {"enum": ["admin", "editor", "viewer"]}}},
      "required": ["name", "roles"]},
    "items": {"type": "array", "items": {"type": "object", "properties": {
      "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
      "qty": {"type": "integer"}, "price": {"type": "number"},
      "options": {"type": "array", "items": {"type": "object", "properties": {
        "key": {"type": "string"}, "value": {"anyOf": [{"type": "string"}, {"type": "number"},
        {"type": "boolean"}, {"type": "null"}]}}, "required": ["key", "value"]}}},
      "required": ["sku", "qty", "price"]}},
    "notes": {"type": ["string", "null"]}
  },
  "required": ["id", "name", "created", "items"]
})";

const char* kDocument =
    R"({"id": "3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c", "name": "Quarterly order for the Lisbon office",
  "created": "2024-11-05T14:32:07.125Z", "tags": ["office", "supplies", "urgent"],
  "owner": {"name": "María José Fernández", "email": "mj.fernandez@example.com", "roles": ["admin", "viewer"]},
  "items": [{"sku": "PAP-0042", "qty": 12, "price": 4.75, "options": [{"key": "colour", "value": "white"},
  {"key": "recycled", "value": true}]}, {"sku": "PEN-1180", "qty": 200, "price": 0.35,
  "options": [{"key": "ink", "value": "blue"}, {"key": "weight_g", "value": 7.5}, {"key": "note", "value": null}]},
  {"sku": "CHR-0007", "qty": 3, "price": 149.99}],
  "notes": "Deliver before Friday — ask for Zoë at reception 📦"})";

std::filesystem::path fixtures() {
  if (const char* e = std::getenv("KVRUN_FIXTURES")) return e;
  return KVRUN_FIXTURES_DIR;
}

struct Setup {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenTrie> trie;
  std::shared_ptr<const Grammar> grammar;
  std::vector<int32_t> doc;  // the document's tokens
};

/// The vocabulary `name` with the schema's grammar and the document's tokens (cached).
const Setup* setup(const std::string& name, benchmark::State& state) {
  static std::map<std::string, std::unique_ptr<Setup>> cache;
  auto& s = cache[name];
  if (s) return s.get();
  const auto path = fixtures() / "vocab" / ("ggml-vocab-" + name + ".gguf");
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("vocab fixture missing: " + path.string()).c_str());
    return nullptr;
  }
  s = std::make_unique<Setup>();
  const auto file = gguf::File::open_metadata_only(path.string());
  s->tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
  s->trie = TokenTrie::build(*s->tok);
  s->grammar = std::make_shared<const Grammar>(
      parse_grammar(tools::json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema))));
  s->doc = s->tok->tokenize(kDocument, false, false);
  GrammarTokens check(s->grammar, s->trie);
  for (int32_t id : s->doc) check.accept(id);  // throws if the document does not fit
  if (!check.complete()) state.SkipWithError("the document is not a complete sentence");
  return s.get();
}

using Clock = std::chrono::steady_clock;

void report(benchmark::State& state, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  state.counters["median_us"] = us[us.size() / 2];
  state.counters["p90_us"] = us[us.size() * 9 / 10];
  state.counters["max_us"] = us.back();
  state.counters["tokens"] = double(us.size()) / double(state.iterations());
}

double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

void BM_GrammarMaskCold(benchmark::State& state, const std::string& vocab) {
  const Setup* s = setup(vocab, state);
  if (!s) return;
  std::vector<double> us;
  TokenMask bits;
  for (auto _ : state) {
    for (size_t k = 0; k < s->doc.size(); k += 8) {  // every 8th position: a fresh state each
      state.PauseTiming();
      GrammarTokens g(s->grammar, s->trie);
      for (size_t i = 0; i < k; ++i) g.accept(s->doc[i]);
      state.ResumeTiming();
      const auto t0 = Clock::now();
      g.compute_mask(bits);
      us.push_back(since_us(t0));
      benchmark::DoNotOptimize(bits.data());
    }
  }
  report(state, us);
}

void BM_GrammarMaskWarm(benchmark::State& state, const std::string& vocab) {
  const Setup* s = setup(vocab, state);
  if (!s) return;
  std::vector<double> us;
  TokenMask bits;
  for (auto _ : state) {
    GrammarTokens g(s->grammar, s->trie);
    for (int pass = 0; pass < 2; ++pass) {  // the first pass builds the DFA; time the second
      g.reset();
      for (int32_t id : s->doc) {
        const auto t0 = Clock::now();
        g.compute_mask(bits);
        if (pass == 1) us.push_back(since_us(t0));
        g.accept(id);
      }
    }
  }
  report(state, us);
}

void BM_GrammarMaskCached(benchmark::State& state, const std::string& vocab) {
  const Setup* s = setup(vocab, state);
  if (!s) return;
  std::vector<double> us;
  for (auto _ : state) {
    GrammarTokens g(s->grammar, s->trie);
    for (int32_t id : s->doc) {
      const auto t0 = Clock::now();
      benchmark::DoNotOptimize(g.mask().data());
      g.accept(id);
      us.push_back(since_us(t0));
    }
  }
  report(state, us);
}

/// The grammar as the sampler's filter (as TokenStream wires it).
class Filter final : public TokenFilter {
 public:
  explicit Filter(GrammarTokens& g) : g_(g) {}
  bool allows(int32_t id) override { return g_.allows(id); }
  bool mask(std::span<float> logits) override {
    const TokenMask& m = g_.mask();
    for (size_t i = 0; i < logits.size(); ++i)
      if (!((m[i >> 6] >> (i & 63)) & 1)) logits[i] = -INFINITY;
    return true;
  }

 private:
  GrammarTokens& g_;
};

void BM_Sample(benchmark::State& state, const std::string& vocab, bool constrained) {
  const Setup* s = setup(vocab, state);
  if (!s) return;
  const std::vector<float> logits = random_floats(size_t(s->tok->n_vocab()), 1);
  SamplerParams sp;
  sp.temp = 1.0f;
  sp.seed = 1;
  std::vector<double> us;
  for (auto _ : state) {
    Sampler sampler(sp);
    GrammarTokens g(s->grammar, s->trie);
    Filter f(g);
    for (int32_t id : s->doc) {  // sample, then follow the document (teacher forcing)
      const auto t0 = Clock::now();
      benchmark::DoNotOptimize(sampler.sample(logits, constrained ? &f : nullptr));
      if (constrained) g.accept(id);
      sampler.accept(id);
      us.push_back(since_us(t0));
    }
  }
  report(state, us);
}

}  // namespace

BENCHMARK_CAPTURE(BM_GrammarMaskCold, gpt2, "gpt-2")->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_GrammarMaskCold, deepseek, "deepseek-llm")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_GrammarMaskWarm, gpt2, "gpt-2")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_GrammarMaskWarm, deepseek, "deepseek-llm")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_GrammarMaskCached, gpt2, "gpt-2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GrammarMaskCached, deepseek, "deepseek-llm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, gpt2_unconstrained, "gpt-2", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, gpt2_constrained, "gpt-2", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, deepseek_unconstrained, "deepseek-llm", false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, deepseek_constrained, "deepseek-llm", true)
    ->Unit(benchmark::kMillisecond);

}  // namespace kvrun::bench

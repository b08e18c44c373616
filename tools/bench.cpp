// bench.cpp — `kvrun bench`: prompt-processing (pp) and text-generation (tg) speed at context
// depths, with llama-bench's meaning of -p, -n, -d and -r.
//
// For each depth d a context of d + max(p, n) tokens is built and filled with d random tokens
// (BOS first), untimed; with -c one context of that size serves every depth, each reached by
// truncating or extending the previous fill. With --depth-fill synthetic the d positions are not
// prefilled but get random K/V rows encoded in the cache types (Context::fill_synthetic: the same
// blocks and bytes as a prefill, far faster at 131072 tokens); decode and attention speed at the
// depth do not depend on the rows' values, a prefill's output would. Each test then starts from
// that depth: a pp test times the prefill of p random tokens (in -b batches), a tg test times n
// single-token decode steps (random tokens, as llama-bench: speed does not depend on which token is
// fed). Before the timed repetitions one untimed warm-up run is made (llama-bench: a prompt run, or
// one decode step). Between runs the context is truncated back to d, so the depth is filled once.
// Speed is tokens / seconds per repetition; the table shows the mean ± sample standard deviation
// over the -r repetitions, as llama-bench does.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "commands.h"
#include "cpu/cpu_info.h"
#include "cpu/cpu_level.h"
#include "engine/context.h"
#include "engine/model.h"
#include "eval/model_info.h"
#include "kv_layout.h"
#include "membw.h"
#include "text/tokenizer.h"

namespace kvrun::tools {

CLI::App* add_bench_command(CLI::App& app, BenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "prompt (pp) and generation (tg) speed at context depths (llama-bench's meaning)");
  cmd->add_option("-m,--model", o.model, "GGUF model file")->required();
  cmd->add_option("-p,--n-prompt", o.n_prompt, "prompt lengths, comma-separated (0: no pp test)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", o.n_gen, "generation lengths, comma-separated (0: no tg test)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("-d,--n-depth", o.depth,
                  "context depths, comma-separated: tokens in the context before each test")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", o.reps, "timed repetitions per test")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", o.n_batch, "prefill batch")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", o.n_ctx,
                  "fixed context size; a depth that does not fit is an error (default: "
                  "depth + max(p, n) per depth)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  add_kv_cache_options(*cmd, o.kv);
  cmd->add_option("--depth-fill", o.depth_fill,
                  "how each depth is reached (untimed): prefill (evaluate d random tokens) or "
                  "synthetic (write random encoded KV rows; for decode/attention speed only)")
      ->check(CLI::IsMember({"prefill", "synthetic"}))
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "print a JSON array (one object per test) instead of a table");
  cmd->add_flag("--bandwidth", o.bandwidth,
                "measure the memory bandwidth (STREAM triad, -t threads) first and give each tg "
                "test's bytes read per token and its share of that bandwidth");
  return cmd;
}

namespace {

/// One test's measurements.
struct BenchResult {
  std::string test;  ///< "pp512", "tg128", "pp512 @ d4096"
  int64_t n_prompt = 0, n_gen = 0, depth = 0, n_ctx = 0;
  std::vector<int64_t> samples_ns;
  std::vector<double> samples_ts;
  double avg_ns = 0, stddev_ns = 0, avg_ts = 0, stddev_ts = 0;
  int64_t kv_bytes = 0;            ///< KV cache bytes the context holds at the end of the test
  int64_t kv_tokens = 0;           ///< tokens in the context at the end of the test
  int64_t kv_bytes_offloaded = 0;  ///< of kv_bytes, in the slow tier (--kv-offload-dir)
  /// tg tests: weight bytes a decode step reads plus the KV bytes of the mean context
  /// (depth + (n + 1) / 2 positions, every layer, K and V).
  int64_t bytes_read_per_token = 0;
};

/// Mean and sample standard deviation (0 for fewer than two values).
std::pair<double, double> mean_sd(const std::vector<double>& v) {
  if (v.empty()) return {0.0, 0.0};
  double sum = 0.0;
  for (double x : v) sum += x;
  const double mean = sum / double(v.size());
  if (v.size() < 2) return {mean, 0.0};
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / double(v.size() - 1))};
}

/// KV cache bytes `ctx` holds: its blocks (ceil(tokens / block_size) × bytes per block).
int64_t kv_bytes_held(const Context& ctx) { return ctx.sequence().bytes_held(); }

/// Random token ids in [0, n_vocab), reproducible per test.
std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t n_vocab) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(n_vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

/// Times one run: a prefill of `n_prompt` tokens, or `n_gen` single-token steps; returns ns.
int64_t timed_run(Context& ctx, std::mt19937& rng, int64_t n_prompt, int64_t n_gen) {
  const std::vector<int32_t> toks = random_tokens(rng, std::max(n_prompt, n_gen), ctx.n_vocab());
  const auto t0 = std::chrono::steady_clock::now();
  if (n_prompt > 0) {
    ctx.eval(toks);
  } else {
    for (int64_t i = 0; i < n_gen; ++i) ctx.eval(std::span<const int32_t>(&toks[size_t(i)], 1));
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

/// A pp (n_gen = 0) or tg (n_prompt = 0) test from depth `depth`: one warm-up run, then `reps`
/// timed runs, each starting from the depth.
BenchResult run_test(Context& ctx, std::mt19937& rng, int64_t depth, int64_t n_prompt,
                     int64_t n_gen, int reps) {
  BenchResult r;
  r.n_prompt = n_prompt;
  r.n_gen = n_gen;
  r.depth = depth;
  r.n_ctx = ctx.n_ctx();
  r.test = n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  if (depth > 0) r.test += " @ d" + std::to_string(depth);
  ctx.truncate(depth);
  timed_run(ctx, rng, n_prompt, n_gen > 0 ? 1 : 0);  // warm-up
  const int64_t n_tokens = n_prompt > 0 ? n_prompt : n_gen;
  std::vector<double> ns;
  for (int i = 0; i < reps; ++i) {
    ctx.truncate(depth);
    const int64_t t = std::max<int64_t>(1, timed_run(ctx, rng, n_prompt, n_gen));
    r.samples_ns.push_back(t);
    r.samples_ts.push_back(1e9 * double(n_tokens) / double(t));
    ns.push_back(double(t));
  }
  std::tie(r.avg_ns, r.stddev_ns) = mean_sd(ns);
  std::tie(r.avg_ts, r.stddev_ts) = mean_sd(r.samples_ts);
  r.kv_bytes = kv_bytes_held(ctx);
  r.kv_tokens = ctx.n_past();
  if (n_gen > 0)
    r.bytes_read_per_token = decode_weight_bytes(ctx.model().file(), ctx.model().hparams()) +
                             ctx.cache().bytes_per_token() * (depth + (n_gen + 1) / 2);
  r.kv_bytes_offloaded =
      ctx.sequence().bytes_held() - ctx.sequence().n_fast_blocks() * ctx.cache().bytes_per_block();
  return r;
}

/// The context size for depth d, after checking that it fits (-c, and the machine's memory).
int64_t context_for_depth(const BenchOptions& opt, const Model& model, const KvCacheParams& kv,
                          int64_t d, int64_t longest) {
  const int64_t need = d + longest;
  if (opt.n_ctx > 0 && need > opt.n_ctx)
    throw std::invalid_argument("depth " + std::to_string(d) + " + " + std::to_string(longest) +
                                " test tokens = " + std::to_string(need) +
                                " does not fit in the context of -c " + std::to_string(opt.n_ctx));
  const int64_t n_ctx = opt.n_ctx > 0 ? opt.n_ctx : need;
  const Hparams& hp = model.hparams();
  const Hparams::KvRows rows = hp.kv_rows();
  const int64_t per_token = kv_bytes_per_token(kv.type_k, kv.type_v, hp.n_layer, rows.n_head_kv,
                                               rows.head_dim, rows.head_dim_v);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  // (With --kv-offload-dir the part past --kv-mem lives in a file, not in memory.)
  if (kv.offload_dir.empty() && pages > 0 && page > 0 &&
      double(per_token) * double(n_ctx) > double(pages) * double(page))
    throw std::invalid_argument("depth " + std::to_string(d) + " needs a context of " +
                                std::to_string(n_ctx) + " tokens, " +
                                format_bytes(per_token * n_ctx) +
                                " of KV cache: more than this machine's memory (" +
                                format_bytes(int64_t(pages) * page) + ")");
  return n_ctx;
}

void check_options(const BenchOptions& opt) {
  const bool any =
      std::any_of(opt.n_prompt.begin(), opt.n_prompt.end(), [](int64_t p) { return p > 0; }) ||
      std::any_of(opt.n_gen.begin(), opt.n_gen.end(), [](int64_t n) { return n > 0; });
  if (!any) throw std::invalid_argument("nothing to measure: every -p and -n is 0");
  if (opt.depth.empty()) throw std::invalid_argument("-d needs at least one depth");
}

/// Runs every test at every depth; `n_threads` receives the thread count the contexts use.
std::vector<BenchResult> run_bench(const BenchOptions& opt, const Model& model, int32_t bos,
                                   int& n_threads) {
  check_options(opt);
  ContextParams base;
  base.release_window_blocks = false;  // every test truncates back to its depth
  base.n_batch = opt.n_batch;
  base.n_threads = opt.n_threads;
  apply_kv_cache_options(opt.kv, opt.model, base);
  const int64_t longest = std::max(*std::max_element(opt.n_prompt.begin(), opt.n_prompt.end()),
                                   *std::max_element(opt.n_gen.begin(), opt.n_gen.end()));
  for (int64_t d : opt.depth) context_for_depth(opt, model, base.kv, d, longest);
  std::vector<BenchResult> results;
  std::mt19937 rng(1234);
  // With a fixed -c every depth shares one context: the depth is reached by truncating the
  // previous fill or extending it with more random tokens, so -d 16384,65536,131072 prefills
  // 131072 tokens once rather than 212992. Without -c each depth gets a context of its own size.
  std::unique_ptr<Context> shared;
  for (int64_t d : opt.depth) {
    ContextParams cp = base;
    cp.n_ctx = context_for_depth(opt, model, base.kv, d, longest);
    std::unique_ptr<Context> own;
    if (opt.n_ctx > 0 && !shared) shared = std::make_unique<Context>(model, cp);
    if (opt.n_ctx <= 0) own = std::make_unique<Context>(model, cp);
    Context& ctx = own ? *own : *shared;
    n_threads = ctx.n_threads();
    const int64_t have = std::min(ctx.n_past(), d);  // a prefix of an earlier fill
    ctx.truncate(have);
    // Fill the depth once, untimed; every test truncates back to it.
    if (d > have && opt.depth_fill == "synthetic") {
      ctx.fill_synthetic(d - have, rng());
    } else if (d > have) {
      std::vector<int32_t> fill = random_tokens(rng, d - have, ctx.n_vocab());
      if (have == 0 && bos >= 0 && bos < ctx.n_vocab()) fill[0] = bos;
      ctx.eval(fill);
    }
    for (int64_t p : opt.n_prompt)
      if (p > 0) results.push_back(run_test(ctx, rng, d, p, 0, opt.reps));
    for (int64_t n : opt.n_gen)
      if (n > 0) results.push_back(run_test(ctx, rng, d, 0, n, opt.reps));
  }
  return results;
}

/// Model facts the table and JSON show.
struct ModelFacts {
  std::string name;  ///< file name without directory and extension
  int64_t size = 0;  ///< bytes of tensor data
  int64_t n_params = 0;
  /// The devices the model runs on: "CPU avx2", or "CUDA0+CPU avx2" with -ngl (the GPU first).
  std::string backends;
};

ModelFacts model_facts(const BenchOptions& opt, const Model& model) {
  ModelFacts f;
  f.name = std::filesystem::path(opt.model).stem().string();
  for (const Device* d : model.placement().devices())
    if (!d->host_memory()) f.backends += d->name() + "+";
  f.backends += std::string("CPU ") + cpu::cpu_level_name(cpu::cpu_level());
  if (cpu::kernel_order() != cpu::KernelOrder::exact)  // --kernels fast
    f.backends += std::string(" ") + cpu::kernel_order_name(cpu::kernel_order());
  for (const auto& t : model.file().tensors()) {
    f.size += int64_t(t.n_bytes);
    f.n_params += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  }
  return f;
}

void print_json(const BenchOptions& opt, const ModelFacts& mf, int n_threads,
                const std::vector<BenchResult>& results, double bw) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const BenchResult& r : results) {
    nlohmann::ordered_json j;
    j["model_filename"] = opt.model;
    j["model_size"] = mf.size;
    j["model_n_params"] = mf.n_params;
    j["backends"] = mf.backends;
    j["cpu_level"] = cpu::cpu_level_name(cpu::cpu_level());
    j["kernels"] = cpu::kernel_order_name(cpu::kernel_order());
    j["thp"] = huge_pages();
    j["n_batch"] = opt.n_batch;
    j["n_threads"] = n_threads;
    j["type_k"] = opt.kv.type_k;
    j["type_v"] = opt.kv.type_v;
    j["n_ctx"] = r.n_ctx;
    j["n_prompt"] = r.n_prompt;
    j["n_gen"] = r.n_gen;
    j["n_depth"] = r.depth;
    j["depth_fill"] = opt.depth_fill;
    j["test"] = r.test;
    j["avg_ns"] = r.avg_ns;
    j["stddev_ns"] = r.stddev_ns;
    j["avg_ts"] = r.avg_ts;
    j["stddev_ts"] = r.stddev_ts;
    j["samples_ns"] = r.samples_ns;
    j["samples_ts"] = r.samples_ts;
    j["kv_bytes"] = r.kv_bytes;
    j["kv_tokens"] = r.kv_tokens;
    j["kv_bytes_offloaded"] = r.kv_bytes_offloaded;
    if (r.bytes_read_per_token > 0) j["bytes_read_per_token"] = r.bytes_read_per_token;
    if (bw > 0) {
      j["stream_triad_bytes_per_s"] = bw;
      if (r.bytes_read_per_token > 0)
        j["bandwidth_share"] = double(r.bytes_read_per_token) * r.avg_ts / bw;
    }
    arr.push_back(j);
  }
  std::printf("%s\n", arr.dump(2).c_str());
}

void print_table(const BenchOptions& opt, const ModelFacts& mf, int n_threads,
                 const std::vector<BenchResult>& results, double bw) {
  std::printf("| %-24s | %10s | %8s | %-10s | %7s | %-6s | %-6s | %16s | %20s | %12s |\n", "model",
              "size", "params", "backend", "threads", "type_k", "type_v", "test", "t/s", "KV");
  std::printf(
      "| %s | %s: | %s: | %s | %s: | %s | %s | %s: | %s: | %s: |\n", std::string(24, '-').c_str(),
      std::string(9, '-').c_str(), std::string(7, '-').c_str(), std::string(10, '-').c_str(),
      std::string(6, '-').c_str(), std::string(6, '-').c_str(), std::string(6, '-').c_str(),
      std::string(15, '-').c_str(), std::string(19, '-').c_str(), std::string(11, '-').c_str());
  for (const BenchResult& r : results) {
    char ts[64], params[32];
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.avg_ts, r.stddev_ts);
    std::snprintf(params, sizeof params, "%.2f M", double(mf.n_params) / 1e6);
    // "±" is two bytes but one column: pad one more.
    const std::string& backend = mf.backends;
    std::printf(
        "| %-24s | %10s | %8s | %-10s | %7d | %-6s | %-6s | %16s | %21s | %12s |\n",
        mf.name.c_str(), format_bytes(mf.size).c_str(), params, backend.c_str(), n_threads,
        opt.kv.type_k.c_str(), opt.kv.type_v.c_str(), r.test.c_str(), ts,
        (format_bytes(r.kv_bytes) + (r.kv_bytes_offloaded > 0
                                         ? " (" + format_bytes(r.kv_bytes_offloaded) + " offloaded)"
                                         : ""))
            .c_str());
  }
  if (opt.depth_fill == "synthetic")
    std::printf(
        "\ndepths filled synthetically (--depth-fill synthetic): random encoded KV rows, "
        "no prefill; decode/attention speed only\n");
  if (bw <= 0) return;
  std::printf("\nmemory bandwidth (STREAM triad, %d threads): %.1f GB/s\n", n_threads, bw / 1e9);
  for (const BenchResult& r : results)
    if (r.bytes_read_per_token > 0)
      std::printf("%s: %s read per token × %.2f t/s = %.1f GB/s, %.0f%% of it\n", r.test.c_str(),
                  format_bytes(r.bytes_read_per_token).c_str(), r.avg_ts,
                  double(r.bytes_read_per_token) * r.avg_ts / 1e9,
                  100.0 * double(r.bytes_read_per_token) * r.avg_ts / bw);
}

}  // namespace

int cmd_bench(const BenchOptions& opt) {
  try {
    check_options(opt);
    // -ngl auto sizes for the deepest test's context.
    const int64_t deepest = *std::max_element(opt.depth.begin(), opt.depth.end()) +
                            std::max(*std::max_element(opt.n_prompt.begin(), opt.n_prompt.end()),
                                     *std::max_element(opt.n_gen.begin(), opt.n_gen.end()));
    const AutoFit fit =
        auto_fit(opt.kv, opt.model, opt.n_ctx > 0 ? opt.n_ctx : deepest, opt.n_batch);
    const Model model = Model::load(opt.model, resolve_device_options(opt.kv.dev, -1, &fit));
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    int n_threads = 0;
    // STREAM triad over 3 × 256 MiB (far past any last-level cache), best of 10, before the
    // tests, with the thread count the tests use.
    const double bw = opt.bandwidth ? stream_triad_bytes_per_s(
                                          opt.n_threads > 0 ? opt.n_threads : cpu::physical_cores(),
                                          int64_t(32) << 20, 10)
                                    : 0.0;
    const std::vector<BenchResult> results =
        run_bench(opt, model, tok.add_bos() ? tok.bos() : -1, n_threads);
    const ModelFacts mf = model_facts(opt, model);
    if (opt.json)
      print_json(opt, mf, n_threads, results, bw);
    else
      print_table(opt, mf, n_threads, results, bw);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvrun::tools

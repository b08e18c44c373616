// batch.cpp — `kvrun batch`: summarizes many documents (JSON lines or a folder) through the
// continuous-batching engine (tools/batch/batch_job.h), appending one JSON line per document to the
// output as soon as it is done. A rerun with the same output skips the ids already there.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "session.h"
#include "tools/batch/batch_input.h"
#include "tools/batch/batch_job.h"
#include "tools/batch/batch_output.h"

namespace kvrun::tools {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

/// "\n", "\t", "\\" in a command-line string → newline, tab, backslash.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == '\\' ? '\\' : (out += '\\', c);
  }
  return out;
}

std::string format_duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600),
                  (long long)(t / 60 % 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

/// Progress on stderr: a bar redrawn in place on a terminal, a plain line every `interval_s`
/// otherwise.
class ProgressView {
 public:
  explicit ProgressView(double interval_s) : tty_(::isatty(2) != 0), interval_(interval_s) {}

  void update(const BatchProgress& p) {
    const double every = tty_ ? 0.2 : interval_;
    if (p.elapsed_s - last_ < every) return;
    last_ = p.elapsed_s;
    const int64_t settled = p.n_done + p.n_failed;
    const double docs_s = p.elapsed_s > 0 ? double(settled) / p.elapsed_s : 0;
    const double tok_s = p.elapsed_s > 0 ? double(p.n_completion_tokens) / p.elapsed_s : 0;
    const double eta = docs_s > 0 ? double(p.n_total - settled) / docs_s : -1;
    if (tty_) {
      constexpr int kWidth = 30;
      const int fill = p.n_total > 0 ? int(kWidth * settled / p.n_total) : kWidth;
      std::string bar(size_t(fill), '#');
      bar.resize(kWidth, '.');
      std::fprintf(stderr, "\r[%s] %lld/%lld  %.2f docs/s  %.1f tok/s  ETA %s   ", bar.c_str(),
                   (long long)settled, (long long)p.n_total, docs_s, tok_s,
                   format_duration(eta).c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "kvrun batch: %lld/%lld done, %.2f docs/s, %.1f tok/s, ETA %s\n",
                   (long long)settled, (long long)p.n_total, docs_s, tok_s,
                   format_duration(eta).c_str());
    }
  }
  /// Ends the bar's line before other output.
  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  bool tty_;
  double interval_;
  double last_ = 0;
  bool drawn_ = false;
};

}  // namespace

CLI::App* add_batch_command(CLI::App& app, BatchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "batch", "summarize many documents (JSON lines or a folder); resumable, nothing lost");
  cmd->add_option("-m,--model", o.model, "GGUF model file (or -hf / -mu)");
  cmd->add_option("-i,--input", o.input,
                  "JSON lines {\"id\": ..., \"text\": ...} or a folder of .txt/.md files")
      ->required();
  cmd->add_option("-o,--output", o.output, "JSON-lines results; a rerun skips the ids there")
      ->required();
  cmd->add_option("--prompt", o.prompt, "user prompt; {text} is replaced by the document")
      ->capture_default_str();
  cmd->add_option("--system", o.system, "system prompt");
  cmd->add_option("--chat-template", o.chat_template,
                  "chat template instead of the model's: a built-in name (kvrun --chat-template "
                  "list) or a Jinja file");
  cmd->add_option("--chat-template-kwargs", o.chat_template_kwargs,
                  "extra chat template variables as a JSON object");
  cmd->add_option("--parallel", o.n_parallel, "(-np) documents processed at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("-n,--n-predict", o.n_predict, "tokens per summary at most")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", o.n_ctx,
                  "context length of each session (default: min(4096, n_ctx_train))")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("-b,--batch-size", o.n_batch, "tokens per forward step")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--ordered", o.ordered, "write results in input order");
  cmd->add_option("--long", o.long_mode,
                  "documents longer than the context: split (map-reduce), truncate, skip")
      ->check(CLI::IsMember({"split", "truncate", "skip"}))
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", o.chunk_tokens,
                  "document tokens per chunk with --long split (default: as many as fit)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--progress-interval", o.progress_s,
                  "seconds between progress lines when stderr is not a terminal")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  auto& s = o.sampling;
  s.temp = 0;
  cmd->add_option("--temp", s.temp, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("-s,--seed", s.seed, "random seed (default: random)");
  add_grammar_options(*cmd, o.grammar);
  add_kv_cache_options(*cmd, o.kv);
  return cmd;
}

int cmd_batch(const BatchOptions& opt_in) {
  BatchOptions opt = opt_in;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<BatchJob> job;
  BatchInput input;
  BatchResumeState resume;
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = compile_grammar_source(opt.grammar);
  } catch (const GrammarSourceError& e) {
    std::fprintf(stderr, "kvrun batch: error: %s\n", e.what());
    return 2;
  }
  try {
    const bool folder = std::filesystem::is_directory(opt.input);
    input = folder ? read_batch_folder(opt.input) : read_batch_jsonl(opt.input);
    resume = scan_batch_output(opt.output);

    AutoFit fit = auto_fit(opt.kv, opt.model, opt.n_ctx, opt.n_batch);
    fit.n_seqs = opt.n_parallel;
    model = std::make_unique<Model>(
        Model::load(opt.model, resolve_device_options(opt.kv.dev, -1, &fit)));
    tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model->file()));
    opt.n_ctx = resolve_n_ctx(*model, opt.n_ctx);
    ContextParams cp;
    cp.n_ctx = opt.n_ctx * opt.n_parallel;  // pool budget (without --kv-mem): every session full
    cp.n_seq = opt.n_parallel;              // window tables: a window and a chunk per session
    cp.n_batch = opt.n_batch;
    apply_kv_cache_options(opt.kv, opt.model, cp);
    cache = make_context_cache(*model, cp);

    BatchParams bp;
    bp.sched.n_ctx = opt.n_ctx;
    bp.sched.n_batch = opt.n_batch;
    bp.sched.n_parallel = opt.n_parallel;
    bp.sched.n_threads = opt.n_threads;
    bp.sched.flash_attn = cp.flash_attn;
    bp.prompt.prompt = unescape(opt.prompt);
    bp.prompt.system = unescape(opt.system);
    bp.prompt.chat = chat_template_for(*model, *tok, opt.chat_template, opt.chat_template_kwargs);
    try {  // a template that raises on this prompt shape fails here, not on every document
      batch_prompt_text(bp.prompt, "text");
    } catch (const jinja::JinjaError& e) {
      throw std::runtime_error("chat template " + bp.prompt.chat->name() + ": " + e.what());
    }
    bp.n_predict = opt.n_predict;
    bp.sampling = opt.sampling;
    bp.grammar = grammar;
    bp.long_mode = *parse_batch_long_mode(opt.long_mode);
    bp.chunk_tokens = opt.chunk_tokens;
    job = std::make_unique<BatchJob>(*model, *tok, *cache, bp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun batch: error: %s\n", e.what());
    return 1;
  }

  for (const auto& w : resume.warnings)
    std::fprintf(stderr, "kvrun batch: %s: %s\n", opt.output.c_str(), w.c_str());
  if (resume.n_cut_bytes > 0)
    std::fprintf(stderr,
                 "kvrun batch: %s: removed a final line cut short (%lld bytes); it is redone\n",
                 opt.output.c_str(), (long long)resume.n_cut_bytes);
  for (const auto& m : input.invalid)
    std::fprintf(stderr, "kvrun batch: %s:%lld: malformed line skipped: %s\n", opt.input.c_str(),
                 (long long)m.line, m.message.c_str());
  for (const auto& m : input.duplicates)
    std::fprintf(stderr, "kvrun batch: %s:%lld: %s, skipped\n", opt.input.c_str(),
                 (long long)m.line, m.message.c_str());

  std::vector<BatchDoc> todo;
  for (auto& d : input.docs)
    if (!resume.done.count(d.key)) todo.push_back(std::move(d));
  const int64_t n_already = int64_t(input.docs.size() - todo.size());
  std::fprintf(stderr,
               "kvrun batch: %zu documents to do (%lld already in %s), -np %d, n_ctx %lld, "
               "prompt budget %lld tokens, chunk %lld tokens\n",
               todo.size(), (long long)n_already, opt.output.c_str(), opt.n_parallel,
               (long long)opt.n_ctx, (long long)job->prompt_budget(),
               (long long)job->chunk_tokens());

  if (opt.long_mode == "split" && opt.n_predict >= job->chunk_tokens())
    std::fprintf(stderr,
                 "kvrun batch: warning: -n %lld is not below the chunk size (%lld tokens): a "
                 "summary would not shrink a chunk, so documents that do not fit are truncated "
                 "instead of split (raise -c or lower -n)\n",
                 (long long)opt.n_predict, (long long)job->chunk_tokens());

  std::unique_ptr<BatchWriter> writer;
  try {
    writer = std::make_unique<BatchWriter>(opt.output, opt.ordered);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun batch: error: %s\n", e.what());
    return 1;
  }

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  ProgressView view(opt.progress_s);
  std::string write_error;
  auto on_result = [&](int64_t index, const std::optional<nlohmann::ordered_json>& rec) {
    try {
      if (rec)
        writer->put(index, *rec);
      else
        writer->skip(index);
    } catch (const std::exception& e) {
      write_error = e.what();
      g_stop.store(true);
    }
  };
  BatchProgress p = job->run(
      todo, on_result, [&](const BatchProgress& x) { view.update(x); }, g_stop);
  try {
    writer->flush_all();
  } catch (const std::exception& e) {
    write_error = e.what();
  }
  view.finish();
  for (const auto& e : job->errors()) std::fprintf(stderr, "kvrun batch: failed: %s\n", e.c_str());
  if (!write_error.empty()) std::fprintf(stderr, "kvrun batch: error: %s\n", write_error.c_str());

  const auto& st = job->stats();
  const int64_t n_not_done = p.n_total - p.n_done - p.n_failed;
  std::fprintf(stderr,
               "kvrun batch: %s: %lld documents done (%lld skipped as too long, %lld truncated, "
               "%lld split), %lld failed, %lld not done; input: %zu malformed lines, %zu "
               "duplicate ids, %lld already done\n",
               p.interrupted ? "interrupted" : "finished", (long long)p.n_done,
               (long long)p.n_skipped, (long long)p.n_truncated, (long long)p.n_split,
               (long long)p.n_failed, (long long)n_not_done, input.invalid.size(),
               input.duplicates.size(), (long long)n_already);
  std::fprintf(stderr,
               "kvrun batch: %lld requests; prompt tokens %lld (%lld from the prefix cache, %lld "
               "computed), generated %lld; %.2f s, %.3f docs/s, %.1f generated tok/s\n",
               (long long)p.n_requests, (long long)p.n_prompt_tokens, (long long)p.n_cached_tokens,
               (long long)st.n_prefill_tokens, (long long)p.n_completion_tokens, p.elapsed_s,
               p.elapsed_s > 0 ? double(p.n_done) / p.elapsed_s : 0.0,
               p.elapsed_s > 0 ? double(p.n_completion_tokens) / p.elapsed_s : 0.0);
  if (p.interrupted && write_error.empty()) return 130;
  return (p.n_failed > 0 || !write_error.empty()) ? 1 : 0;
}

}  // namespace kvrun::tools

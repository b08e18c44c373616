// session.cpp — shared setup of the completion and chat modes (see session.h).
#include "session.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "progress.h"

namespace kvrun::tools {

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_exit_on_interrupt{false};

namespace {

struct sigaction g_previous;

void on_sigint(int) {
  if (g_exit_on_interrupt.load()) {
    const ssize_t ignored = write(STDOUT_FILENO, "\n", 1);  // async-signal-safe
    (void)ignored;
    _exit(0);
  }
  g_interrupted.store(true);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupted.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, &g_previous);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &g_previous, nullptr); }

int64_t default_n_ctx(int64_t n_ctx_train) {
  return n_ctx_train > 0 ? std::min<int64_t>(4096, n_ctx_train) : 4096;
}

int64_t resolve_n_ctx(const Model& model, int64_t requested) {
  const int64_t n_ctx_train = model.hparams().n_ctx_train;
  int64_t n_ctx = requested;
  if (n_ctx == 0) n_ctx = default_n_ctx(n_ctx_train);
  if (n_ctx_train > 0 && n_ctx > n_ctx_train)
    std::fprintf(stderr,
                 "kvrun: warning: n_ctx %lld is larger than the model's n_ctx_train %lld; quality "
                 "may degrade past it\n",
                 (long long)n_ctx, (long long)n_ctx_train);
  return n_ctx;
}

ChatSpecialTokens chat_special_tokens(const Tokenizer& tok) {
  auto text_of = [&](int32_t id) { return id >= 0 ? tok.token_text(id) : std::string(); };
  return {text_of(tok.bos()), text_of(tok.eos())};
}

std::string chat_template_source(const std::string& name_or_file) {
  if (auto builtin = builtin_chat_template(name_or_file)) return std::string(*builtin);
  std::ifstream f(name_or_file, std::ios::binary);
  if (!f)
    throw std::invalid_argument("unknown chat template '" + name_or_file +
                                "': neither a built-in name (kvrun --chat-template list) nor a "
                                "readable file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {

ChatJson parse_kwargs(const std::string& kwargs) {
  if (kwargs.empty()) return ChatJson::object();
  ChatJson j = ChatJson::parse(kwargs, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::invalid_argument(
        "--chat-template-kwargs must be a JSON object, e.g. "
        "'{\"enable_thinking\": false}'");
  return j;
}

ChatTemplate parse_template(const std::string& source, const std::string& name,
                            const ChatSpecialTokens& tokens) {
  try {
    return ChatTemplate::parse(source, name, tokens);
  } catch (const jinja::JinjaError& e) {
    throw std::invalid_argument("chat template " + name + " does not parse: " + e.what());
  }
}

}  // namespace

void check_chat_template_options(const std::string& name_or_file, const std::string& kwargs) {
  parse_kwargs(kwargs);
  if (!name_or_file.empty()) parse_template(chat_template_source(name_or_file), name_or_file, {});
}

std::optional<ChatTemplate> chat_template_for(const Model& model, const Tokenizer& tok,
                                              const std::string& requested,
                                              const std::string& kwargs) {
  std::optional<ChatTemplate> t;
  if (!requested.empty()) {
    t = parse_template(chat_template_source(requested), requested, chat_special_tokens(tok));
  } else if (auto src = model.file().get_string("tokenizer.chat_template")) {
    t = parse_template(std::string(*src), "model", chat_special_tokens(tok));
  } else {
    return std::nullopt;
  }
  t->set_default_kwargs(parse_kwargs(kwargs));
  return t;
}

Loaded load(const RunOptions& opt) {
  const bool show = progress_enabled(opt.log_disable);
  const AutoFit fit = auto_fit(opt.kv, opt.model, opt.n_ctx, opt.n_batch);
  ModelParams mp = resolve_device_options(opt.kv.dev, -1, &fit);
  mp.progress = progress_callback(show, "loading model", "MiB");
  Model model = Model::load(opt.model, mp);
  Tokenizer tok = Tokenizer::from_gguf(model.file());
  ContextParams cp;
  cp.n_ctx = resolve_n_ctx(model, opt.n_ctx);
  cp.n_batch = opt.n_batch;
  cp.n_threads = opt.n_threads;
  apply_kv_cache_options(opt.kv, opt.model, cp);
  Loaded l{std::move(model), std::move(tok), nullptr};
  l.ctx = std::make_unique<Context>(l.model, cp);
  l.ctx->set_progress(progress_callback(show, "prompt", "tokens"));
  return l;
}

void print_timings(const GenerateTimings& t) {
  std::fprintf(stderr,
               "\nkvrun: prompt %lld tokens in %.1f ms (%.1f t/s) | generation %lld tokens in "
               "%.1f ms (%.1f t/s)\n",
               (long long)t.n_prompt, t.prompt_ms, t.prompt_tps(), (long long)t.n_gen, t.gen_ms,
               t.gen_tps());
}

}  // namespace kvrun::tools

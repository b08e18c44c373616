// repl.cpp — the chat REPL: libedit line editing and history, multi-line input (a line ending in
// '\' continues), streamed replies, Ctrl-C stops the current reply and keeps the conversation,
// Ctrl-D (or Ctrl-C at the prompt) exits; commands /help, /reset, /stats, /save FILE, /load FILE,
// /exit.
//
// Each turn renders the whole conversation with the chat template, tokenizes it, keeps the
// longest prefix already in the context and evaluates only the rest. A model without a chat
// template (or with one kvrun cannot render) chats in plain completion mode: each input is
// appended to the running text and the model continues it.
#include "repl.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "kv_layout.h"
#include "repl_state.h"
#include "text/chat_template.h"

namespace kvrun::tools {
namespace {

const char* kHelp =
    "commands:\n"
    "  /help          this text\n"
    "  /reset         forget the conversation (keeps the system prompt)\n"
    "  /stats         tokens in the context, speed of the last reply, KV memory\n"
    "  /save FILE     save the conversation and its KV state\n"
    "  /load FILE     load a conversation saved with /save\n"
    "  /exit          quit (or Ctrl-D)\n"
    "end a line with \\ to continue on the next; Ctrl-C stops a reply\n";

std::string history_path() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.kvrun_history" : std::string();
}

/// Reads one (possibly multi-line) input; nullopt at end of input.
std::optional<std::string> read_input(bool tty) {
  std::string text;
  for (bool first = true;; first = false) {
    std::string line;
    if (tty) {
      char* raw = readline(first ? "> " : ". ");
      if (!raw) return text.empty() ? std::nullopt : std::optional<std::string>(text);
      line = raw;
      std::free(raw);
    } else if (!std::getline(std::cin, line)) {
      return text.empty() ? std::nullopt : std::optional<std::string>(text);
    }
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      text += line + "\n";
      continue;
    }
    text += line;
    if (tty && !text.empty()) {
      add_history(text.c_str());
      if (const std::string h = history_path(); !h.empty()) write_history(h.c_str());
    }
    return text;
  }
}

void print_stats(const ChatState& st, const Loaded& l) {
  const int64_t n = l.ctx->n_past();
  std::printf("context: %lld of %lld tokens | messages: %zu\n", (long long)n,
              (long long)l.ctx->n_ctx(), st.messages.size());
  std::printf("last reply: prompt %lld tokens at %.1f t/s, generation %lld tokens at %.1f t/s\n",
              (long long)st.last.n_prompt, st.last.prompt_tps(), (long long)st.last.n_gen,
              st.last.gen_tps());
  const KvCache& cache = l.ctx->cache();
  const BlockPoolStats ps = cache.pool().stats();
  std::printf("KV cache: %s held in %zu blocks of %lld tokens (K %s, V %s, %s/token)\n",
              format_bytes(l.ctx->sequence().bytes_held()).c_str(),
              l.ctx->sequence().block_table().size() - size_t(l.ctx->sequence().n_released()),
              (long long)cache.block_size(), kv_type_name(cache.params().type_k),
              kv_type_name(cache.params().type_v), format_bytes(cache.bytes_per_token()).c_str());
  std::printf(
      "KV pool: %lld blocks (%s): %lld used, %lld cached, %lld free | tokens computed "
      "%lld, reused from the prefix cache %lld\n",
      (long long)ps.n_blocks, format_bytes(ps.n_blocks * cache.bytes_per_block()).c_str(),
      (long long)ps.n_used, (long long)ps.n_cached, (long long)ps.n_free,
      (long long)cache.n_tokens_computed(), (long long)cache.n_tokens_reused());
  if (cache.window() > 0)
    std::printf("KV window tables: %lld windowed layers, %lld of %lld window blocks used (%s)\n",
                (long long)cache.n_window_layers(), (long long)cache.window_blocks_used(),
                (long long)cache.window_blocks(),
                format_bytes(cache.window_blocks_used() * cache.window_bytes_per_block()).c_str());
  const KvTierStats ts = cache.tier_stats();
  if (ts.n_slow > 0)
    std::printf(
        "KV tiers: ram %lld of %lld blocks used, offload file %lld of %lld (%s) | moved out "
        "%lld, back %lld\n",
        (long long)ts.used_fast, (long long)ts.n_fast, (long long)ts.used_slow,
        (long long)ts.n_slow, cache.offload_path().c_str(), (long long)ts.moves_out,
        (long long)ts.moves_in);
}

/// Handles a /command; returns false to leave the REPL.
bool command(const std::string& line, ChatState& st, Loaded& l) {
  const size_t sp = line.find(' ');
  const std::string cmd = line.substr(0, sp);
  const std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  if (cmd == "/exit" || cmd == "/quit") return false;
  if (cmd == "/help") {
    std::fputs(kHelp, stdout);
  } else if (cmd == "/reset") {
    st.reset(l);
    std::printf("conversation reset\n");
  } else if (cmd == "/stats") {
    print_stats(st, l);
  } else if (cmd == "/save" && !arg.empty()) {
    save_chat(arg, st, l);
    std::printf("saved %zu messages, %lld tokens to %s\n", st.messages.size(),
                (long long)l.ctx->n_past(), arg.c_str());
  } else if (cmd == "/load" && !arg.empty()) {
    load_chat(arg, st, l);
    std::printf("loaded %zu messages, %lld tokens from %s\n", st.messages.size(),
                (long long)l.ctx->n_past(), arg.c_str());
  } else {
    std::printf("unknown command or missing argument: %s (try /help)\n", line.c_str());
  }
  return true;
}

}  // namespace

int run_repl(const RunOptions& opt, Loaded& l) {
  ChatState st = ChatState::create(opt, l);
  const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  const std::string hist = history_path();
  if (tty) {
    using_history();
    if (!hist.empty()) read_history(hist.c_str());
  }
  std::fprintf(stderr, "kvrun chat: %s, n_ctx %lld, %s. /help for commands, Ctrl-D to exit.\n",
               opt.model.c_str(), (long long)l.ctx->n_ctx(), st.describe().c_str());
  std::optional<std::string> pending;
  if (opt.has_prompt) pending = opt.prompt;
  InterruptGuard guard;  // Ctrl-C: stops a reply; at the prompt, ends the REPL
  for (;;) {
    g_exit_on_interrupt = true;
    std::optional<std::string> input = pending ? pending : read_input(tty);
    g_exit_on_interrupt = false;
    g_interrupted = false;
    pending.reset();
    if (!input) break;
    if (input->empty()) continue;
    try {
      if ((*input)[0] == '/') {
        if (!command(*input, st, l)) break;
        continue;
      }
      const GenerateResult r = st.turn(*input, opt, l, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
      std::printf(r.stop == FinishReason::kCancelled ? "\n[stopped]\n" : "\n");
      if (r.stop == FinishReason::kContextFull)
        std::printf("[the context is full: /reset, or restart with a larger -c]\n");
      if (opt.verbose) print_timings(r.timings);
    } catch (const std::exception& e) {
      std::printf("\n");
      std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    }
  }
  std::printf("\n");
  return 0;
}

}  // namespace kvrun::tools

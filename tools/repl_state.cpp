// repl_state.cpp — one REPL conversation (see repl_state.h).
#include "repl_state.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/context_state.h"

namespace kvrun::tools {
namespace {

/// Tokens of the whole conversation as the model should see it now.
std::vector<int32_t> conversation_tokens(const ChatState& st, const Tokenizer& tok,
                                         const std::string& user) {
  if (!st.tmpl) {  // plain completion: the running text plus the new input
    std::vector<int32_t> t = st.tokens;
    const bool first = t.empty();
    std::string text = first ? user : "\n" + user;
    std::vector<int32_t> more = tok.tokenize(text, first, true);
    t.insert(t.end(), more.begin(), more.end());
    return t;
  }
  std::string prompt;
  try {
    prompt = st.tmpl->render(st.messages, true);
  } catch (const jinja::JinjaError& e) {
    throw std::runtime_error("chat template " + st.tmpl->name() + ": " + e.what());
  }
  const std::string& bos = st.tmpl->tokens().bos;
  const bool has_bos = !bos.empty() && prompt.rfind(bos, 0) == 0;
  return tok.tokenize(prompt, !has_bos, true);
}

}  // namespace

ChatState ChatState::create(const RunOptions& opt, const Loaded& l) {
  ChatState st{std::nullopt, opt.system, {}, {}, Sampler(opt.sampling), {}};
  st.tmpl = chat_template_for(l.model, l.tok, opt.chat_template, opt.chat_template_kwargs);
  st.reset(const_cast<Loaded&>(l));
  return st;
}

std::string ChatState::describe() const {
  if (!tmpl) return "plain completion (no chat template in the model)";
  return tmpl->name() == "model" ? "the model's chat template" : "chat template " + tmpl->name();
}

void ChatState::reset(Loaded& l) {
  messages.clear();
  if (tmpl && !system.empty()) messages.push_back({"system", system});
  tokens.clear();
  l.ctx->reset();
  sampler.reset();
}

GenerateResult ChatState::turn(const std::string& user, const RunOptions& opt, Loaded& l,
                               const PieceSink& sink) {
  messages.push_back({"user", user});
  try {
    std::vector<int32_t> want = conversation_tokens(*this, l.tok, user);
    if (int64_t(want.size()) >= l.ctx->n_ctx())
      throw ContextError("the conversation is " + std::to_string(want.size()) +
                         " tokens and the context holds " + std::to_string(l.ctx->n_ctx()) +
                         " (/reset, or restart with a larger -c)");
    size_t keep = 0;  // longest prefix the context already holds
    while (keep < tokens.size() && keep < want.size() && tokens[keep] == want[keep]) ++keep;
    keep = std::min(keep, want.size() - 1);  // re-evaluate at least the last token
    l.ctx->truncate(int64_t(keep));
    keep = size_t(l.ctx->n_past());  // less when sliding-window blocks were given back
    if (keep == 0) keep = size_t(l.ctx->reuse_prefix(want));  // cached blocks (prefix sharing)
    GenerateParams gp;
    gp.n_predict = opt.n_predict;
    gp.ignore_eos = opt.ignore_eos;
    const std::span<const int32_t> input(want.data() + keep, want.size() - keep);
    GenerateResult r = generate(*l.ctx, l.tok, sampler, input, gp, sink, &g_interrupted);
    want.insert(want.end(), r.tokens.begin(), r.tokens.end());
    want.resize(size_t(l.ctx->n_past()));  // the last sampled token may not be evaluated yet
    tokens = std::move(want);
    if (tmpl) messages.push_back({"assistant", r.text});
    last = r.timings;
    return r;
  } catch (...) {
    messages.pop_back();
    throw;
  }
}

void save_chat(const std::string& path, const ChatState& st, const Loaded& l) {
  nlohmann::json j;
  j["template"] = st.tmpl ? st.tmpl->name() : "";
  j["messages"] = nlohmann::json::array();
  for (const ChatMessage& m : st.messages)
    j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  j["tokens"] = st.tokens;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  const std::string header = j.dump();
  f << "KVRUNCHAT1\n" << header << "\n";
  write_context_state(f, *l.ctx);
  if (!f.flush()) throw std::runtime_error("writing " + path + " failed");
}

void load_chat(const std::string& path, ChatState& st, Loaded& l) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::string magic, header;
  std::getline(f, magic);
  if (magic != "KVRUNCHAT1") throw std::runtime_error(path + " is not a kvrun chat file");
  std::getline(f, header);
  nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(path + ": damaged header");
  std::vector<ChatMessage> messages;
  std::vector<int32_t> tokens;
  try {
    for (const auto& m : j.at("messages"))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    tokens = j.at("tokens").get<std::vector<int32_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": damaged header (" + e.what() + ")");
  }
  const std::string tmpl = j.value("template", j.value("family", ""));  // "family": older files
  if (tmpl != (st.tmpl ? st.tmpl->name() : ""))
    throw std::runtime_error(path + " was saved with chat template '" + tmpl + "'");
  try {
    read_context_state(f, *l.ctx, tokens);  // validates, then commits
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  st.messages = std::move(messages);
  st.tokens = std::move(tokens);
  st.sampler.reset();
  for (int32_t id : st.tokens) st.sampler.accept(id);
}

}  // namespace kvrun::tools

// embed.cpp — `kvrun embed` (see embed.h).
#include "embed.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/embed.h"
#include "session.h"

namespace kvrun::tools {

CLI::App* add_embed_command(CLI::App& app, EmbedOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "embed", "embeddings of texts (-p TEXT, or one text per line from -f FILE / stdin)");
  cmd->add_option("-m,--model", o.model, "GGUF model file (or -hf / -mu)");
  cmd->add_option("-p,--prompt", o.prompt, "the text to embed");
  cmd->add_option("-f,--file", o.file, "texts to embed, one per line");
  cmd->add_option("--pooling", o.pooling,
                  "none, mean, cls or last (default: the model's pooling_type, else mean)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  cmd->add_option("--embd-normalize", o.embd_normalize,
                  "-1 none, 0 max-abs, 1 taxicab, 2 Euclidean, >2 p-norm (llama.cpp's values)")
      ->check(CLI::Range(-1, 64))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", o.n_ctx, "longest text in tokens (default min(4096, train))")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 32));
  cmd->add_option("-b,--batch-size", o.n_batch, "prefill chunk")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", o.json, "print OpenAI's embeddings response object");
  add_kv_cache_options(*cmd, o.kv);
  return cmd;
}

namespace {

std::vector<std::string> read_texts(const EmbedOptions& o) {
  std::vector<std::string> texts;
  if (!o.prompt.empty()) texts.push_back(o.prompt);
  if (!o.file.empty() || o.prompt.empty()) {
    std::ifstream f;
    if (!o.file.empty()) {
      f.open(o.file);
      if (!f) throw std::runtime_error("cannot read " + o.file);
    }
    std::istream& in = o.file.empty() ? std::cin : f;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) throw std::runtime_error("no text to embed (-p, -f or stdin)");
  return texts;
}

}  // namespace

int cmd_embed(const EmbedOptions& o) {
  try {
    const std::vector<std::string> texts = read_texts(o);
    const AutoFit fit = auto_fit(o.kv, o.model, o.n_ctx, o.n_batch);
    Model model = Model::load(o.model, resolve_device_options(o.kv.dev, -1, &fit));
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    ContextParams cp;
    cp.n_ctx = resolve_n_ctx(model, o.n_ctx);
    cp.n_batch = o.n_batch;
    cp.n_threads = o.n_threads;
    cp.embeddings = true;
    apply_kv_cache_options(o.kv, o.model, cp);
    Context ctx(model, cp);
    const Pooling pooling = o.pooling.empty() ? model_pooling(model) : *parse_pooling(o.pooling);
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    int64_t n_tokens = 0;
    std::vector<std::vector<int32_t>> inputs;
    for (size_t i = 0; i < texts.size(); ++i) {
      inputs.push_back(tok.tokenize(texts[i], true, false));
      if (int64_t(inputs.back().size()) > ctx.n_ctx())
        throw std::runtime_error("text " + std::to_string(i) + " has " +
                                 std::to_string(inputs.back().size()) + " tokens, more than -c " +
                                 std::to_string(ctx.n_ctx()));
      n_tokens += int64_t(inputs.back().size());
    }
    // An encoder's texts: several per step (embed_inputs).
    const auto vectors = embed_inputs(ctx, inputs, pooling, o.embd_normalize);
    for (size_t i = 0; i < vectors.size(); ++i) {
      const std::vector<float>& e = vectors[i];
      if (o.json) {
        data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
        continue;
      }
      for (size_t j = 0; j < e.size(); ++j) std::printf(j ? " %.7g" : "%.7g", double(e[j]));
      std::printf("\n");
    }
    if (o.json) {
      nlohmann::ordered_json j = {
          {"object", "list"},
          {"data", data},
          {"model", o.model},
          {"pooling", pooling_name(pooling)},
          {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvrun::tools

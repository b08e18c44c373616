// synth_shapes.cpp — the shapes table (see synth_shapes.h for the sources of the numbers).
#include "synth_shapes.h"

namespace kvrun {

const std::vector<SynthShape>& synth_shapes() {
  static const std::vector<SynthShape> kShapes = [] {
    std::vector<SynthShape> v;
    SynthShape s;

    // tiny: a llama with everything llama3.2 has (GQA, llama3 rope scaling) but untied, so the
    // output.weight path is covered too. Rows of 128 (attn/ffn_gate/up inputs) are not a
    // multiple of 256; ffn_down rows (256) are.
    s = {};
    s.name = "tiny";
    s.arch = "llama";
    s.n_layer = 2;
    s.n_embd = 128;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 64;
    s.n_ff = 256;
    s.n_vocab = 512;
    s.n_ctx_train = 2048;
    s.rope_theta = 500000;
    s.rms_eps = 1e-5;
    s.tied = false;
    s.rope_scaling = {8.0, 1.0, 4.0, 256};
    s.source = "kvrun test shape";
    v.push_back(s);

    // tiny-qwen2: qwen2 layout (QKV biases, tied embeddings); n_head · head_dim = n_embd as
    // llama.cpp's qwen2 loader requires.
    s = {};
    s.name = "tiny-qwen2";
    s.arch = "qwen2";
    s.n_layer = 2;
    s.n_embd = 128;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 64;
    s.n_ff = 256;
    s.n_vocab = 512;
    s.n_ctx_train = 2048;
    s.rope_theta = 1000000;
    s.rms_eps = 1e-6;
    s.tied = true;
    s.qkv_bias = true;
    s.source = "kvrun test shape";
    v.push_back(s);

    s = {};
    s.name = "llama3.2-1b";
    s.arch = "llama";
    s.n_layer = 16;
    s.n_embd = 2048;
    s.n_head = 32;
    s.n_head_kv = 8;
    s.head_dim = 64;
    s.n_ff = 8192;
    s.n_vocab = 128256;
    s.n_ctx_train = 131072;
    s.rope_theta = 500000;
    s.rms_eps = 1e-5;
    s.tied = true;
    s.rope_scaling = {32.0, 1.0, 4.0, 8192};
    s.source = "huggingface.co/meta-llama/Llama-3.2-1B config.json";
    v.push_back(s);

    s = {};
    s.name = "llama3.1-8b";
    s.arch = "llama";
    s.n_layer = 32;
    s.n_embd = 4096;
    s.n_head = 32;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_ff = 14336;
    s.n_vocab = 128256;
    s.n_ctx_train = 131072;
    s.rope_theta = 500000;
    s.rms_eps = 1e-5;
    s.tied = false;
    s.rope_scaling = {8.0, 1.0, 4.0, 8192};
    s.source = "huggingface.co/meta-llama/Llama-3.1-8B config.json";
    v.push_back(s);

    s = {};
    s.name = "qwen2.5-0.5b";
    s.arch = "qwen2";
    s.n_layer = 24;
    s.n_embd = 896;
    s.n_head = 14;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_ff = 4864;
    s.n_vocab = 151936;
    s.n_ctx_train = 32768;
    s.rope_theta = 1000000;
    s.rms_eps = 1e-6;
    s.tied = true;
    s.qkv_bias = true;
    s.source = "huggingface.co/Qwen/Qwen2.5-0.5B config.json";
    v.push_back(s);
    return v;
  }();
  return kShapes;
}

const SynthShape* find_synth_shape(std::string_view name) {
  for (const SynthShape& s : synth_shapes())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace kvrun

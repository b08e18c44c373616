// synth_shapes.cpp — the shapes table (see synth_shapes.h for the sources of the numbers).
#include "tools/synth/synth_shapes.h"

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

    // tiny-qwen2-yarn: tiny-qwen2 (the same tensors, so the same weights for a seed) with
    // YaRN ×4 over an original context of 64, as Qwen2.5's 128K configuration (×4 over 32768)
    // scaled down so that the test prompts pass n_ctx_orig.
    s.name = "tiny-qwen2-yarn";
    s.yarn_factor = 4;
    s.yarn_n_ctx_orig = 64;
    v.push_back(s);

    // The other architectures' tiny shapes: the common part, then what each adds.
    auto tiny = [&](const char* name, const char* arch) {
      s = {};
      s.name = name;
      s.arch = arch;
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
      s.source = "kvrun test shape";
    };
    tiny("tiny-qwen3", "qwen3");  // per-head Q/K RMSNorm, tied
    s.tied = true;
    s.qk_norm = true;
    v.push_back(s);

    tiny("tiny-mistral", "llama");  // Mistral: a llama file with a sliding window
    s.rms_eps = 1e-5;
    s.sliding_window = 64;
    v.push_back(s);

    // phi3: fused tensors, no tied output, LongRoPE of a 128k model, a window on every layer.
    tiny("tiny-phi3", "phi3");
    s.rope_theta = 10000;
    s.rms_eps = 1e-5;
    s.n_ctx_train = 131072;
    s.fused = true;
    s.sliding_window = 48;
    s.longrope_n_ctx_orig = 4096;
    v.push_back(s);

    // gemma2: llama.cpp only runs 26, 42 or 46 layers (2B, 9B, 27B); even layers windowed.
    tiny("tiny-gemma2", "gemma2");
    s.n_layer = 26;
    s.rope_theta = 10000;
    s.tied = true;
    s.post_norms = true;
    s.sliding_window = 32;
    s.attn_softcap = 2.0;
    s.final_softcap = 3.0;
    v.push_back(s);

    // gemma3: 5 windowed layers (RoPE base 10000) then a global one (1e6, linear scaling 8).
    tiny("tiny-gemma3", "gemma3");
    s.n_layer = 6;
    s.tied = true;
    s.qk_norm = true;
    s.post_norms = true;
    s.sliding_window = 32;
    s.linear_rope_factor = 8;
    v.push_back(s);

    // qwen3moe: qwen3's attention (nq = 128 ≠ n_embd, as the real model's 4096 ≠ 2048), untied
    // as Qwen3-30B-A3B, 8 SwiGLU experts of 64, top 2; feed_forward_length is written but unused.
    tiny("tiny-qwen3moe", "qwen3moe");
    s.n_layer = 4;
    s.n_embd = 64;
    s.qk_norm = true;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 64;
    v.push_back(s);

    // deepseek2: MLA with Q through a LoRA (ik_llama.cpp treats only 26/27-layer files as
    // V2-Lite, without one), YaRN ×40 over 4096 with V2's log multiplier, the first layer
    // dense, then 8 experts of 32, top 2, one shared expert, softmax gating without
    // renormalization and routed weights ×2.5. Every row length is a multiple of 32 (Q8_0),
    // and the RoPE part (32) too, so the cached latent starts on a q8_0 block.
    tiny("tiny-deepseek2", "deepseek2");
    s.n_layer = 4;
    s.n_embd = 64;
    s.n_head = 4;
    s.n_head_kv = 4;
    s.head_dim = 64;  // qk_nope 32 + qk_rope 32
    s.n_ff = 128;
    s.rope_theta = 10000;
    s.n_ctx_train = 163840;
    s.yarn_factor = 40;
    s.yarn_n_ctx_orig = 4096;
    s.yarn_log_mul = 0.0707;
    s.kv_lora_rank = 64;
    s.q_lora_rank = 64;
    s.qk_rope = 32;
    s.head_dim_v = 32;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 32;
    s.n_expert_shared = 1;
    s.n_dense_lead = 1;
    s.expert_weights_scale = 2.5;
    v.push_back(s);

    // deepseek2 with DeepSeek-V3's router (Moonlight, V3, R1 files): sigmoid scores, the top 2 of
    // score + exp_probs_b, renormalized, ×2.446 (Moonlight's routed_scaling_factor), 2 shared
    // experts; MLA as tiny-deepseek2 (Q through a LoRA, as V3) but plain RoPE without YaRN and
    // Moonlight's base 50000 and eps 1e-5.
    tiny("tiny-deepseek3", "deepseek2");
    s.n_layer = 4;
    s.n_embd = 64;
    s.n_head = 4;
    s.n_head_kv = 4;
    s.head_dim = 64;  // qk_nope 32 + qk_rope 32
    s.n_ff = 128;
    s.rope_theta = 50000;
    s.rms_eps = 1e-5;
    s.n_ctx_train = 8192;
    s.kv_lora_rank = 64;
    s.q_lora_rank = 64;
    s.qk_rope = 32;
    s.head_dim_v = 32;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 32;
    s.n_expert_shared = 2;
    s.n_dense_lead = 1;
    s.expert_weights_scale = 2.446;
    s.sigmoid_gating = true;
    s.expert_weights_norm = true;
    v.push_back(s);

    // tiny-deepseek3 with DeepSeek-V3's node-limited routing (its n_group 8 / topk_group 4 made
    // small): 16 experts in 4 groups of 4, the top 4 chosen from the best 2 groups.
    s.name = "tiny-deepseek3-grouped";
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.n_expert_group = 4;
    s.n_expert_group_used = 2;
    v.push_back(s);

    // Encoders: n_head_kv = n_head as BERT's; every token of type 0.
    tiny("tiny-bert", "bert");  // absolute positions, biases, GELU; CLS pooling (as bge)
    s.n_head_kv = 2;
    s.n_ctx_train = 512;
    s.norm_eps = 1e-12;
    s.pooling_type = 2;
    v.push_back(s);

    tiny("tiny-nomic-bert", "nomic-bert");  // fused QKV, RoPE, SwiGLU; mean pooling (as nomic)
    s.n_head_kv = 2;
    s.rope_theta = 1000;
    s.norm_eps = 1e-12;
    s.pooling_type = 1;
    v.push_back(s);

    // gpt-oss: the real model's layout scaled down: nq = 256 ≠ n_embd, GQA 2, untied, Q/K/V and
    // output biases, attention sinks, a window of 32 on even layers (the 48-token prompt crosses
    // it), YaRN ×32 over 4096 and base 150000 as released, 8 experts of 64 with biases, top 2.
    tiny("tiny-gpt-oss", "gpt-oss");
    s.n_layer = 4;
    s.n_embd = 64;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 64;
    s.n_ctx_train = 131072;
    s.rope_theta = 150000;
    s.rms_eps = 1e-5;
    s.qkv_bias = true;
    s.sliding_window = 32;
    s.yarn_factor = 32;
    s.yarn_n_ctx_orig = 4096;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 64;
    s.gpt_oss = true;
    s.expert_gain = 3;
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

    s = {};
    s.name = "qwen3-30b-a3b";
    s.arch = "qwen3moe";
    s.n_layer = 48;
    s.n_embd = 2048;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.head_dim = 128;
    s.n_ff = 6144;
    s.n_vocab = 151936;
    s.n_ctx_train = 40960;
    s.rope_theta = 1000000;
    s.rms_eps = 1e-6;
    s.tied = false;
    s.qk_norm = true;
    s.n_expert = 128;
    s.n_expert_used = 8;
    s.n_ff_exp = 768;
    s.source = "huggingface.co/Qwen/Qwen3-30B-A3B config.json";
    v.push_back(s);

    s = {};
    s.name = "gpt-oss-20b";
    s.arch = "gpt-oss";
    s.n_layer = 24;
    s.n_embd = 2880;
    s.n_head = 64;
    s.n_head_kv = 8;
    s.head_dim = 64;
    s.n_ff = 2880;
    s.n_vocab = 201088;
    s.n_ctx_train = 131072;
    s.rope_theta = 150000;
    s.rms_eps = 1e-5;
    s.tied = false;
    s.qkv_bias = true;
    s.sliding_window = 128;
    s.yarn_factor = 32;
    s.yarn_n_ctx_orig = 4096;
    s.n_expert = 32;
    s.n_expert_used = 4;
    s.n_ff_exp = 2880;
    s.gpt_oss = true;
    s.source = "huggingface.co/openai/gpt-oss-20b config.json";
    v.push_back(s);

    s = {};
    s.name = "deepseek-v2-lite";
    s.arch = "deepseek2";
    s.n_layer = 27;
    s.n_embd = 2048;
    s.n_head = 16;
    s.n_head_kv = 16;
    s.head_dim = 192;  // qk_nope_head_dim 128 + qk_rope_head_dim 64
    s.n_ff = 10944;
    s.n_vocab = 102400;
    s.n_ctx_train = 163840;
    s.rope_theta = 10000;
    s.rms_eps = 1e-6;
    s.tied = false;
    s.yarn_factor = 40;
    s.yarn_n_ctx_orig = 4096;
    s.yarn_log_mul = 0.0707;
    s.kv_lora_rank = 512;
    s.qk_rope = 64;
    s.head_dim_v = 128;
    s.n_expert = 64;
    s.n_expert_used = 6;
    s.n_ff_exp = 1408;
    s.n_expert_shared = 2;
    s.n_dense_lead = 1;
    s.expert_weights_scale = 1.0;
    s.source = "huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json";
    v.push_back(s);

    s = {};
    s.name = "moonlight-16b-a3b";
    s.arch = "deepseek2";
    s.n_layer = 27;
    s.n_embd = 2048;
    s.n_head = 16;
    s.n_head_kv = 16;
    s.head_dim = 192;  // qk_nope_head_dim 128 + qk_rope_head_dim 64
    s.n_ff = 11264;
    s.n_vocab = 163840;
    s.n_ctx_train = 8192;
    s.rope_theta = 50000;
    s.rms_eps = 1e-5;
    s.tied = false;
    s.kv_lora_rank = 512;
    s.qk_rope = 64;
    s.head_dim_v = 128;
    s.n_expert = 64;
    s.n_expert_used = 6;
    s.n_ff_exp = 1408;
    s.n_expert_shared = 2;
    s.n_dense_lead = 1;
    s.expert_weights_scale = 2.446;
    s.sigmoid_gating = true;
    s.expert_weights_norm = true;
    s.source = "huggingface.co/moonshotai/Moonlight-16B-A3B config.json";
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

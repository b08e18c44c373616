// llama.h — the llama architecture: tensor names, weights and the forward pass.
//
// Tensor names are llama.cpp's GGUF names (token_embd, output_norm, output,
// blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down},
// optional rope_freqs). Shapes are written GGUF-style as {ne0, ne1}: ne0 is the row length
// (the input dimension of a matmul), ne1 the number of rows (its output dimension).
//
// The forward pass (Touvron et al. 2023, "LLaMA"): token embedding; per layer
//   x += Wo · Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)   with n = RMSNorm(x)·attn_norm
//   x += Wdown · (silu(Wgate·n) ⊙ Wup·n)          with n = RMSNorm(x)·ffn_norm
// then logits = Woutput · RMSNorm(x)·output_norm. Weights stay in their stored types.
//
// Every architecture kvrun runs is this block with options (models/arch.h: an ArchSpec per
// architecture, one small file each): Q/K/V/output biases when present (qwen2, gpt-oss), a fused
// attn_qkv and a fused gate/up ffn_up when present (phi3), per-head Q/K RMSNorm (qwen3, gemma3),
// post-norms, embedding scaling, GeGLU and soft-capping (gemma), NeoX RoPE, per-layer RoPE bases
// and sliding windows (gemma, phi3, mistral, gpt-oss), attention sinks and mixture-of-experts
// FFNs (qwen3moe, gpt-oss: models/moe.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "gguf.h"
#include "models/arch.h"
#include "models/hparams.h"
#include "tensor.h"

namespace kvrun {

/// One transformer block. A Tensor with data == nullptr is absent.
struct LlamaLayer {
  Tensor attn_norm;  ///< {n_embd} f32
  Tensor wqkv;       ///< {n_embd, nq + nk + nv} fused Q, K, V rows (phi3); then wq/wk/wv are absent
  Tensor wq;         ///< {n_embd, n_head · head_dim}
  Tensor wk;         ///< {n_embd, n_head_kv · head_dim}
  Tensor wv;         ///< {n_embd, n_head_kv · head_dim_v}
  Tensor bq;         ///< {n_head · head_dim} f32, optional (qwen2)
  Tensor bk;         ///< {n_head_kv · head_dim} f32, optional
  Tensor bv;         ///< {n_head_kv · head_dim_v} f32, optional
  Tensor q_norm;     ///< {head_dim} f32, optional: RMSNorm weight of every Q head (qwen3, gemma3)
  Tensor k_norm;     ///< {head_dim} f32, optional: the same for K
  Tensor wo;         ///< {n_head · head_dim_v, n_embd}
  Tensor bo;         ///< {n_embd} f32, optional: attn_output bias (gpt-oss, bert)
  Tensor attn_sinks;      ///< {n_head} f32, optional: a sink logit per head (gpt-oss)
  Tensor attn_post_norm;  ///< {n_embd} f32, optional (gemma): RMSNorm of the attention output
  Tensor ffn_norm;        ///< {n_embd} f32
  Tensor ffn_gate;        ///< {n_embd, n_ff}; absent when ffn_up is fused
  Tensor ffn_up;          ///< {n_embd, n_ff}, or {n_embd, 2·n_ff} fused: gate rows, then up rows
  Tensor ffn_down;        ///< {n_ff, n_embd}
  Tensor ffn_post_norm;   ///< {n_embd} f32, optional (gemma): RMSNorm of the FFN output
  // A mixture-of-experts FFN (ArchSpec::moe) instead of ffn_gate / ffn_up / ffn_down:
  Tensor ffn_gate_inp;     ///< {n_embd, n_expert} router
  Tensor ffn_gate_exps;    ///< {n_embd, n_ff_exp, n_expert}: one gate matrix per expert
  Tensor ffn_up_exps;      ///< {n_embd, n_ff_exp, n_expert}
  Tensor ffn_down_exps;    ///< {n_ff_exp, n_embd, n_expert}
  Tensor ffn_gate_inp_b;   ///< {n_expert} f32, optional: router bias (gpt-oss)
  Tensor ffn_gate_exps_b;  ///< {n_ff_exp, n_expert} f32, optional: one bias row per expert
  Tensor ffn_up_exps_b;    ///< {n_ff_exp, n_expert} f32, optional
  Tensor ffn_down_exps_b;  ///< {n_embd, n_expert} f32, optional
  Tensor ffn_exp_probs_b;  ///< {n_expert} f32, optional: expert selection bias (DeepSeek-V3)
  Tensor ffn_gate_shexp;   ///< {n_embd, n_ff_exp · n_expert_shared}: shared experts (deepseek2)
  Tensor ffn_up_shexp;     ///< {n_embd, n_ff_exp · n_expert_shared}
  Tensor ffn_down_shexp;   ///< {n_ff_exp · n_expert_shared, n_embd}
  // Multi-head latent attention (ArchSpec::mla, models/deepseek2.cpp) instead of wq/wk/wv;
  // nope = head_dim − n_rot, r = kv_lora_rank:
  Tensor wq_a;       ///< {n_embd, q_lora_rank} (with q_lora_rank; then wq is absent)
  Tensor q_a_norm;   ///< {q_lora_rank} f32
  Tensor wq_b;       ///< {q_lora_rank, n_head · head_dim}
  Tensor wkv_a;      ///< {n_embd, r + n_rot}: the latent, then the shared RoPE key part
  Tensor kv_a_norm;  ///< {r} f32
  /// {nope, r, n_head}: per head the transpose of attn_kv_b's K rows (built at load; Q8_0 for
  /// a quantized attn_kv_b, as ik_llama.cpp's attn_k_b), which takes q_nope into latent space
  Tensor wk_b;
  Tensor wv_b;  ///< {r, head_dim_v, n_head}: per head attn_kv_b's V rows (built at load)
  // An encoder block (ArchSpec::encoder, models/bert.h), post-LayerNorm (and bo above):
  Tensor attn_out_norm;     ///< {n_embd} f32 LayerNorm of x + attention (attn_output_norm)
  Tensor attn_out_norm_b;   ///< {n_embd} f32 its bias
  Tensor ffn_up_b;          ///< {n_ff} f32 (bert)
  Tensor ffn_down_b;        ///< {n_embd} f32 (bert)
  Tensor layer_out_norm;    ///< {n_embd} f32 LayerNorm of the FFN's input + output
  Tensor layer_out_norm_b;  ///< {n_embd} f32 its bias
};

/// All weights of a llama-family model: views into the mapped GGUF file (zero-copy) until
/// upload_llama_weights points them at device copies (and, for an untied token embedding read
/// from a file, at a host copy in `derived`).
struct LlamaWeights {
  Tensor tok_embd;     ///< {n_embd, n_vocab}, any type (rows decoded on lookup)
  Tensor output_norm;  ///< {n_embd} f32
  Tensor output;       ///< {n_embd, n_vocab}; the same view as tok_embd when tied
  Tensor rope_freqs;   ///< {n_rot / 2} f32 per-pair frequency divisors (llama3 scaling), optional
  Tensor rope_short;   ///< {n_rot / 2} f32 LongRoPE divisors up to n_ctx_orig (phi3), optional
  Tensor rope_long;    ///< {n_rot / 2} f32 LongRoPE divisors past n_ctx_orig (phi3), optional
  // Encoders (models/bert.h); output_norm and output are then absent:
  Tensor type_embd;   ///< {n_embd, n_vocab_type} token-type rows (row 0 is added to every token)
  Tensor pos_embd;    ///< {n_embd, n_ctx_train} absolute position rows (bert), optional
  Tensor tok_norm;    ///< {n_embd} f32 LayerNorm of the summed embeddings (token_embd_norm)
  Tensor tok_norm_b;  ///< {n_embd} f32 its bias
  std::vector<LlamaLayer> layers;  ///< [n_layer]
  ArchSpec spec;                   ///< how the architecture runs the block
  /// YaRN's per-pair divisors (models/rope_scaling.h yarn_freq_divisors) when its ext_factor is
  /// not 0, else empty: [windowed layer][0 none, 1 rope_freqs, 2 rope_short, 3 rope_long], each
  /// {n_rot / 2} host f32 combining that tensor's divisors (1 when absent) with the ramp.
  std::vector<float> yarn_div[2][4];
  /// The devices' copies of the weights (upload_llama_weights; for the CPU the packed layout)
  /// that the tensors above point into.
  std::vector<std::unique_ptr<DeviceBuffer>> uploads;
  /// Host weights built at load rather than mapped from the file (MLA's wk_b / wv_b).
  std::vector<Buffer> derived;
  /// Whether `t`'s bytes are in `derived` (never given back as mapped file pages).
  bool is_derived(const Tensor& t) const;
};

/// Which device runs each part of the model, as llama.cpp's -ngl places layers: the token
/// embedding lookup on the host, layers 0 … n_layer − n_gpu − 1 on the host and the last n_gpu
/// on the GPU, the output norm and head on the GPU only when every layer is there
/// (n_gpu > n_layer, as llama.cpp counts the output as one more layer).
struct Placement {
  Device* input = nullptr;      ///< token embedding rows
  std::vector<Device*> layers;  ///< [n_layer] runs layer il
  std::vector<Device*> kv;      ///< [n_layer] holds layer il's KV rows (-nkvo: the host)
  /// [n_layer] runs layer il's FFN sub-block (its norm, dense FFN or router and experts, post
  /// norm) and holds its weights: the layer's device unless -ot moved it (apply_tensor_overrides).
  std::vector<Device*> ffn;
  Device* output = nullptr;  ///< output norm, head and soft-cap

  /// Every part on `host`.
  static Placement all_on(Device& host, int64_t n_layer);
  /// The last `n_gpu` layers (and the output when n_gpu > n_layer) on `gpu`, the rest on `host`;
  /// with !kv_offload the KV rows of GPU layers stay on the host (-nkvo).
  static Placement split(Device& host, Device& gpu, int64_t n_layer, int64_t n_gpu,
                         bool kv_offload);
  /// The distinct devices, host first.
  std::vector<Device*> devices() const;
};

/// Moves to `host` what the devices of `p` cannot run, as llama.cpp's scheduler runs an op its
/// GPU backend lacks on the CPU. For the model in `f` (hparams `hp`, spec `spec`): a layer whose
/// device, or whose KV rows' device, lacks what the layer needs — the weight type of one of its
/// attention matrices (Op::kMatmul of that type and row length), multi-head latent attention
/// (Op::kMla), attention sinks (Op::kAttnSinks), an encoder's layer_norm / gelu / attention —
/// runs wholly on `host`, KV rows included; a layer's FFN whose device lacks the weight type of
/// one of its matrices or the mixture-of-experts ops (Op::kMoeRoute, Op::kMatmulId) runs on
/// `host` while its attention stays (llama.cpp's --cpu-moe); an output head of a type its device
/// lacks runs on `host`. Returns one line per (device, what it lacks, part) naming the layers
/// moved, for stderr; empty when nothing moved. Apply it to -ngl's placement before the -ot
/// rules: an FFN a rule sends to a device that cannot run it stays a load error.
std::vector<std::string> fit_placement_to_devices(Placement& p, Device& host, const gguf::File& f,
                                                  const Hparams& hp, const ArchSpec& spec);

/// One -ot / --override-tensor rule (llama.cpp's `PATTERN=BUFFER_TYPE`): the tensors whose GGUF
/// name contains a match of the ECMAScript regex `pattern` (std::regex_search, as llama.cpp) go
/// to `device`.
struct TensorOverride {
  std::string pattern;
  Device* device = nullptr;
};

/// Applies -ot rules to `p` for the model in `f` (n_layer layers): each tensor takes the first
/// rule that matches its name. kvrun places by rule only the FFN tensors of a layer
/// (`blk.N.ffn_*`), and a layer's whole FFN sub-block runs where its matched tensors go (its
/// norm and router too: the usual `-ot "ffn_.*_exps=CPU"` moves layer N's MoE FFN to the
/// host while its attention and KV stay on the GPU). Throws ModelError naming the rule for: a
/// rule that matches no tensor, a match outside blk.N.ffn_* (use -ngl for whole layers), one
/// layer's FFN tensors sent to two devices, an encoder (bert) layer's FFN moved off its layer.
void apply_tensor_overrides(Placement& p, const gguf::File& f, int64_t n_layer, bool encoder,
                            const std::vector<TensorOverride>& rules);

/// The checks and matching of apply_tensor_overrides without a placement: per layer, the index
/// in `rules` of the rule that moves its FFN, or −1. Throws ModelError as apply_tensor_overrides
/// (all but the encoder check).
std::vector<int64_t> ffn_override_rules(const gguf::File& f, int64_t n_layer,
                                        const std::vector<TensorOverride>& rules);

/// The tensor `name` of `f` with shape {ne0} (ne1 == 0), {ne0, ne1} or {ne0, ne1, ne2} (ne2 > 1)
/// as a host view into the mapping; absent → a null view unless `required`. Throws ModelError
/// for a missing required tensor, another shape, or a 1-D tensor (norm, bias) that is not f32.
Tensor load_tensor(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   bool required = true, int64_t ne2 = 1);
/// load_tensor of a required matrix (or, ne2 > 1, ne2 expert matrices) that the host's matmul
/// can multiply by (every model runs on the host when -ngl is 0); ModelError when it cannot.
Tensor load_matrix(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   int64_t ne2 = 1);

/// Finds and checks every tensor of `hp`'s model (architecture `spec`) in `file` (host views into
/// the mapping). Throws ModelError naming a missing tensor, a tensor of the wrong shape, a
/// norm/bias that is not f32, or a weight type the CPU matmul cannot use.
LlamaWeights load_llama_weights(const gguf::File& file, const Hparams& hp, const ArchSpec& spec);

/// Uploads every weight of `w` to the device `p` places it on (Device::upload_weight: the CPU
/// packs the matrices its kernels have a packed layout for, cpu/pack.h; a GPU copies them into
/// its memory) and keeps the copies in w.uploads. The token embedding stays on the host (the
/// lookup runs on p.input): with `release_mapped` (only for weights in a read-only file
/// mapping) an untied one is copied into host memory (w.derived) and the host pages no device
/// reads any more are given back; a tied one stays a view (the output head's copy has its bytes).
/// Throws ModelError naming the tensor and device when a device does not support a weight's type.
/// Results are bit-identical with and without packing. `progress`, when set, is called after each
/// tensor with the weight bytes done and the total (the tensors' bytes in the file). Returns the
/// bytes uploaded.
size_t upload_llama_weights(LlamaWeights& w, const Placement& p, bool release_mapped,
                            const std::function<void(int64_t, int64_t)>& progress = {});

/// Activation buffers for up to `n_batch` tokens in one device's memory, reused across calls.
class LlamaScratch {
 public:
  LlamaScratch(const Hparams& hp, int64_t n_batch, Device& dev);
  int64_t n_batch;
  float* x = nullptr;     ///< [n_batch, n_embd] residual stream
  float* xn = nullptr;    ///< [n_batch, n_embd] normalized input of a sub-block
  float* q = nullptr;     ///< [n_batch, n_head · head_dim]
  float* k = nullptr;     ///< [n_batch, n_head_kv · head_dim]
  float* v = nullptr;     ///< [n_batch, n_head_kv · head_dim_v]
  float* att = nullptr;   ///< [n_batch, n_head · head_dim_v]
  float* proj = nullptr;  ///< [n_batch, n_embd] output of attn_output / ffn_down
  float* gate = nullptr;  ///< [n_batch, n_ff]
  float* up = nullptr;    ///< [n_batch, n_ff]
  /// `n` floats of the named growable buffer (the fused QKV / gate-up output of phi3, logits
  /// rows; a MoE layer's router rows and its experts' gate and up outputs), grown on first need
  /// and kept.
  float* grow(int which, int64_t n);
  static constexpr int kFused = 0, kLogits = 1, kMoeRoute = 2, kMoeGate = 3, kMoeUp = 4;
  /// A MoE layer's shared experts (gate, up, output); MLA's buffers (models/deepseek2.cpp).
  static constexpr int kShexpGate = 5, kShexpUp = 6, kShexpOut = 7, kMlaQLora = 8, kMlaKva = 9,
                       kMlaLatent = 10, kMlaKRow = 11, kMlaQNope = 12, kMlaQAbs = 13,
                       kMlaQuery = 14, kMlaOut = 15, kMlaIds = 16, kMlaKvK = 17, kMlaKvQ = 18,
                       kMlaKvOut = 19;
  /// Attention states by KV tier (Backend::paged_attention_part, --kv-host-attn cpu).
  static constexpr int kAttnPart = 20, kAttnPart2 = 21, kNumGrown = 22;

 private:
  Device& dev_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
  std::unique_ptr<DeviceBuffer> grown_[kNumGrown];
};

/// The seam's gated unit for an architecture's FFN activation.
inline GluKind glu_kind(FfnAct a) {
  return a == FfnAct::GeluTanh  ? GluKind::kGeGlu
         : a == FfnAct::SiluOai ? GluKind::kSwiGluOai
                                : GluKind::kSwiGlu;
}

/// out (the FFN output [n, n_embd]) = the mixture-of-experts FFN of layer L over its input
/// xn [n, n_embd] (models/moe.cpp): router logits (+ bias), Backend::moe_route, the experts'
/// gate and up (Backend::matmul_id, + their biases), SwiGLU (gpt-oss: clamped), their down
/// projections (+ bias) summed with the router weights.
void moe_ffn(const Hparams& hp, const ArchSpec& spec, const LlamaLayer& L, Backend& be,
             LlamaScratch& s, const float* xn, int64_t n, float* out);

struct LlamaBatch;

/// x += the multi-head latent attention sub-block of layer il (DeepSeek-V2 §2.1, absorbed: Q's
/// no-RoPE part through wk_b into latent space, attention over the cached latent + RoPE rows
/// with one KV head, its output through wv_b; models/deepseek2.cpp) over the batch's n rows on
/// backend `be`, its KV store and attention on `kv_be` (another device's with -nkvo).
void mla_attention_block(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be,
                         LlamaScratch& s, Backend& kv_be, LlamaScratch& kv_s, const LlamaBatch& b,
                         int64_t n);

/// Loads layer il's MLA attention tensors (attn_q or attn_q_a + attn_q_a_norm + attn_q_b,
/// attn_kv_a_mqa, attn_kv_a_norm, attn_kv_b) into L and builds wk_b / wv_b from attn_kv_b
/// (kept in w.derived). Throws ModelError naming a missing or misshapen tensor.
void load_mla_attention(const gguf::File& f, const Hparams& hp, LlamaWeights& w, LlamaLayer& L,
                        int64_t il);

/// The RoPE of layer il as the model runs it (base, scaling, frequency divisors, YaRN's mscale)
/// for a context of n_ctx positions.
RopeConfig layer_rope(const Hparams& hp, const LlamaWeights& w, int64_t il, int64_t n_ctx);

/// The backends one engine runs a model's forward on (one per device of the placement, each with
/// its scratch), owned by the engine (engine/step.h), so that two engines never share a stream.
class LlamaExec {
 public:
  /// Backends with `n_threads` each (the CPU's; 0: physical cores) for `p`'s devices.
  LlamaExec(const Hparams& hp, const Placement& p, int n_threads, int64_t n_batch);
  ~LlamaExec();
  /// The backend and scratch of device `d` (one of the placement's).
  Backend& backend(const Device* d) const;
  LlamaScratch& scratch(const Device* d) const;
  /// Hands the step's page table to every backend.
  void begin_step(const PageTable& pt);
  int n_threads() const;
  int64_t n_batch() const { return n_batch_; }

 private:
  struct Part;
  std::vector<std::unique_ptr<Part>> parts_;
  int64_t n_batch_;
  const Part& part(const Device* d) const;
};

/// One forward call over the rows of a step: the tokens of one or more sequences as the page
/// table describes them (row r of sequence i sits at position pt.pos[r]).
struct LlamaBatch {
  const int32_t* tokens = nullptr;    ///< host [pt.n_tokens] ids in [0, n_vocab)
  const PageTable* pt = nullptr;      ///< the step's rows and block tables
  const int32_t* out_rows = nullptr;  ///< host [n_out] rows whose logits are wanted, ascending
  int64_t n_out = 0;                  ///< may be 0
  float* logits = nullptr;            ///< host [n_out, n_vocab] (written)
  /// When set: host [n_out, n_embd], the output-normed hidden states of out_rows (what the head
  /// would multiply; llama.cpp's embeddings), written instead of the logits (logits unused).
  float* embd = nullptr;
  const KvLayer* kv = nullptr;  ///< [n_layer] paged KV storage of each layer
  /// --kv-host-attn cpu, in a step that reads a block of a GPU layer's host tier: [n_layer] the
  /// layers' host tiers as the host addresses them (KvCache::host_tier_layer; k_slow null for a
  /// layer without one). Attention over those blocks then runs on the host's backend and is
  /// merged with the device's over its own blocks (kv_attention). Null: devices read them.
  const KvLayer* kv_host = nullptr;
  bool flash = false;   ///< online softmax (see PagedAttnParams)
  bool rotate = false;  ///< K stored Hadamard-rotated (--kv-rotate)
  int64_t n_ctx = 0;    ///< context per sequence; above rope.n_ctx_orig phi3 uses rope_long
};

/// Runs the batch through the model on the placement's backends: writes the K/V rows of every
/// row in every layer and the logits of out_rows. The residual stream is copied once at each
/// device boundary. The caller has reserved the blocks of every row's position. A batch of one
/// sequence computes exactly what a single-sequence call did; with several sequences the exact
/// attention may sum in another order. pt.n_tokens ≤ exec.n_batch(). Returns with every
/// backend's work of the step finished (also without outputs: the KV cache then reads or
/// copies the rows the step wrote through other backends — copy-on-write, tier moves, the
/// persistent prefix cache).
void llama_forward(const Hparams& hp, const LlamaWeights& w, const Placement& p, LlamaExec& exec,
                   const LlamaBatch& b);

}  // namespace kvrun

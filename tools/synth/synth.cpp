// synth.cpp — synthetic GGUF models (see synth.h).
#include "tools/synth/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>

#include "cpu/cpu_info.h"
#include "cpu/thread_pool.h"
#include "gguf.h"
#include "quants.h"
#include "tools/synth/synth_random.h"
#include "tools/synth/synth_vocab.h"

namespace kvrun {

namespace {

struct FileTypeRow {
  SynthFileType type;
  const char* name;
  DType base;      ///< the type of an ordinary matrix
  uint32_t ftype;  ///< general.file_type (llama_ftype)
};

constexpr FileTypeRow kFileTypes[] = {
    {SynthFileType::F32, "F32", DType::F32, 0},
    {SynthFileType::F16, "F16", DType::F16, 1},
    {SynthFileType::Q8_0, "Q8_0", DType::Q8_0, 7},
    {SynthFileType::Q4_0, "Q4_0", DType::Q4_0, 2},
    {SynthFileType::Q4_K, "Q4_K", DType::Q4_K, 14},
    {SynthFileType::Q5_K, "Q5_K", DType::Q5_K, 16},
    {SynthFileType::Q6_K, "Q6_K", DType::Q6_K, 18},
    {SynthFileType::IQ4_XS, "IQ4_XS", DType::IQ4_XS, 30},
    {SynthFileType::MXFP4, "MXFP4", DType::MXFP4, 38},
    {SynthFileType::IQ3_S, "IQ3_S", DType::IQ3_S, 26},
    {SynthFileType::IQ2_S, "IQ2_S", DType::IQ2_S, 28},
    {SynthFileType::IQ3_XXS, "IQ3_XXS", DType::IQ3_XXS, 23},
    {SynthFileType::IQ2_XXS, "IQ2_XXS", DType::IQ2_XXS, 19},
    {SynthFileType::IQ2_XS, "IQ2_XS", DType::IQ2_XS, 20},
    {SynthFileType::IQ1_S, "IQ1_S", DType::IQ1_S, 24},
    {SynthFileType::IQ1_M, "IQ1_M", DType::IQ1_M, 31},
};

const FileTypeRow& row_of(SynthFileType t) {
  for (const auto& r : kFileTypes)
    if (r.type == t) return r;
  return kFileTypes[0];
}

bool divides(DType t, int64_t ne0) { return ne0 % traits(t).block_elems == 0; }

/// llama.cpp's fallback when a row cannot hold whole blocks of `t` (see synth.h).
DType with_fallback(DType t, int64_t ne0) {
  if (divides(t, ne0)) return t;
  DType f = DType::F16;
  if (t == DType::Q4_K) f = DType::Q5_0;
  if (t == DType::Q5_K) f = DType::Q5_1;
  if (t == DType::Q6_K) f = DType::Q8_0;
  if (t == DType::IQ4_XS || (traits(t).quantized && !traits(t).from_float))
    f = DType::IQ4_NL;  // iq4_xs and the grid i-quants
  return divides(f, ne0) ? f : DType::F16;
}

/// The wanted (pre-fallback) type of matrix `role` of layer `il` (−1 outside the layers) of
/// shape `s`.
DType wanted_type(SynthFileType ft, const SynthShape& s, const std::string& role, int64_t il,
                  int64_t ne0) {
  const DType base = row_of(ft).base;
  if (!traits(base).quantized) return base;
  if (role == "ffn_gate_inp") return DType::F32;  // llama-quantize keeps MoE routers as they are
  if (s.gpt_oss && ft == SynthFileType::MXFP4)    // as released: MXFP4 experts, Q8_0 elsewhere
    return role.ends_with("_exps") ? DType::MXFP4 : DType::Q8_0;
  const int64_t n_layer = s.n_layer;
  if (role == "output") {  // the output head (or the tied embedding serving as it)
    if (!divides(base, ne0)) return DType::Q8_0;
    return base == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
  }
  if (ft == SynthFileType::Q4_K) {  // llama.cpp's Q4_K_S recipe
    if (role == "attn_v" && il < 4) return DType::Q5_K;
    if ((role == "ffn_down" || role == "ffn_down_exps") && il < n_layer / 8) return DType::Q5_K;
  }
  return base;
}

/// Row `r` of grid i-quant tensor `t` as random valid blocks whose RMS is about t.sd: with
/// uniform random scale codes and grid entries, a value's RMS is ≈ 107·d_mag (iq3_s: d·(1 + 2s)·g)
/// or ≈ 43·d_mag (iq2_s: d·(0.5 + s)/4·g), ≈ 109·d_mag (iq3_xxs: d·(0.5 + s)/2·g), ≈ 41·d_mag
/// (iq2_xxs), ≈ 43·d_mag (iq2_xs) and ≈ 5.5·d_mag (iq1_s, iq1_m: d·(2s + 1)·(grid ± 1/8)), d =
/// d_mag·u with u uniform in [0.5, 1) (computed over the grids' values).
void random_iq_row(const SynthTensor& t, uint64_t key, int64_t r, uint8_t* dst) {
  float per_d = 43.0f;  // iq2_s, iq2_xs
  if (t.type == DType::IQ3_S) per_d = 107.0f;
  if (t.type == DType::IQ3_XXS) per_d = 109.0f;
  if (t.type == DType::IQ2_XXS) per_d = 41.0f;
  if (t.type == DType::IQ1_S || t.type == DType::IQ1_M) per_d = 5.5f;
  const uint32_t seed = uint32_t(key ^ (key >> 32) ^ (uint64_t(r) * 0x9E3779B97F4A7C15ull >> 17));
  fill_random_iq_blocks(t.type, t.sd / per_d, seed, dst, t.ne[0]);
}

bool is_encoder_shape(const SynthShape& s) { return s.arch == "bert" || s.arch == "nomic-bert"; }

constexpr uint64_t kAlignment = 32;  // GGUF's default general.alignment (not written)
constexpr size_t kChunkBytes = size_t(32) << 20;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t tensor_bytes(const SynthTensor& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
  return uint64_t(*row_bytes(t.type, t.ne[0])) * uint64_t(rows);
}

/// An output file written under a temporary name and renamed into place by commit(); removed
/// if not committed.
class TempFile {
 public:
  explicit TempFile(const std::string& path)
      : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw SynthError("cannot create " + tmp_ + ": " + std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw SynthError("cannot write " + tmp_ + ": " + std::strerror(w < 0 ? errno : EIO));
      b += w;
      n -= size_t(w);
    }
  }
  void zeros(uint64_t n) {
    static const uint8_t kZeros[64] = {};
    while (n > 0) {
      const size_t k = size_t(std::min<uint64_t>(n, sizeof kZeros));
      write(kZeros, k);
      n -= k;
    }
  }
  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw SynthError("cannot write " + tmp_ + ": " + std::strerror(errno));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw SynthError("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_metadata(gguf::Writer& w, const SynthParams& p) {
  const SynthShape& s = *p.shape;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "synthetic " + s.name);
  w.set_string("general.description", "random weights made by kvrun synth (shape " + s.name +
                                          ", seed " + std::to_string(p.seed) +
                                          "); not a trained model");
  w.set_u32("general.file_type", synth_llama_ftype(p.type));
  if (p.type != SynthFileType::F32 && p.type != SynthFileType::F16)
    w.set_u32("general.quantization_version", 2);
  w.set_string("kvrun.synth.shape", s.name);
  w.set_u64("kvrun.synth.seed", p.seed);
  w.set_u32(a + "context_length", uint32_t(s.n_ctx_train));
  w.set_u32(a + "embedding_length", uint32_t(s.n_embd));
  w.set_u32(a + "block_count", uint32_t(s.n_layer));
  w.set_u32(a + "feed_forward_length", uint32_t(s.n_ff));
  w.set_u32(a + "attention.head_count", uint32_t(s.n_head));
  w.set_u32(a + "attention.head_count_kv", uint32_t(s.n_head_kv));
  w.set_u32(a + "attention.key_length", uint32_t(s.head_dim));
  w.set_u32(a + "attention.value_length", uint32_t(s.head_dim_v > 0 ? s.head_dim_v : s.head_dim));
  w.set_u32(a + "rope.dimension_count", uint32_t(s.qk_rope > 0 ? s.qk_rope : s.head_dim));
  w.set_f32(a + "rope.freq_base", float(s.rope_theta));
  if (is_encoder_shape(s)) {  // llama.cpp's bert / nomic-bert keys (src/llama-hparams.cpp)
    w.set_f32(a + "attention.layer_norm_epsilon", float(s.norm_eps));
    w.set_bool(a + "attention.causal", false);
    w.set_u32(a + "pooling_type", uint32_t(s.pooling_type));
  } else {
    w.set_f32(a + "attention.layer_norm_rms_epsilon", float(s.rms_eps));
  }
  w.set_u32(a + "vocab_size", uint32_t(s.n_vocab));
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", uint32_t(s.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(s.n_ff_exp));
  }
  if (s.kv_lora_rank > 0) {  // llama.cpp's deepseek2 keys (gguf-py constants.py)
    w.set_u32(a + "attention.kv_lora_rank", uint32_t(s.kv_lora_rank));
    if (s.q_lora_rank > 0) w.set_u32(a + "attention.q_lora_rank", uint32_t(s.q_lora_rank));
    w.set_u32(a + "leading_dense_block_count", uint32_t(s.n_dense_lead));
    w.set_u32(a + "expert_shared_count", uint32_t(s.n_expert_shared));
    w.set_f32(a + "expert_weights_scale", float(s.expert_weights_scale));
    // llama.cpp's LLM_EXPERT_GATING_FUNC_SOFTMAX (1) or _SIGMOID (2)
    w.set_u32(a + "expert_gating_func", s.sigmoid_gating ? 2 : 1);
    if (s.expert_weights_norm) w.set_bool(a + "expert_weights_norm", true);
    if (s.n_expert_group > 1) {
      w.set_u32(a + "expert_group_count", uint32_t(s.n_expert_group));
      w.set_u32(a + "expert_group_used_count", uint32_t(s.n_expert_group_used));
    }
  }
  if (s.yarn_log_mul > 0) w.set_f32(a + "rope.scaling.yarn_log_multiplier", float(s.yarn_log_mul));
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", uint32_t(s.sliding_window));
  if (s.attn_softcap > 0) w.set_f32(a + "attn_logit_softcapping", float(s.attn_softcap));
  if (s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", float(s.final_softcap));
  if (s.linear_rope_factor > 0) {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", float(s.linear_rope_factor));
  }
  if (s.yarn_factor > 0) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", float(s.yarn_factor));
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(s.yarn_n_ctx_orig));
  }
  if (s.longrope_n_ctx_orig > 0) {
    const double scale = double(s.n_ctx_train) / double(s.longrope_n_ctx_orig);
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(s.longrope_n_ctx_orig));
    w.set_f32(a + "rope.scaling.attn_factor",
              float(std::sqrt(1 + std::log(scale) / std::log(double(s.longrope_n_ctx_orig)))));
  }
}

/// The tensors of an encoder shape (llama.cpp's bert / nomic-bert names, models/bert.h) through
/// synth_tensor_plan's `matrix` and `vector` makers: token_types and position_embd stay F32 in
/// every file type (llama-quantize never quantizes them); LayerNorm weights 1 + 0.1·N(0,1),
/// biases 0.1·N(0,1).
template <class Matrix, class Vector>
void encoder_tensor_plan(const SynthShape& s, std::vector<SynthTensor>& plan, Matrix& matrix,
                         Vector& vector) {
  constexpr float kNormSd = 0.1f, kBiasSd = 0.1f;
  const bool bert = s.arch == "bert";
  const int64_t d = s.n_embd, nq = s.n_head * s.head_dim, nkv = s.n_head_kv * s.head_dim;
  auto kept_f32 = [&](const std::string& name, int64_t rows) {
    SynthTensor t;
    t.name = name;
    t.ne = {d, rows};
    t.sd = float(1.0 / std::sqrt(double(d)));
    plan.push_back(std::move(t));
  };
  matrix("token_embd.weight", "token_embd", -1, d, s.n_vocab);
  kept_f32("token_types.weight", 2);
  if (bert) kept_f32("position_embd.weight", s.n_ctx_train);
  vector("token_embd_norm.weight", d, 1.0f, kNormSd);
  vector("token_embd_norm.bias", d, 0.0f, kBiasSd);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    if (bert) {
      for (const char* r : {"attn_q", "attn_k", "attn_v"}) {
        const int64_t rows = r[5] == 'q' ? nq : nkv;
        matrix(p + r + ".weight", r, il, d, rows);
        vector(p + r + ".bias", rows, 0.0f, kBiasSd);
      }
    } else {
      matrix(p + "attn_qkv.weight", "attn_qkv", il, d, nq + 2 * nkv);
    }
    matrix(p + "attn_output.weight", "attn_output", il, nq, d);
    if (bert) vector(p + "attn_output.bias", d, 0.0f, kBiasSd);
    vector(p + "attn_output_norm.weight", d, 1.0f, kNormSd);
    vector(p + "attn_output_norm.bias", d, 0.0f, kBiasSd);
    matrix(p + "ffn_up.weight", "ffn_up", il, d, s.n_ff);
    if (bert) vector(p + "ffn_up.bias", s.n_ff, 0.0f, kBiasSd);
    if (!bert) matrix(p + "ffn_gate.weight", "ffn_gate", il, d, s.n_ff);
    matrix(p + "ffn_down.weight", "ffn_down", il, s.n_ff, d);
    if (bert) vector(p + "ffn_down.bias", d, 0.0f, kBiasSd);
    vector(p + "layer_output_norm.weight", d, 1.0f, kNormSd);
    vector(p + "layer_output_norm.bias", d, 0.0f, kBiasSd);
  }
}

/// The layers of a deepseek2 shape (llama.cpp's tensor names, src/llama-arch.cpp): MLA
/// attention (models/deepseek2.cpp), the first n_dense_lead FFNs dense, the others n_expert
/// experts (with sigmoid_gating their exp_probs_b.bias) plus n_expert_shared shared ones (one
/// SwiGLU of n_ff_exp · n_expert_shared).
template <class Matrix, class Vector>
void mla_tensor_plan(const SynthShape& s, Matrix& matrix, Vector& vector) {
  constexpr float kNormSd = 0.1f;
  const int64_t d = s.n_embd, nh = s.n_head, nope = s.head_dim - s.qk_rope;
  const int64_t r = s.kv_lora_rank, ff = s.n_ff_exp, ne = s.n_expert;
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vector(p + "attn_norm.weight", d, 1.0f, kNormSd);
    if (s.q_lora_rank > 0) {
      matrix(p + "attn_q_a.weight", "attn_q_a", il, d, s.q_lora_rank);
      vector(p + "attn_q_a_norm.weight", s.q_lora_rank, 1.0f, kNormSd);
      matrix(p + "attn_q_b.weight", "attn_q_b", il, s.q_lora_rank, nh * s.head_dim);
    } else {
      matrix(p + "attn_q.weight", "attn_q", il, d, nh * s.head_dim);
    }
    matrix(p + "attn_kv_a_mqa.weight", "attn_kv_a_mqa", il, d, r + s.qk_rope);
    vector(p + "attn_kv_a_norm.weight", r, 1.0f, kNormSd);
    matrix(p + "attn_kv_b.weight", "attn_kv_b", il, r, nh * (nope + s.head_dim_v));
    matrix(p + "attn_output.weight", "attn_output", il, nh * s.head_dim_v, d);
    vector(p + "ffn_norm.weight", d, 1.0f, kNormSd);
    if (il < s.n_dense_lead) {
      matrix(p + "ffn_gate.weight", "ffn_gate", il, d, s.n_ff);
      matrix(p + "ffn_up.weight", "ffn_up", il, d, s.n_ff);
      matrix(p + "ffn_down.weight", "ffn_down", il, s.n_ff, d);
      continue;
    }
    matrix(p + "ffn_gate_inp.weight", "ffn_gate_inp", il, d, ne);
    // The selection bias: N(0, 0.2²), against sigmoid scores of router logits near N(0, 1), so
    // it changes some choices.
    if (s.sigmoid_gating) vector(p + "exp_probs_b.bias", ne, 0.0f, 0.2f);
    matrix(p + "ffn_gate_exps.weight", "ffn_gate_exps", il, d, ff, ne);
    matrix(p + "ffn_up_exps.weight", "ffn_up_exps", il, d, ff, ne);
    matrix(p + "ffn_down_exps.weight", "ffn_down_exps", il, ff, d, ne);
    const int64_t fs = ff * s.n_expert_shared;
    matrix(p + "ffn_gate_shexp.weight", "ffn_gate_shexp", il, d, fs);
    matrix(p + "ffn_up_shexp.weight", "ffn_up_shexp", il, d, fs);
    matrix(p + "ffn_down_shexp.weight", "ffn_down_shexp", il, fs, d);
  }
}

}  // namespace

std::optional<SynthFileType> synth_file_type_from_name(std::string_view name) {
  for (const auto& r : kFileTypes) {
    const std::string_view n = r.name;
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char x, char y) {
          return std::tolower(static_cast<unsigned char>(x)) ==
                 std::tolower(static_cast<unsigned char>(y));
        }))
      return r.type;
  }
  return std::nullopt;
}

const char* synth_file_type_name(SynthFileType t) { return row_of(t).name; }

std::string synth_file_type_names() {
  std::string s;
  for (const auto& r : kFileTypes) s += std::string(s.empty() ? "" : ", ") + r.name;
  return s;
}

uint32_t synth_llama_ftype(SynthFileType t) { return row_of(t).ftype; }

std::vector<float> synth_rope_freq_factors(const SynthShape& s) {
  const SynthRopeScaling& r = s.rope_scaling;
  if (!(r.factor > 0)) return {};
  const double low_wavelen = double(r.n_ctx_orig) / r.low_freq_factor;
  const double high_wavelen = double(r.n_ctx_orig) / r.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < s.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(s.rope_theta, double(i) / double(s.head_dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1;
    } else if (wavelen > low_wavelen) {
      f = r.factor;
    } else {
      const double smooth = (double(r.n_ctx_orig) / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      f = 1 / ((1 - smooth) / r.factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

std::vector<SynthTensor> synth_tensor_plan(const SynthShape& s, SynthFileType ft) {
  std::vector<SynthTensor> plan;
  const int64_t d = s.n_embd, nq = s.n_head * s.head_dim, nkv = s.n_head_kv * s.head_dim;
  auto matrix = [&](const std::string& name, const std::string& role, int64_t il, int64_t ne0,
                    int64_t ne1, int64_t ne2 = 0) {
    SynthTensor t;
    t.name = name;
    t.wanted = wanted_type(ft, s, role, il, ne0);
    t.type = with_fallback(t.wanted, ne0);
    t.ne = {ne0, ne1};
    if (ne2 > 0) t.ne.push_back(ne2);
    t.sd = float(1.0 / std::sqrt(double(ne0)));
    if (role == "ffn_gate_exps" || role == "ffn_up_exps") t.sd *= float(s.expert_gain);
    plan.push_back(std::move(t));
  };
  // F32 vectors (ne1 == 0) and f32 rows of one bias per expert (ne1 = n_expert).
  auto vector = [&](const std::string& name, int64_t n, float mean, float sd, int64_t ne1 = 0) {
    SynthTensor t;
    t.name = name;
    t.ne = {n};
    if (ne1 > 0) t.ne.push_back(ne1);
    t.mean = mean;
    t.sd = sd;
    plan.push_back(std::move(t));
  };
  constexpr float kNormSd = 0.1f, kBiasSd = 0.1f;
  if (is_encoder_shape(s)) {
    encoder_tensor_plan(s, plan, matrix, vector);
    return plan;
  }
  matrix("token_embd.weight", s.tied ? "output" : "token_embd", -1, d, s.n_vocab);
  vector("output_norm.weight", d, 1.0f, kNormSd);
  if (!s.tied) matrix("output.weight", "output", -1, d, s.n_vocab);
  if (std::vector<float> f = synth_rope_freq_factors(s); !f.empty()) {
    vector("rope_freqs.weight", int64_t(f.size()), 0, 0);
    plan.back().values = std::move(f);
  }
  if (s.longrope_n_ctx_orig > 0) {  // LongRoPE divisors: short ones near 1, long ones growing
    const int64_t half = s.head_dim / 2;
    vector("rope_factors_long.weight", half, 0, 0);
    for (int64_t i = 0; i < half; ++i) plan.back().values.push_back(1.0f + 0.5f * float(i));
    vector("rope_factors_short.weight", half, 0, 0);
    for (int64_t i = 0; i < half; ++i) plan.back().values.push_back(1.0f + 0.03125f * float(i));
  }
  if (s.kv_lora_rank > 0) {
    mla_tensor_plan(s, matrix, vector);
    return plan;
  }
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vector(p + "attn_norm.weight", d, 1.0f, kNormSd);
    if (s.fused) {
      matrix(p + "attn_qkv.weight", "attn_qkv", il, d, nq + 2 * nkv);
    } else {
      matrix(p + "attn_q.weight", "attn_q", il, d, nq);
      matrix(p + "attn_k.weight", "attn_k", il, d, nkv);
      matrix(p + "attn_v.weight", "attn_v", il, d, nkv);
    }
    if (s.qkv_bias) {
      vector(p + "attn_q.bias", nq, 0, kBiasSd);
      vector(p + "attn_k.bias", nkv, 0, kBiasSd);
      vector(p + "attn_v.bias", nkv, 0, kBiasSd);
    }
    if (s.qk_norm) {
      vector(p + "attn_q_norm.weight", s.head_dim, 1.0f, kNormSd);
      vector(p + "attn_k_norm.weight", s.head_dim, 1.0f, kNormSd);
    }
    matrix(p + "attn_output.weight", "attn_output", il, nq, d);
    if (s.gpt_oss) {  // output bias, sink logits around 2 (so they take a visible share), and
                      // the FFN's norm under the name post_attention_norm
      vector(p + "attn_output.bias", d, 0, kBiasSd);
      vector(p + "attn_sinks.weight", s.n_head, 2.0f, 1.0f);
      vector(p + "post_attention_norm.weight", d, 1.0f, kNormSd);
    } else {
      if (s.post_norms) vector(p + "post_attention_norm.weight", d, 1.0f, kNormSd);
      vector(p + "ffn_norm.weight", d, 1.0f, kNormSd);
    }
    if (s.n_expert > 0) {  // llama.cpp's qwen3moe tensors (+ gpt-oss's biases)
      const int64_t ne = s.n_expert, ff = s.n_ff_exp;
      matrix(p + "ffn_gate_inp.weight", "ffn_gate_inp", il, d, ne);
      matrix(p + "ffn_gate_exps.weight", "ffn_gate_exps", il, d, ff, ne);
      matrix(p + "ffn_up_exps.weight", "ffn_up_exps", il, d, ff, ne);
      matrix(p + "ffn_down_exps.weight", "ffn_down_exps", il, ff, d, ne);
      if (s.gpt_oss) {
        vector(p + "ffn_gate_inp.bias", ne, 0, kBiasSd);
        vector(p + "ffn_gate_exps.bias", ff, 0, kBiasSd, ne);
        vector(p + "ffn_up_exps.bias", ff, 0, kBiasSd, ne);
        vector(p + "ffn_down_exps.bias", d, 0, kBiasSd, ne);
      }
      continue;
    }
    if (!s.fused) matrix(p + "ffn_gate.weight", "ffn_gate", il, d, s.n_ff);
    matrix(p + "ffn_up.weight", "ffn_up", il, d, s.fused ? 2 * s.n_ff : s.n_ff);
    matrix(p + "ffn_down.weight", "ffn_down", il, s.n_ff, d);
    if (s.post_norms) vector(p + "post_ffw_norm.weight", d, 1.0f, kNormSd);
  }
  return plan;
}

SynthResult write_synth_model(const SynthParams& p) {
  if (!p.shape) throw SynthError("no shape given");
  const auto t0 = std::chrono::steady_clock::now();
  const SynthShape& s = *p.shape;

  // Metadata first: everything that can fail on the inputs fails before a file is created.
  gguf::Writer w;
  write_metadata(w, p);
  if (p.vocab_from.empty() && is_encoder_shape(s)) {
    synth_wordpiece_vocab(w, s.n_vocab);
  } else if (p.vocab_from.empty()) {
    synth_minimal_vocab(w, s.n_vocab, s.arch);
  } else {
    int64_t n_tokens = 0;
    try {
      const gguf::File vf = gguf::File::open_metadata_only(p.vocab_from);
      n_tokens = synth_copy_vocab(vf, w);
    } catch (const SynthError&) {
      throw;
    } catch (const std::exception& e) {
      throw SynthError(p.vocab_from + ": " + e.what());
    }
    if (n_tokens != s.n_vocab)
      throw SynthError(p.vocab_from + " has " + std::to_string(n_tokens) + " tokens, shape " +
                       s.name + " needs " + std::to_string(s.n_vocab));
  }

  const std::vector<SynthTensor> plan = synth_tensor_plan(s, p.type);
  SynthResult res;
  res.n_tensors = plan.size();
  for (const SynthTensor& t : plan) {
    w.add_tensor(t.name, t.type, t.ne, nullptr);  // infos only; the data is streamed below
    if (t.type != t.wanted) ++res.n_fallback;
  }
  const std::vector<uint8_t> header = w.to_bytes();  // ends padded to the alignment
  uint64_t total = header.size();
  for (const SynthTensor& t : plan) total += align_up(tensor_bytes(t), kAlignment);

  TempFile out(p.out_path);
  out.write(header.data(), header.size());
  uint64_t done = header.size();

  cpu::ThreadPool pool(p.n_threads > 0 ? p.n_threads : cpu::physical_cores());
  std::vector<uint8_t> buf;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const SynthTensor& t = plan[ti];
    const int64_t ne0 = t.ne[0];
    int64_t rows = 1;
    for (size_t dd = 1; dd < t.ne.size(); ++dd) rows *= t.ne[dd];
    const size_t rb = size_t(*row_bytes(t.type, ne0));
    const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunkBytes / rb));
    const uint64_t key = synth_random::tensor_key(p.seed, t.name);
    const FromFloatFn quantize = traits(t.type).from_float;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      if (p.cancel && p.cancel->load()) throw SynthError("interrupted");
      const int64_t nr = std::min(chunk_rows, rows - r0);
      buf.resize(size_t(nr) * rb);
      pool.run(nr, [&](int64_t begin, int64_t end) {
        thread_local std::vector<float> row;
        row.resize(size_t(ne0));
        for (int64_t r = begin; r < end; ++r) {
          const uint64_t base = uint64_t(r0 + r) * uint64_t(ne0);
          if (!t.values.empty()) {
            std::copy_n(t.values.begin() + int64_t(base), ne0, row.begin());
          } else {
            for (int64_t c = 0; c < ne0 && quantize; ++c)
              row[size_t(c)] = t.mean + t.sd * synth_random::normal(key, base + uint64_t(c));
          }
          if (quantize)
            quantize(row.data(), buf.data() + size_t(r) * rb, ne0);
          else  // grid i-quants: random valid blocks (synth.h), no quantizer
            random_iq_row(t, key, r0 + r, buf.data() + size_t(r) * rb);
        }
      });
      out.write(buf.data(), buf.size());
      done += buf.size();
      if (p.progress) {
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        p.progress({ti, plan.size(), t.name, done, total, sec});
      }
    }
    const uint64_t nb = tensor_bytes(t);
    out.zeros(align_up(nb, kAlignment) - nb);
    done += align_up(nb, kAlignment) - nb;
  }
  out.commit();
  res.file_bytes = total;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace kvrun

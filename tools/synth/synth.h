// synth.h — synthetic models: GGUF files of a real model's shape with random weights.
//
// A synthetic file has the metadata and tensor names/shapes of a real model (synth_shapes.h) so
// that kvrun and llama.cpp load and run it, and random weights scaled so activations stay in a
// realistic range. It measures speed and memory, never quality.
//
// Weights (deterministic from the seed, synth_random.h): every matrix ~ N(0, 1/fan_in) with
// fan_in = ne0 (its row length, the matmul's input size), so each matmul output has about the
// variance of its input; token_embd the same (1/n_embd; as the tied output head this gives
// logits of standard deviation ≈ 1); RMSNorm weights 1 + 0.1·N(0,1); Q/K/V biases 0.1·N(0,1);
// rope_freqs (llama3 scaling) computed exactly as llama.cpp's converter defines it; gpt-oss's
// output, router and expert biases 0.1·N(0,1) and attention sinks 2 + N(0,1).
//
// Tensor types per file type (llama.cpp's llama-quantize conventions, src/llama-quant.cpp at
// c392e509, restated): 1-D tensors (norms, biases, rope_freqs, sinks) and gpt-oss's per-expert
// bias rows are F32, MoE routers (ffn_gate_inp) F32 in quantized files; a gpt-oss shape in an
// MXFP4 file has MXFP4 experts and every other matrix Q8_0 (SynthShape::gpt_oss).
// F32/F16/Q8_0/Q6_K: every matrix in that type. Q4_0: every matrix Q4_0 except the output head
// (output.weight, or token_embd.weight when tied), which is Q6_K. Q4_K: llama.cpp's Q4_K_S recipe:
// output head Q6_K, attn_v of layers 0–3 and ffn_down of layers < n_layer/8 Q5_K, every other
// matrix Q4_K. Q5_K: every matrix Q5_K except the output head, which is Q6_K (kvrun's own simple
// recipe, named MOSTLY_Q5_K_S in general.file_type; llama.cpp's Q5_K_M bumps more matrices to
// Q6_K). A quantized output head whose row length is not a multiple of the file type's block
// is Q8_0. A row length that is not a multiple of 256 cannot hold K-quant super-blocks: as
// llama.cpp does, Q4_K falls back to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and any type whose block
// does not divide the row to F16 (e.g. every n_embd-wide matrix of qwen2.5-0.5b, whose n_embd is
// 896).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dtype.h"
#include "tools/synth/synth_shapes.h"

namespace kvrun {

/// A synthetic model cannot be made (unknown vocab file, vocab size mismatch, unwritable path,
/// interrupted). what() is one line.
class SynthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The weight type of a whole file (what --type takes).
/// IQ3_S, IQ2_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ1_S and IQ1_M have no kvrun
/// quantizer: their matrices are random
/// valid blocks (random grid indices, signs and scales; quants.h fill_random_iq_blocks) whose RMS
/// is about the tensor's sd, not a quantization of the normal values the other types encode.
enum class SynthFileType {
  F32,
  F16,
  Q8_0,
  Q4_0,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_XS,
  MXFP4,
  IQ3_S,
  IQ2_S,
  IQ3_XXS,
  IQ2_XXS,
  IQ2_XS,
  IQ1_S,
  IQ1_M
};

/// Parses "F32", "f16", "Q4_K", "q4_k"… (case-insensitive); nullopt for anything else.
std::optional<SynthFileType> synth_file_type_from_name(std::string_view name);
/// "F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4", "IQ3_S", "IQ2_S",
/// "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M".
const char* synth_file_type_name(SynthFileType t);
/// Every name synth_file_type_from_name knows, comma-separated (for help and errors).
std::string synth_file_type_names();
/// The `general.file_type` value (llama.cpp's llama_ftype: 0 ALL_F32, 1 MOSTLY_F16,
/// 7 MOSTLY_Q8_0, 2 MOSTLY_Q4_0, 14 MOSTLY_Q4_K_S, 16 MOSTLY_Q5_K_S, 18 MOSTLY_Q6_K, 30
/// MOSTLY_IQ4_XS, 38 MOSTLY_MXFP4, 26 MOSTLY_IQ3_S, 28 MOSTLY_IQ2_S, 23 MOSTLY_IQ3_XXS, 19
/// MOSTLY_IQ2_XXS, 20 MOSTLY_IQ2_XS, 24 MOSTLY_IQ1_S, 31 MOSTLY_IQ1_M).
uint32_t synth_llama_ftype(SynthFileType t);

/// One tensor of a synthetic model and how its values are made.
struct SynthTensor {
  std::string name;           ///< GGUF tensor name, e.g. "blk.0.attn_q.weight"
  DType type = DType::F32;    ///< stored type (after llama.cpp's fallback rules)
  DType wanted = DType::F32;  ///< type before the fallback (== type when none was needed)
  std::vector<int64_t> ne;    ///< GGUF shape, ne[0] innermost
  float mean = 0;             ///< value = mean + sd · N(0,1) …
  float sd = 0;
  std::vector<float> values;  ///< … unless given explicitly here (rope_freqs)
};

/// The tensors of `shape` in file type `type`, in file order (token_embd, output_norm, output,
/// rope_freqs, then blk.0 … blk.N-1; for an encoder shape, bert or nomic-bert, the tensors of
/// models/bert.h instead), with their types, shapes and value distributions.
std::vector<SynthTensor> synth_tensor_plan(const SynthShape& shape, SynthFileType type);

/// The llama3 RoPE frequency factors (one per rotated pair, head_dim / 2 values) as llama.cpp's
/// convert_hf_to_gguf.py computes them for rope_type "llama3": wavelength 2π/f of each base
/// frequency f = θ^(−2i/d); factor 1 below orig_ctx/high_freq_factor, `factor` above
/// orig_ctx/low_freq_factor, smooth interpolation in between. Empty when the shape has none.
std::vector<float> synth_rope_freq_factors(const SynthShape& shape);

/// Progress of write_synth_model, reported after each chunk of rows.
struct SynthProgress {
  size_t tensor = 0;         ///< index of the tensor being written
  size_t n_tensors = 0;      ///< tensors in the file
  std::string_view name;     ///< its name
  uint64_t bytes_done = 0;   ///< file bytes written so far
  uint64_t bytes_total = 0;  ///< final file size
  double seconds = 0;        ///< since the start
};

/// What to make.
struct SynthParams {
  const SynthShape* shape = nullptr;
  SynthFileType type = SynthFileType::F16;
  std::string out_path;  ///< the file to write (written as out_path.tmp.PID, then renamed)
  /// GGUF whose tokenizer.* keys are copied ("" = the minimal vocabulary; a WordPiece one for
  /// encoder shapes, synth_vocab.h)
  std::string vocab_from;
  uint64_t seed = 42;  ///< weights are a function of (seed, tensor name, index) only
  int n_threads = 0;   ///< generator threads (0: physical cores); no effect on the bytes
  std::function<void(const SynthProgress&)> progress;  ///< optional
  const std::atomic<bool>* cancel = nullptr;  ///< optional: set → stop, remove the temp file
};

/// What was made.
struct SynthResult {
  uint64_t file_bytes = 0;
  size_t n_tensors = 0;
  size_t n_fallback = 0;  ///< matrices stored in a fallback type (rows not a block multiple)
  double seconds = 0;
};

/// Writes the synthetic GGUF v3 file, streaming: one chunk of rows (≤ 32 MiB) is generated and
/// quantized at a time (rows in parallel), so memory stays small for any shape. The result loads
/// with kvrun (llama arch) and llama.cpp. Everything that can fail before writing (vocab file
/// unreadable or without tokenizer.ggml.tokens, its token count ≠ shape.n_vocab) is checked
/// first. Throws SynthError; on any error nothing is left at out_path (an existing file there is
/// untouched) and the temporary file is removed.
SynthResult write_synth_model(const SynthParams& params);

}  // namespace kvrun

// model_info.h — what `kvrun info` reports about a GGUF model: hyperparameters, tokenizer, the
// quant mix of its weights, and the KV cache size for a context length per cache type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"
#include "gguf.h"
#include "models/hparams.h"

namespace kvrun {

/// Tensors of one dtype in a model.
struct QuantMixEntry {
  DType type;
  int64_t n_tensors = 0;
  int64_t bytes = 0;
};

/// KV cache size of one cache type (K and V both of that type) for a context length.
struct KvSizeEntry {
  DType type;
  int64_t bytes_per_token = 0;  ///< n_layer × (K row + V row), see kv_layout.h
  /// The global layers' rows: (n_layer − n_layer_window) × (K row + V row) × kv_tokens.
  int64_t bytes_global = 0;
  /// The windowed layers' rows with window tables: n_layer_window × (K row + V row) ×
  /// kv_window_tokens (0 without).
  int64_t bytes_window = 0;
  int64_t bytes_total = 0;      ///< bytes_global + bytes_window
  int64_t bytes_fast = 0;       ///< the part that fits the fast tier (plan_kv_tiers)
  int64_t bytes_offloaded = 0;  ///< the rest: what would go to the slow tier (--kv-offload-dir)
};

/// Everything `kvrun info` prints.
struct ModelInfo {
  std::string path;
  uint32_t gguf_version = 0;
  uint64_t file_bytes = 0;  ///< on disk, every part of a split model
  int split_count = 1;      ///< files of a split model (gguf-split), else 1
  Hparams hp;
  std::string tokenizer_model;           ///< tokenizer.ggml.model ("llama", "gpt2", ...) or ""
  std::string tokenizer_pre;             ///< tokenizer.ggml.pre or ""
  std::string name;                      ///< general.name or ""
  std::vector<QuantMixEntry> quant_mix;  ///< by dtype, in traits-table order
  int64_t n_tensors = 0;
  int64_t weight_bytes = 0;  ///< sum of all tensor data bytes
  int64_t n_params = 0;      ///< elements of all tensors
  /// Parameters one token uses: n_params less the experts it is not routed to, i.e. each 3-D
  /// expert tensor counted at n_expert_used / n_expert (= n_params for a dense model).
  int64_t n_params_active = 0;
  /// Bytes of weights one decode step reads: decode_weight_bytes.
  int64_t weight_bytes_active = 0;
  bool has_weights = false;  ///< false for a metadata-only or truncated file
  /// Bytes the data section must have: the end of the last tensor's data (offset + size).
  int64_t data_bytes_needed = 0;
  /// Bytes of data section the file has: file size − data offset (0 when it ends before it).
  int64_t data_bytes_present = 0;
  /// A download cut mid-data: some but not all of the data section is there (0 < present <
  /// needed). A file that ends where its data section begins is a metadata-only file instead
  /// (written on purpose by tools and tests, e.g. the 70B shape in docs/formats.md).
  bool truncated() const {
    return data_bytes_present > 0 && data_bytes_present < data_bytes_needed;
  }
  int64_t n_ctx = 0;  ///< the context length the KV table is for
  /// Positions whose K/V a sequence holds at most: n_ctx, or for a model whose every layer is
  /// windowed (Hparams::all_swa_window) the blocks of one window with its partial ends,
  /// min(n_ctx, (ceil((n_swa − 1) / block_size) + 1) × block_size).
  int64_t kv_tokens = 0;
  /// A model mixing windowed and global layers (gemma2, gemma3; kv_window_table_layers): its
  /// windowed layers, which hold one window's blocks with its partial ends, kv_window_tokens =
  /// min(n_ctx, (ceil((n_swa − 1) / block_size) + 1) × block_size) positions; 0 otherwise.
  int64_t n_layer_window = 0;
  int64_t kv_window_tokens = 0;
  std::vector<KvSizeEntry> kv;  ///< one per KV cache type (kKvCacheTypes order)
  int64_t kv_fast_budget = 0;   ///< the fast tier the table is split against (bytes)
};

/// Describes `file` for a context of `n_ctx` tokens (≤ 0: the model's n_ctx_train) and KV blocks
/// of `block_size` tokens (what a sliding window holds depends on it).
/// Throws ModelError when the file is not a usable model.
ModelInfo describe_model(const gguf::File& file, int64_t n_ctx, int64_t block_size = 16);

/// Weight bytes one decode step reads, from the tensor infos of `file` (model `hp`): every
/// tensor in stored bytes, except the token embedding, of which a step reads one row (left out),
/// unless it is also the output head (no output.weight: counted in full); of a mixture of
/// experts' 3-D expert tensors (ne[2] = n_expert), the n_expert_used of the n_expert matrices a
/// token is routed to. The bytes `kvrun bench --bandwidth` divides by and `kvrun info` prints.
int64_t decode_weight_bytes(const gguf::File& file, const Hparams& hp);

/// Splits each KV table entry between a fast tier of `fast_budget` bytes (≥ 0) and the slow
/// tier: bytes_fast = min(total, budget), bytes_offloaded = the rest. On the CPU backend the
/// fast tier is RAM (`--kv-mem`, or what the machine has available beside the weights).
void plan_kv_tiers(ModelInfo& mi, int64_t fast_budget);

/// What `-ngl N` puts in a GPU's memory (llama.cpp's rule, models/llama.h Placement: the last
/// min(N, n_layer) layers; N > n_layer also the output head and its norm; the token embedding
/// lookup stays on the host). Bytes are what the CUDA backend allocates for them: the layers'
/// tensors as stored, their KV rows for ModelInfo::kv_tokens positions (one buffer per layer sized
/// for the context), the RoPE frequency factors, and an estimate of the step's scratch.
struct GpuPlan {
  int64_t n_gpu = 0;         ///< -ngl as asked
  int64_t layers = 0;        ///< layers placed on the GPU: min(n_gpu, n_layer)
  bool output = false;       ///< the output head on the GPU (n_gpu > n_layer)
  int64_t weight_bytes = 0;  ///< those layers' tensors, plus the head's
  int64_t kv_bytes = 0;      ///< their K and V rows (0 when the KV stays on the host, -nkvo)
  /// Activations of one n_batch step, the logits when the head is placed, the 64 MiB tile of
  /// dequantized weights cuBLAS multiplies in prefill, and 128 MiB for the runtime's own
  /// allocations (cuBLAS workspace, scratch growth): an estimate, not a measurement.
  int64_t scratch_bytes = 0;
  int64_t total() const { return weight_bytes + kv_bytes + scratch_bytes; }
};

/// The plan of `-ngl n_gpu` (≥ 0) for the model `file` described by `mi`, with K/V cache types
/// type_k / type_v and prefill chunks of n_batch tokens; kv_on_gpu false for -nkvo.
/// `ffn_on_host`, when given: [n_layer] layers whose FFN tensors (blk.N.ffn_*) -ot keeps on the
/// host, not counted.
GpuPlan plan_gpu(const ModelInfo& mi, const gguf::File& file, int64_t n_gpu, DType type_k,
                 DType type_v, bool kv_on_gpu, int64_t n_batch = 512,
                 const std::vector<bool>* ffn_on_host = nullptr);

/// `-ngl auto`: the largest N in 0 … n_layer + 1 whose plan_gpu total is at most free_bytes
/// (the plan grows with N, so the answer is the first N that no longer fits, minus one).
int64_t fit_gpu_layers(const ModelInfo& mi, const gguf::File& file, DType type_k, DType type_v,
                       bool kv_on_gpu, int64_t free_bytes, int64_t n_batch = 512,
                       const std::vector<bool>* ffn_on_host = nullptr);

}  // namespace kvrun

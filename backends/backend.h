// backend.h — the seam between the model/engine and the devices that run it.
//
// Three things, as ggml's ggml-backend.h arranges them (buffer → backend → device), far smaller:
//  * Device: one piece of hardware and its memory (the CPU and host RAM; a GPU and its VRAM). It
//    says which ops and types it supports (asked at load, so a model or KV type a device lacks is
//    a clear error before anything runs), holds uploaded weights, allocates buffers and makes
//    Backends. A Tensor view and a DeviceBuffer know the Device their bytes live on.
//  * Backend: one Device plus one stream/queue of work (the CPU: a thread pool). It runs the ops
//    a transformer block needs on activations in its device's memory: embedding rows, RMSNorm,
//    matmul (one weight, or several sharing an input), RoPE, GLU, add, scale, soft-cap, the
//    quantizing KV store, paged attention and copies (host ↔ device, and from another backend at
//    a layer boundary). Ops run in the order issued; synchronize() waits for them.
//  * The step's PageTable (FlashInfer's CSR paged_kv_t idea): built once per engine step on the
//    host, handed to every backend of the step with begin_step(), read by every layer's KV store
//    and attention.
//
// Models and the engine include this header only: they never call cpu:: or cuda:: functions and
// never see how a backend stores weights or the KV cache. Activations are row-major f32 arrays in
// the backend's memory; shapes are written [rows, cols]. Layout: docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtype.h"
#include "tensor.h"

namespace kvrun {

class Backend;

/// A device allocation (weights, KV rows, activations, an op's scratch) that does not fit the
/// memory the device has left: the budget it was checked against (Vulkan: KVRUN_VULKAN_BUDGET,
/// VK_EXT_memory_budget or the heap) or the driver's own out-of-memory answer (CUDA:
/// cudaErrorMemoryAllocation). The message names the device, the bytes asked for and what was
/// available. Thrown by a Backend op in the middle of a step, it leaves nothing committed: the
/// engine may run the step again with fewer rows or fewer sequences (Scheduler::step does).
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The ops of the seam, for Device::supports.
enum class Op {
  kGetRows,         ///< embedding rows of a table of type a
  kRmsNorm,         ///< RMSNorm with an f32 weight
  kMatmul,          ///< y = x · wᵀ with w of type a
  kRope,            ///< rotary position embedding
  kGlu,             ///< SwiGLU / GeGLU
  kAdd,             ///< y += x, and a row broadcast (bias)
  kScale,           ///< x ·= s, and soft-capping
  kKvStore,         ///< K rows in type a, V rows in type b
  kPagedAttention,  ///< attention over K of type a and V of type b, read in place
  kCopy,            ///< host ↔ device and backend ↔ backend copies
  kMoeRoute,        ///< MoE router: softmax, top-k experts and their weights per row
  kMatmulId,        ///< per-row expert matmul of a 3-D weight of type a (ggml's mul_mat_id)
  kLayerNorm,       ///< LayerNorm with an f32 weight and bias (encoders: bert, nomic-bert)
  kGelu,            ///< GELU of every element (bert's FFN)
  kAttention,       ///< bidirectional attention within each sequence of a step (encoders)
  kAttnSinks,       ///< paged attention with per-head sink logits (PagedAttnParams::sinks)
  /// multi-head latent attention (deepseek2): copy_strided, and kv_store / paged_attention over
  /// a KvLayer whose V rows are the latents inside its K rows (KvLayer::mla)
  kMla,
  /// KV rows in host memory the device reads and writes in place: Device::alloc with
  /// BufferUse::kKvHost (the host tier of a GPU's KV cache, --kv-host-tier)
  kKvHostTier,
  /// attention over one tier of a layer's blocks as online-softmax states, and their log-sum-exp
  /// merge (Backend::paged_attention_part / attn_merge: --kv-host-attn cpu)
  kAttnParts,
};

/// The name of `op` ("matmul", "paged_attention", …).
const char* op_name(Op op);

/// Which gated linear unit an FFN uses (Shazeer 2020, "GLU Variants Improve Transformer").
/// kSwiGluOai is gpt-oss's clamped variant (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model
/// Card"; constants as ggml's swiglu_oai / the model's swiglu_limit): g = min(gate, limit),
/// u = clamp(up, −limit, limit), out = g · sigmoid(alpha · g) · (u + 1), with alpha =
/// kSwiGluOaiAlpha and limit = kSwiGluOaiLimit.
enum class GluKind { kSwiGlu, kGeGlu, kSwiGluOai };

/// gpt-oss's SwiGLU constants (GluKind::kSwiGluOai): the sigmoid's slope and the clamp.
constexpr float kSwiGluOaiAlpha = 1.702f;
constexpr float kSwiGluOaiLimit = 7.0f;

/// RoPE settings (RoFormer, Su et al. 2021).
struct RopeConfig {
  int64_t n_rot = 0;        ///< rotated dimensions per head (even, ≤ head_dim); the rest pass
  float freq_base = 10000;  ///< θ_i = pos · freq_scale · base^(−2i/n_rot) / freq_factors[i]
  float freq_scale = 1;     ///< linear position scaling (1 / rope.scaling.factor)
  const float* freq_factors = nullptr;  ///< [n_rot/2] per-pair divisors (llama3 scaling) or null
  float mscale = 1;   ///< cos and sin are multiplied by it (ggml's rope attn_factor; 1 = none)
  bool neox = false;  ///< false: rotate adjacent pairs (x[2i], x[2i+1]) as llama does;
                      ///< true: rotate (x[i], x[i + n_rot/2]) as GPT-NeoX / qwen2 do
};

/// Shapes and scale of one attention call.
struct AttnParams {
  int64_t n_head = 0;      ///< query heads
  int64_t n_head_kv = 0;   ///< KV heads; divides n_head
  int64_t head_dim = 0;    ///< Q/K head size
  int64_t head_dim_v = 0;  ///< V head size
  float scale = 1;         ///< score scale, usually 1/sqrt(head_dim)
};

/// Shapes and options of one paged attention call (and of the KV store before it).
struct PagedAttnParams {
  AttnParams attn;      ///< n_head, n_head_kv, head_dim, head_dim_v, scale
  bool flash = true;    ///< online softmax (true) or llama.cpp's exact non-flash softmax
  bool rotate = false;  ///< K rows are stored Hadamard-rotated along head_dim; rotate Q too
  /// Sliding window (0 = none): a query at position p sees only positions p − window < j ≤ p
  /// (llama.cpp's KQ_mask_swa). Blocks wholly before the window are never read, so they may
  /// have been returned to the pool.
  int64_t window = 0;
  /// Soft-capping of the scaled scores, s ← cap · tanh(s / cap) before the softmax (Gemma 2
  /// report, §2; llama.cpp's attn_soft_cap); 0 = off.
  float softcap = 0;
  /// Attention sinks (gpt-oss; Xiao et al. 2023, "Efficient Streaming Language Models with
  /// Attention Sinks", learned per head): [n_head] f32 logits in the device's memory, each one
  /// more term of its head's softmax denominator with no value (weights e^(s_j − M) /
  /// (e^(sink − M) + Σ e^(s − M)), M the max over the scores and the sink; the sink is not
  /// scaled). Null: none. A device answers supports(Op::kAttnSinks) for it.
  const float* sinks = nullptr;
};

/// Which blocks of a layer's KV rows an attention part reads (Backend::paged_attention_part):
/// every block, the blocks whose slot is below KvLayer::n_fast (the fast tier: a GPU's VRAM),
/// or the others (the slow tier: its pinned host memory).
enum class KvTier { kAll, kFast, kSlow };

/// Floats of one (row, query head) state of Backend::paged_attention_part: m, l, then
/// head_dim_v accumulators.
inline int64_t attn_state_floats(int64_t head_dim_v) { return 2 + head_dim_v; }

/// One layer's K and V storage in the paged KV cache (does not own memory), as the layer's device
/// addresses it. Block ids (what block tables hold) map to storage slots: slot = slot_of[id]
/// (the identity when slot_of is null). Slots below n_fast live in the fast tier at k / v, the
/// others in the slow tier at k_slow / v_slow (the CPU: the --kv-offload-dir file; a GPU: its
/// host tier, pinned host memory at the device address of a BufferUse::kKvHost buffer); a block
/// is read and written where it lies.
/// Slot s holds the rows of block_size consecutive positions: the K row of position j of the
/// block at k_block(id) + j·k_row_bytes, in the KV cache format of ggml-like/kv_layout.h.
struct KvLayer {
  DType k_type = DType::F16;         ///< K cache type
  DType v_type = DType::F16;         ///< V cache type
  int64_t k_row_bytes = 0;           ///< kv_row_bytes(k_type, n_head_kv, head_dim)
  int64_t v_row_bytes = 0;           ///< kv_row_bytes(v_type, n_head_kv, head_dim_v)
  int64_t block_size = 16;           ///< tokens per block
  uint8_t* k = nullptr;              ///< fast tier: [n_fast][block_size][k_row_bytes]
  uint8_t* v = nullptr;              ///< fast tier: [n_fast][block_size][v_row_bytes]
  const int32_t* slot_of = nullptr;  ///< host [n_blocks] block id → slot (null: slot = id)
  int64_t n_fast = INT64_MAX;        ///< slots below this are in the fast tier
  uint8_t* k_slow = nullptr;         ///< slow tier: [n_slow][block_size][k_row_bytes]
  uint8_t* v_slow = nullptr;         ///< slow tier: [n_slow][block_size][v_row_bytes]
  /// Multi-head latent attention (DeepSeek-V2 §2.1): one K head per row (n_head_kv 1) holding
  /// the RoPE'd shared key part, then the latent; V is that latent, read in place: v = k +
  /// kv_row_bytes(k_type, 1, head_dim − head_dim_v), v_slow likewise, v_type = k_type and
  /// v_row_bytes = k_row_bytes (kv_type_holds_mla says which types allow it). kv_store writes
  /// the K rows only; the layer has no V storage of its own.
  bool mla = false;

  /// The slot holding block `id`.
  int64_t slot(int32_t id) const { return slot_of ? slot_of[id] : id; }
  /// True when block `id` lies in `tier` (kAll: every block; kFast: its slot is below n_fast).
  bool in_tier(int32_t id, KvTier tier) const {
    return tier == KvTier::kAll || (slot(id) < n_fast) == (tier == KvTier::kFast);
  }
  /// First byte of block `id`'s K rows.
  uint8_t* k_block(int32_t id) const {
    const int64_t s = slot(id), kb = block_size * k_row_bytes;
    return s < n_fast ? k + s * kb : k_slow + (s - n_fast) * kb;
  }
  /// First byte of block `id`'s V rows.
  uint8_t* v_block(int32_t id) const {
    const int64_t s = slot(id), vb = block_size * v_row_bytes;
    return s < n_fast ? v + s * vb : v_slow + (s - n_fast) * vb;
  }
};

/// One engine step's paged-KV description, CSR style (FlashInfer's paged_kv_t): sequence i owns
/// query rows seq_indptr[i] … seq_indptr[i+1]−1 (its tokens, in position order) and the block
/// table block_ids[block_indptr[i] … block_indptr[i+1]−1] (physical ids; −1 for blocks given
/// back by a sliding window). Host memory; built once per step (engine/step.h) and handed to
/// every backend of the step (Backend::begin_step), which keeps what its device needs.
struct PageTable {
  int64_t n_seqs = 0;                       ///< sequences in the step
  int64_t n_tokens = 0;                     ///< rows in the step (= seq_indptr[n_seqs])
  int64_t block_size = 16;                  ///< tokens per block
  const int32_t* seq_indptr = nullptr;      ///< [n_seqs + 1] first query row of each sequence
  const int32_t* block_indptr = nullptr;    ///< [n_seqs + 1] offset of each block table
  const int32_t* block_ids = nullptr;       ///< the sequences' block tables, concatenated
  const int32_t* last_block_len = nullptr;  ///< [n_seqs] rows used in the last block after the step
  const int32_t* pos = nullptr;             ///< [n_tokens] position of each row
  const int64_t* write_slot = nullptr;      ///< [n_tokens] block id · block_size + offset written
};

/// One sequence's rows of a step as the kernels walk them (the per-sequence view of a PageTable:
/// sequence i has q0 = seq_indptr[i], n_q = seq_indptr[i+1] − q0, pos0 = pos[q0] and its block
/// table at block_ids + block_indptr[i]): query rows q0 … q0+n_q−1 are its tokens at positions
/// pos0 … pos0+n_q−1.
struct PagedSeq {
  const int32_t* block_table = nullptr;  ///< [ceil((pos0 + n_q) / block_size)] physical ids
  int64_t pos0 = 0;  ///< position of the sequence's first query token in this batch
  int64_t q0 = 0;    ///< its first row in q / out / k / v
  int64_t n_q = 0;   ///< its query rows; query i sits at position pos0 + i
};

/// Memory on one device (weights, activations or KV rows). Owns it; frees it when destroyed.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  /// First byte (a device address: host-addressable only when device().host_memory()).
  virtual void* data() const = 0;
  /// The same bytes as the host addresses them, or null when the host cannot (device memory
  /// of a GPU). data() itself where the device's memory is host memory; a BufferUse::kKvHost
  /// buffer of a GPU gives its host mapping (which may differ from data(): Vulkan).
  virtual void* host_data() const;
  /// Bytes.
  virtual size_t size() const = 0;
  /// The device the bytes live on.
  virtual Device& device() const = 0;
  /// Makes bytes [offset, offset + bytes) usable. A device may allocate a BufferUse::kKv buffer
  /// as a reserved address range that memory backs only where committed (CUDA: virtual memory
  /// management, cuMemAddressReserve + cuMemCreate / cuMemMap per granule), so that a large
  /// -c or --kv-mem costs device memory only for the blocks in use; the KV cache commits each
  /// layer's rows of a slot before they are first written. Idempotent; the default (memory all
  /// there from alloc) does nothing. Throws DeviceOutOfMemory when the device cannot back them.
  virtual void commit(size_t offset, size_t bytes) {
    (void)offset;
    (void)bytes;
  }
};

/// What a buffer is for (a device may place them differently).
enum class BufferUse {
  kActivations,  ///< scratch of a step
  kKv,           ///< KV rows: reserved as address space, touched as blocks are written
  /// KV rows of the host tier: host memory (RAM) that the device's ops read and write in place
  /// through data(), and the host through host_data() (CUDA: cudaHostAlloc'ed pinned memory,
  /// mapped; Vulkan: a host-visible, preferably host-cached, not device-local memory type bound
  /// to a buffer with a device address; the CPU: as kKv). Only for a device answering
  /// supports(Op::kKvHostTier); the others throw std::invalid_argument.
  kKvHost,
};

/// One device and its memory. Devices are created by the registry (devices() / cpu_device()) or,
/// for tests, make_cpu_device(); they outlive every model and backend that refers to them.
class Device {
 public:
  virtual ~Device() = default;
  /// The name users pass to -dev: "CPU", "CUDA0", "Vulkan0".
  virtual std::string name() const = 0;
  /// One line for --list-devices (the hardware's name).
  virtual std::string description() const = 0;
  /// True when the device's memory is host memory (the CPU), so data pointers can be read by the
  /// host directly.
  virtual bool host_memory() const = 0;
  /// Total and free memory in bytes (-1 when unknown).
  virtual int64_t total_memory() const = 0;
  virtual int64_t free_memory() const = 0;
  /// True when `op` runs here for type a (the weight type of kMatmul / kGetRows, the K type of
  /// kKvStore / kPagedAttention) and b (the V type of those two; ignored by the others), with
  /// rows of `k` elements (kMatmul; 0: any). Asked at load: never a silent slow path.
  virtual bool supports(Op op, DType a = DType::F32, DType b = DType::F32, int64_t k = 0) const = 0;
  /// `bytes` of device memory. Throws std::bad_alloc (or the device's error) when it cannot.
  virtual std::unique_ptr<DeviceBuffer> alloc(size_t bytes, BufferUse use) = 0;
  /// Makes the weight matrix or vector `t` (a host view, e.g. into the mapped GGUF file) usable
  /// by this device's ops and points `t` at the device's copy (t.data, t.packed, t.device). The
  /// returned buffer holds the copy (null when the host bytes are used as they are); the caller
  /// keeps it as long as `t`. With `release_mapped` the host pages of a read-only file mapping
  /// that the device no longer reads may be given back. Throws ModelError-like
  /// std::runtime_error when the type is not supported.
  virtual std::unique_ptr<DeviceBuffer> upload_weight(Tensor& t, bool release_mapped) = 0;
  /// A new stream of work on this device; `n_threads` for the CPU (0: its physical cores).
  virtual std::unique_ptr<Backend> make_backend(int n_threads) = 0;
};

inline void* DeviceBuffer::host_data() const { return device().host_memory() ? data() : nullptr; }

/// The gate function of a mixture-of-experts router: what turns one row of expert logits into
/// the scores the experts are chosen by and weighted with (llama.cpp's
/// LLM_EXPERT_GATING_FUNC_TYPE; GGUF key {arch}.expert_gating_func 1, 2, 3).
enum class MoeGating {
  /// softmax over every expert's logit (Shazeer et al. 2017; Qwen3 MoE, DeepSeek-V2)
  kSoftmax,
  /// sigmoid of each logit (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §2.1.2)
  kSigmoid,
  /// the logits themselves; the k chosen are weighted by a softmax over those k only (gpt-oss)
  kTopkSoftmax,
};

/// How a mixture-of-experts router turns one row of expert logits into expert weights
/// (Shazeer et al. 2017, "Outrageously Large Neural Networks"; Qwen3 MoE: softmax gating,
/// top-k, the k probabilities renormalized to sum to 1 when norm_topk_prob is set; gpt-oss:
/// top-k of the logits, then a softmax over the k chosen; DeepSeek-V3: sigmoid scores, chosen
/// by score + a per-expert bias, weighted by the unbiased scores, renormalized).
struct MoeRouteParams {
  int64_t n_expert = 0;  ///< logits per row
  int64_t n_used = 0;    ///< k: experts chosen per row (1 ≤ k ≤ n_expert)
  bool norm = true;      ///< divide the k chosen scores by their sum (not with kTopkSoftmax)
  MoeGating gating = MoeGating::kSoftmax;
  /// Null, or {n_expert} f32 on the backend's device: added to the gate scores for choosing the
  /// experts only; the weights are the unbiased scores (DeepSeek-V3's auxiliary-loss-free
  /// balancing bias, e_score_correction_bias; GGUF tensor blk.N.exp_probs_b.bias).
  const Tensor* selection_bias = nullptr;
  /// Group-limited routing (DeepSeek-AI 2024, "DeepSeek-V2", §2.2.2 device-limited routing;
  /// "DeepSeek-V3 Technical Report", §2.1.2 node-limited routing; GGUF keys
  /// {arch}.expert_group_count / expert_group_used_count, Hugging Face n_group / topk_group):
  /// the n_expert experts form n_group equal groups of consecutive ids; a group's score is the
  /// sum of its group_top largest selection scores (score + bias): 1 is DeepSeek-V2's
  /// group_limited_greedy (the group's best expert), 2 DeepSeek-V3's noaux_tc; the n_group_used
  /// best groups (the lower group id first on a tie) are kept and the k experts are chosen among
  /// theirs only. n_group 1 (or n_group_used == n_group): every expert competes.
  int64_t n_group = 1;
  int64_t n_group_used = 1;
  int64_t group_top = 1;
};

/// One output of Backend::matmul_many.
struct MatmulOut {
  const Tensor* w = nullptr;  ///< [m rows, k] weight on the backend's device
  float* y = nullptr;         ///< [n, m] output (written)
};

/// One device + one stream: runs the ops of a transformer block. Every pointer argument is in
/// the device's memory unless it says host. Not thread-safe: one engine thread issues its ops.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device& device() const = 0;
  /// Threads the backend computes with (1 for a GPU stream).
  virtual int n_threads() const = 0;

  /// Takes the step's page table (host; valid until the next begin_step): later kv_store and
  /// paged_attention calls read it, and positions() is its pos array in device memory.
  virtual void begin_step(const PageTable& pt) = 0;
  /// Device [n_tokens] positions of the current step's rows.
  virtual const int32_t* positions() const = 0;

  /// out[i] = row ids[i] of `table` in f32. ids: host [n]; out: [n, table.ne[0]]. Throws
  /// std::out_of_range for an id outside the table.
  virtual void get_rows(const Tensor& table, const int32_t* ids, int64_t n, float* out) = 0;
  /// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x²) + eps) · w per row of `cols`.
  /// x, y: [rows, cols] (y may equal x); w: [cols] f32 or null.
  virtual void rms_norm(const float* x, const Tensor* w, float* y, int64_t rows, int64_t cols,
                        float eps) = 0;
  /// y[n, m] = x[n, k] · w[m, k]ᵀ with w in its stored type.
  virtual void matmul(const Tensor& w, const float* x, int64_t n, float* y) = 0;
  /// Several matmuls of one input (Q/K/V, gate/up): every output equal to matmul's.
  virtual void matmul_many(const MatmulOut* outs, int n_outs, const float* x, int64_t n) = 0;
  /// Rotates every head of x [n, n_heads · head_dim] in place at the step's positions().
  virtual void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                    const RopeConfig& cfg) = 0;
  /// out = act(gate) · up per element, gate/up/out [rows, cols] (out may alias either).
  virtual void glu(GluKind kind, const float* gate, const float* up, float* out, int64_t rows,
                   int64_t cols) = 0;
  /// y[i] += x[i] for i < n.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  /// y[r, :] += row[:] for every r < rows (a bias). row: [cols] weight on the device.
  virtual void add_row(float* y, const Tensor& row, int64_t rows, int64_t cols) = 0;
  /// x[i] ·= s for i < n.
  virtual void scale(float* x, int64_t n, float s) = 0;
  /// x[i] = cap · tanh(x[i] / cap) for i < n (Gemma 2 report, §2).
  virtual void softcap(float* x, int64_t n, float cap) = 0;
  /// Copies columns [c0, c0 + n) of src [rows, cols] to dst [rows, n] (a fused QKV split).
  virtual void copy_cols(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                         float* dst) = 0;
  /// Encodes and writes the step's K [n_tokens, n_head_kv · head_dim] and V rows into `kv` at
  /// the page table's positions (blocks reserved by the caller); with kv.mla the K rows only
  /// (v unused).
  virtual void kv_store(const KvLayer& kv, const PagedAttnParams& p, const float* k,
                        const float* v) = 0;
  /// Causal attention of the step's rows: out [n_tokens, n_head · head_dim_v] from q [n_tokens,
  /// n_head · head_dim] over each row's sequence's positions 0 … pos (its window).
  virtual void paged_attention(const KvLayer& kv, const PagedAttnParams& p, const float* q,
                               float* out) = 0;
  /// Host → device and device → host copies of `bytes`.
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  /// The layer-boundary copy: `bytes` at `src` in `from`'s memory to `dst` in this backend's.
  /// Finishes `from`'s work first.
  virtual void copy_from(Backend& from, const void* src, void* dst, size_t bytes) = 0;
  /// Waits until every op issued so far has finished.
  virtual void synchronize() = 0;

  /// Runs `issue`, a function that issues ops of the current step on this backend only, with
  /// the results of calling it directly. A GPU backend may record what it issues and replay the
  /// recording as one unit (CUDA: a graph, one launch instead of hundreds), so `issue` must not
  /// wait on or read results (no download, synchronize or copy_from). It may be called twice:
  /// when recording fails part way, nothing recorded runs and `issue` is called again directly.
  /// The CPU runs it directly (this default).
  virtual void run_graph(const std::function<void()>& issue) { issue(); }

  // ---- Mixture of experts (Op::kMoeRoute, Op::kMatmulId). The defaults throw
  // std::logic_error: a device that does not override them must say no in supports(). ----

  /// The router of n rows: per row r the gate scores s = g(logits[r, :]) over p.n_expert (g by
  /// p.gating: softmax, sigmoid, or the logits themselves), the p.n_used largest of
  /// s + p.selection_bias (descending; the lower id first on a tie) into ids[r, :] and their
  /// unbiased scores s into weights[r, :], divided by their sum when p.norm; with kTopkSoftmax
  /// the weights are the softmax of the n_used chosen logits instead.
  /// logits: [n, n_expert]; ids: [n, n_used] int32; weights: [n, n_used] f32. Throws
  /// std::invalid_argument when n_used is out of range or the bias is not {n_expert} f32.
  virtual void moe_route(const float* /*logits*/, int64_t /*n*/, const MoeRouteParams& /*p*/,
                         int32_t* /*ids*/, float* /*weights*/) {
    throw std::logic_error("moe_route is not implemented by the " + device().name() + " backend");
  }
  /// The experts' matmul of n rows, n_used experts each (ggml's mul_mat_id): w is 3-D
  /// [k, m, n_expert] (ne[2] matrices of m rows of k), ids [n, n_used] as moe_route writes them.
  /// For row r and slot j, with e = ids[r, j] and input row xr = x[r, :] (x [n, k]) or, with
  /// x_per_slot, x[r, j, :] (x [n, n_used, k]):
  ///   weights == null: y[r, j, :] = w[e] · xr + b[e]            (y [n, n_used, m])
  ///   weights != null: y[r, :] = Σ_j weights[r, j] · (w[e] · xr + b[e]), summed in slot order
  ///                    (y [n, m])
  /// where b[e] is row e of `bias` (f32 [m, n_expert] on the device: one bias per expert, as
  /// ggml's add_id) or 0 when bias is null. Each w[e] · xr equals matmul's result on the rows
  /// routed to e. Throws std::out_of_range for an id outside [0, n_expert) and
  /// std::invalid_argument for an unsupported weight.
  virtual void matmul_id(const Tensor& /*w*/, const float* /*x*/, bool /*x_per_slot*/,
                         const int32_t* /*ids*/, const float* /*weights*/, int64_t /*n*/,
                         int64_t /*n_used*/, float* /*y*/, const Tensor* /*bias*/) {
    throw std::logic_error("matmul_id is not implemented by the " + device().name() + " backend");
  }

  // ---- Attention split by KV tier (Op::kAttnParts: --kv-host-attn cpu). The defaults throw
  // std::logic_error: a device that does not override them must say no in supports(). ----

  /// paged_attention over the positions whose blocks lie in `tier` only, as unnormalized
  /// online-softmax states (FlashAttention; Dao et al. 2022): part [n_tokens, n_head,
  /// attn_state_floats(head_dim_v)] holds per row and query head m, the largest scaled (and
  /// soft-capped) score seen, −inf when the row saw no position of the tier; l = Σ e^(s − m);
  /// and acc = Σ e^(s − m) · v. Sinks are left to attn_merge. kv_store must have written the
  /// step's rows first. Needs p.flash. Throws std::invalid_argument as paged_attention does.
  virtual void paged_attention_part(const KvLayer& /*kv*/, const PagedAttnParams& /*p*/,
                                    KvTier /*tier*/, const float* /*q*/, float* /*part*/) {
    throw std::logic_error("paged_attention_part is not implemented by the " + device().name() +
                           " backend");
  }
  /// out [n_tokens, n_head · head_dim_v] = the log-sum-exp merge of n_parts states of
  /// paged_attention_part over disjoint parts of every row's context (cpu::attn_merge_partials
  /// per row and head; with p.sinks the sink logit joins each head's denominator). At least one
  /// part of every row must have seen a position. parts: n_parts pointers, each [n_tokens,
  /// n_head, attn_state_floats(head_dim_v)] in this device's memory.
  virtual void attn_merge(const PagedAttnParams& /*p*/, const float* const* /*parts*/,
                          int /*n_parts*/, int64_t /*n_tokens*/, float* /*out*/) {
    throw std::logic_error("attn_merge is not implemented by the " + device().name() + " backend");
  }

  // ---- Multi-head latent attention (deepseek2: Op::kMla). The default throws
  // std::logic_error: a device that does not override it must say no in supports(). ----

  /// dst[r · dst_stride + c] = src[r · src_stride + c] for r < rows, c < cols (the columns of
  /// a matrix, or of every head of a [n, n_head, head] array, into another's: MLA's query and
  /// K row assembly). Source and destination do not overlap.
  virtual void copy_strided(const float* /*src*/, int64_t /*src_stride*/, float* /*dst*/,
                            int64_t /*dst_stride*/, int64_t /*rows*/, int64_t /*cols*/) {
    throw std::logic_error("copy_strided is not implemented by the " + device().name() +
                           " backend");
  }

  // ---- Encoders (bert, nomic-bert: Op::kLayerNorm, Op::kGelu, Op::kAttention). The defaults
  // throw std::logic_error: a device that does not override them must say no in supports(). ----

  /// LayerNorm (Ba et al. 2016, "Layer Normalization") per row of `cols`, as ggml's norm, mul
  /// and add ops: mean and variance over the row (sums in double), y = (x − mean) /
  /// sqrt(var + eps) · w + b. x, y: [rows, cols] (y may equal x); w, b: [cols] f32 or null.
  virtual void layer_norm(const float* /*x*/, const Tensor* /*w*/, const Tensor* /*b*/,
                          float* /*y*/, int64_t /*rows*/, int64_t /*cols*/, float /*eps*/) {
    throw std::logic_error("layer_norm is not implemented by the " + device().name() + " backend");
  }
  /// GELU with the tanh approximation (Hendrycks & Gimpel 2016; ggml's gelu op): y = 0.5·x·(1 +
  /// tanh(√(2/π)·x·(1 + 0.044715·x²))) for i < n; y may equal x.
  virtual void gelu(const float* /*x*/, float* /*y*/, int64_t /*n*/) {
    throw std::logic_error("gelu is not implemented by the " + device().name() + " backend");
  }
  /// Bidirectional (non-causal) attention of the current step's rows: every row of sequence i
  /// attends to every row of sequence i in this step (BERT's encoder; llama.cpp's KQ mask with
  /// causal_attn false), softmax(scale · q·kᵀ) · v per head, GQA as paged_attention. Nothing
  /// is read from or written to the KV cache, so each sequence must be whole in the step.
  /// q: [n_tokens, n_head · head_dim]; k: [n_tokens, n_head_kv · head_dim]; v: [n_tokens,
  /// n_head_kv · head_dim_v]; out: [n_tokens, n_head · head_dim_v].
  virtual void attention(const AttnParams& /*p*/, const float* /*q*/, const float* /*k*/,
                         const float* /*v*/, float* /*out*/) {
    throw std::logic_error("attention is not implemented by the " + device().name() + " backend");
  }
};

// ---- The registry: which devices this build and machine have ----

/// The host CPU (always present; one per process).
Device& cpu_device();
/// A further CPU device instance with its own uploaded weights and buffers (named `name`), for
/// tests that stand it in for a GPU. The caller owns it.
std::unique_ptr<Device> make_cpu_device(const std::string& name);
/// The GPU devices of this build on this machine (CUDA0, CUDA1, …; Vulkan0, …), in order.
std::vector<Device*> gpu_devices();
/// The GPU backends compiled into this binary ("CUDA", "Vulkan"); empty for a CPU-only build.
std::vector<std::string> gpu_backends_built();

}  // namespace kvrun

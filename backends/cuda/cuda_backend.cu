// cuda_backend.cu — the CUDA Device and Backend of the seam (see cuda_backend.h).
//
// One Context (device + non-blocking stream + scratch) per Backend; weights and KV rows are
// plain cudaMalloc'ed buffers any stream of the device reads. The step's page table becomes one
// AttnBatch upload per step (rebuilt once when the KV layers map block ids to other slots).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/add.h"
#include "cuda/attn_batch.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/cuda_device.h"
#include "cuda/cuda_graph.h"
#include "cuda/eltwise.h"
#include "cuda/get_rows.h"
#include "cuda/kv_store.h"
#include "cuda/matmul.h"
#include "cuda/paged_attention.h"
#include "cuda/rms_norm.h"
#include "cuda/rope.h"
#include "cuda/step_key.h"
#include "cuda/swiglu.h"
#include "cuda/vmm_range.h"
#include "gguf.h"

namespace kvrun::cuda {
namespace {

/// A row length every matmul weight type's block divides (for supports() asked with k = 0).
constexpr int64_t kAnyK = 2048;

/// True when weights of type `t` can be uploaded: the matmul / get_rows types, and f32 vectors.
bool weight_type_ok(DType t) { return t == DType::F32 || matmul_supported(t, kAnyK); }

/// False when KVRUN_CUDA_GRAPHS=0 asks for every op to be launched directly.
bool graphs_enabled() {
  const char* e = std::getenv("KVRUN_CUDA_GRAPHS");
  return !(e && std::string(e) == "0");
}

std::string mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

/// cudaMalloc'ed memory through the seam.
class SeamBuffer final : public kvrun::DeviceBuffer {
 public:
  SeamBuffer(kvrun::Device& dev, Context& ctx, size_t bytes) : dev_(dev), buf_(ctx, bytes) {}
  void* data() const override { return const_cast<void*>(buf_.data()); }
  size_t size() const override { return buf_.size(); }
  kvrun::Device& device() const override { return dev_; }

 private:
  kvrun::Device& dev_;
  cuda::DeviceBuffer buf_;
};

/// A KV buffer (BufferUse::kKv) on a reserved range of device addresses, backed granule by
/// granule as the KV cache commits its blocks' rows (DeviceBuffer::commit; vmm_range.h): a large
/// -c or --kv-mem takes VRAM only for the blocks in use.
class VmmBuffer final : public kvrun::DeviceBuffer {
 public:
  VmmBuffer(kvrun::Device& dev, std::unique_ptr<VmmRange> range, size_t bytes)
      : dev_(dev), range_(std::move(range)), bytes_(bytes) {}
  void* data() const override { return range_->data(); }
  size_t size() const override { return bytes_; }
  kvrun::Device& device() const override { return dev_; }
  void commit(size_t offset, size_t bytes) override { range_->commit(offset, bytes); }

 private:
  kvrun::Device& dev_;
  std::unique_ptr<VmmRange> range_;
  size_t bytes_;
};

/// Pinned, mapped host memory through the seam (BufferUse::kKvHost, the KV cache's host tier):
/// cudaHostAlloc with cudaHostAllocMapped (the kernels address it through its device pointer,
/// cudaHostGetDevicePointer: the host pointer itself on 64-bit UVA systems) and
/// cudaHostAllocPortable (every context's kernels may read it). host_data() is the host pointer.
class PinnedBuffer final : public kvrun::DeviceBuffer {
 public:
  PinnedBuffer(kvrun::Device& dev, Context& ctx, size_t bytes) : dev_(dev), bytes_(bytes) {
    ctx.impl().activate();
    check(cudaHostAlloc(&host_, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    const cudaError_t e = cudaHostGetDevicePointer(&dptr_, host_, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(host_);
      check(e, "cudaHostGetDevicePointer");
    }
  }
  ~PinnedBuffer() override { cudaFreeHost(host_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const override { return dptr_; }
  void* host_data() const override { return host_; }
  size_t size() const override { return bytes_; }
  kvrun::Device& device() const override { return dev_; }

 private:
  kvrun::Device& dev_;
  size_t bytes_;
  void* host_ = nullptr;
  void* dptr_ = nullptr;
};

class CudaBackend final : public kvrun::Backend {
 public:
  CudaBackend(kvrun::Device& dev, int index) : dev_(dev), ctx_(index) {}
  ~CudaBackend() override {
    const std::string r = timer_.report();
    if (!r.empty())
      std::fprintf(stderr, "%s step times (KVRUN_CUDA_STEP_TIMES): %s\n", dev_.name().c_str(),
                   r.c_str());
  }
  kvrun::Device& device() const override { return dev_; }
  int n_threads() const override { return 1; }

  void begin_step(const PageTable& pt) override {
    pt_ = pt;
    seqs_.resize(size_t(pt.n_seqs));
    for (int64_t i = 0; i < pt.n_seqs; ++i) {
      PagedSeq& s = seqs_[size_t(i)];
      s.q0 = pt.seq_indptr[i];
      s.n_q = pt.seq_indptr[i + 1] - s.q0;
      s.pos0 = s.n_q > 0 ? pt.pos[s.q0] : 0;
      s.block_table = pt.block_ids + pt.block_indptr[i];
    }
    batch_.set(ctx_, seqs_.data(), pt.n_seqs, pt.block_size, nullptr);
    batch_slots_ = nullptr;
    graph_calls_ = 0;
  }
  const int32_t* positions() const override { return batch_.positions(); }

  void get_rows(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= table.ne[1])
        throw std::out_of_range("get_rows: id " + std::to_string(ids[i]) + " outside [0, " +
                                std::to_string(table.ne[1]) + ")");
    if (n <= 0) return;
    const size_t bytes = size_t(n) * sizeof(int32_t);
    not_recording("get_rows' token ids");
    if (ids_.size() < bytes) ids_ = cuda::DeviceBuffer(ctx_, std::max<size_t>(bytes, 4096));
    ids_.upload(ctx_, ids, bytes);
    cuda::get_rows(ctx_, table, ids_.as<int32_t>(), n, out);
  }

  void rms_norm(const float* x, const Tensor* w, float* y, int64_t rows, int64_t cols,
                float eps) override {
    if (w && w->type != DType::F32)
      throw std::invalid_argument("CUDA rms_norm: the weight must be f32");
    if (keyed(KeyOp::kRmsNorm, x, w ? w->data : nullptr, y, rows, cols, eps)) return;
    cuda::rms_norm(ctx_, x, w ? static_cast<const float*>(w->data) : nullptr, y, rows, cols, eps);
  }

  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    if (keyed(KeyOp::kMatmul, w, x, n, y)) return;
    if (n > 0) cuda::matmul(ctx_, w, x, n, y);
  }
  void matmul_many(const MatmulOut* outs, int n_outs, const float* x, int64_t n) override {
    if (hashing_) {
      key_.op(KeyOp::kMatmulMany, n_outs, x, n);
      for (int i = 0; i < n_outs; ++i) key_.op(KeyOp::kMatmul, *outs[i].w, outs[i].y);
      return;
    }
    if (n > 0) cuda::matmul_many(ctx_, outs, n_outs, x, n);
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
            const RopeConfig& cfg) override {
    if (n > batch_.n_rows())
      throw std::invalid_argument("CUDA rope: more rows than the step's page table has");
    const RopeParams p{cfg.n_rot,      cfg.freq_base,
                       cfg.freq_scale, freq_factors(cfg.freq_factors, cfg.n_rot / 2),
                       cfg.neox,       cfg.mscale};
    if (keyed(KeyOp::kRope, x, n, n_heads, head_dim, cfg, p.freq_factors, batch_.positions()))
      return;
    cuda::rope(ctx_, x, n, n_heads, head_dim, batch_.positions(), p);
  }

  void glu(GluKind kind, const float* gate, const float* up, float* out, int64_t rows,
           int64_t cols) override {
    if (kind == GluKind::kSwiGluOai)  // only gpt-oss's experts use it; MoE layers are refused
      throw std::logic_error("glu swiglu_oai is not implemented by the CUDA backend");
    if (keyed(KeyOp::kGlu, kind, gate, up, out, rows, cols)) return;
    if (kind == GluKind::kGeGlu)
      cuda::geglu(ctx_, gate, up, out, rows * cols);
    else
      cuda::swiglu(ctx_, gate, up, out, rows * cols);
  }
  void add(float* y, const float* x, int64_t n) override {
    if (!keyed(KeyOp::kAdd, y, x, n)) cuda::add(ctx_, y, x, n);
  }
  void add_row(float* y, const Tensor& row, int64_t rows, int64_t cols) override {
    if (row.type != DType::F32) throw std::invalid_argument("CUDA add_row: the row must be f32");
    if (keyed(KeyOp::kAddRow, y, row, rows, cols)) return;
    cuda::add_row(ctx_, y, static_cast<const float*>(row.data), rows, cols);
  }
  void scale(float* x, int64_t n, float s) override {
    if (!keyed(KeyOp::kScale, x, n, s)) cuda::scale(ctx_, x, n, s);
  }
  void softcap(float* x, int64_t n, float cap) override {
    if (!keyed(KeyOp::kSoftcap, x, n, cap)) cuda::softcap(ctx_, x, n, cap);
  }
  void copy_cols(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                 float* dst) override {
    if (keyed(KeyOp::kCopyCols, src, rows, cols, c0, n, dst)) return;
    cuda::copy_cols(ctx_, src, rows, cols, c0, n, dst);
  }

  void kv_store(const KvLayer& kv, const PagedAttnParams& p, const float* k,
                const float* v) override {
    use_slots(kv);
    if (keyed(KeyOp::kKvStore, kv, p, k, v, batch_.positions(), batch_.cells())) return;
    cuda::kv_store(ctx_, kv, shape(p), batch_, k, v);
  }
  void paged_attention(const KvLayer& kv, const PagedAttnParams& p, const float* q,
                       float* out) override {
    use_slots(kv);
    if (keyed(KeyOp::kAttention, kv, p, q, out, batch_.positions(), batch_.row_tables(),
              batch_.tables(), batch_.block_size(), attn_segment_ctx(batch_.max_ctx())))
      return;
    cuda::paged_attention(ctx_, kv, shape(p), batch_, q, out);
  }
  // Attention split by KV tier (--kv-host-attn cpu): never in a recorded step (the model runs a
  // step with such a split directly, since the host computes part of it).
  void paged_attention_part(const KvLayer& kv, const PagedAttnParams& p, KvTier tier,
                            const float* q, float* part) override {
    not_recording("paged_attention_part");
    use_slots(kv);
    cuda::paged_attention_part(ctx_, kv, shape(p), batch_, tier, q, part);
  }
  void attn_merge(const PagedAttnParams& p, const float* const* parts, int n_parts,
                  int64_t n_tokens, float* out) override {
    not_recording("attn_merge");
    if (p.sinks)  // (a layer with sinks runs on the CPU: supports(Op::kAttnSinks) is false)
      throw std::invalid_argument("cuda attn_merge: attention sinks are not supported");
    cuda::attn_merge(ctx_, parts, n_parts, n_tokens, p.attn.n_head, p.attn.head_dim_v, out);
  }

  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes == 0) return;
    not_recording("upload");
    ctx_.impl().activate();
    // From pageable memory the call returns once `host` has been read (CUDA's documented
    // behaviour for pageable sources), so the caller may reuse it.
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_.impl().stream),
          "upload: cudaMemcpyAsync");
  }
  void download(void* host, const void* src, size_t bytes) override {
    not_recording("download");
    ctx_.impl().activate();
    if (bytes)
      check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_.impl().stream),
            "download: cudaMemcpyAsync");
    ctx_.synchronize();
  }
  void copy_from(Backend& from, const void* src, void* dst, size_t bytes) override {
    not_recording("copy_from");
    if (from.device().host_memory()) {
      from.synchronize();
      upload(dst, src, bytes);
    } else if (auto* cb = dynamic_cast<CudaBackend*>(&from); cb && &cb->dev_ == &dev_) {
      from.synchronize();
      ctx_.impl().activate();
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.impl().stream),
            "copy_from: cudaMemcpyAsync");
    } else {  // another device: through the host
      std::vector<uint8_t> tmp(bytes);
      from.download(tmp.data(), src, bytes);
      upload(dst, tmp.data(), bytes);
    }
  }
  void synchronize() override {
    not_recording("synchronize");
    ctx_.synchronize();
  }

  /// Decode steps (at most kMatvecMaxRows rows) as CUDA graphs, one per (row count, run_graph
  /// call of the step), replayed with one launch. Each step first runs `issue` as a dry pass in
  /// which the ops only append their arguments to a StepKey (step_key.h); when the key equals
  /// the one the graph was recorded with, the graph is launched as it is, otherwise the step is
  /// recorded anew (StepGraph updates the executable graph in place while only kernel
  /// parameters change). Keys change when a pointer, a shape or a parameter does, when scratch
  /// memory was reallocated, and every 256 positions of context (attn_segment_ctx). The first
  /// step of each row count runs directly, so scratch memory, the logits buffer and RoPE
  /// factors exist before recording; a dry pass or recording that fails (an op that had to
  /// allocate or upload) runs `issue` directly; two failures in a row turn graphs off for this
  /// backend, and so does an op that tried to launch during the key pass (KeyPassError: a
  /// backend bug, reported on stderr). Other errors of the ops propagate. KVRUN_CUDA_GRAPHS=0
  /// turns graphs off.
  void run_graph(const std::function<void()>& issue) override {
    const int64_t rows = pt_.n_tokens;
    if (!graphs_ || rows > kMatvecMaxRows || rows < 1 || !warm_[size_t(rows)]) {
      warm_[size_t(rows > 0 && rows <= kMatvecMaxRows ? rows : 0)] = true;
      issue();
      return;
    }
    std::vector<KeyedGraph>& per_call = graphs_by_rows_[size_t(rows)];
    if (per_call.size() <= size_t(graph_calls_)) per_call.resize(size_t(graph_calls_) + 1);
    KeyedGraph& g = per_call[size_t(graph_calls_++)];
    timer_.begin_host();
    bool recorded = false;
    try {
      key_.clear();
      key_.op(KeyOp::kStep, rows, Scratch::generation());
      {
        const KeyPass pass(*this);
        issue();
      }
      if (!g.graph.ready() || key_ != g.key) {
        capturing_ = true;
        g.graph.capture(ctx_, issue);
        capturing_ = false;
        std::swap(g.key, key_);
        recorded = true;
      }
    } catch (const CudaError&) {  // an op that must copy from the host, or a failed capture
      capturing_ = false;
      g.key.clear();
      graphs_ = ++graph_failures_ < 2;
      issue();
      return;
    } catch (const KeyPassError& e) {  // nothing was launched: run it directly, graphs off
      capturing_ = false;
      g.key.clear();
      graphs_ = false;
      std::fprintf(stderr, "%s: CUDA graphs turned off: %s\n", dev_.name().c_str(), e.what());
      issue();
      return;
    } catch (...) {
      capturing_ = false;
      g.key.clear();
      throw;
    }
    timer_.end_host(recorded);
    ++(recorded ? stats_.recorded : stats_.replayed);
    graph_failures_ = 0;
    timer_.before_launch(ctx_);
    g.graph.launch(ctx_);
    timer_.after_launch(ctx_);
  }

  GraphStats stats() const { return stats_; }

 private:
  /// Throws CudaError while a step is being recorded or keyed: `what` would copy from host
  /// memory that a replay would not see again (run_graph then runs the step directly).
  void not_recording(const char* what) const {
    if (capturing_ || hashing_)
      throw CudaError(std::string(what) + " while recording a CUDA graph");
  }

  static AttnShape shape(const PagedAttnParams& p) {
    AttnShape s;
    static_cast<AttnParams&>(s) = p.attn;
    s.rotate = p.rotate;
    s.window = p.window;
    s.softcap = p.softcap;
    return s;
  }

  /// Rebuilds the step's AttnBatch when `kv` maps block ids to slots other than the ids (the
  /// batch of begin_step assumed slot = id); a no-op for the layers after the first.
  void use_slots(const KvLayer& kv) {
    if (!kv.slot_of || kv.slot_of == batch_slots_) return;
    bool identity = true;
    const int64_t n_ids = pt_.n_seqs > 0 ? pt_.block_indptr[pt_.n_seqs] : 0;
    for (int64_t i = 0; i < n_ids && identity; ++i) {
      const int32_t id = pt_.block_ids[i];
      identity = id < 0 || kv.slot_of[id] == id;
    }
    if (!identity) {
      not_recording("the step's slot table");
      batch_.set(ctx_, seqs_.data(), pt_.n_seqs, pt_.block_size, kv.slot_of);
    }
    batch_slots_ = kv.slot_of;
  }

  /// The device copy of a model's host [half] RoPE frequency factors (uploaded once).
  const float* freq_factors(const float* host, int64_t half) {
    if (!host) return nullptr;
    auto it = ff_.find(host);
    if (it == ff_.end()) {
      not_recording("RoPE frequency factors");
      cuda::DeviceBuffer b(ctx_, size_t(half) * sizeof(float));
      b.upload(ctx_, host, size_t(half) * sizeof(float));
      it = ff_.emplace(host, std::move(b)).first;
    }
    return it->second.as<float>();
  }

  kvrun::Device& dev_;
  Context ctx_;
  PageTable pt_;
  std::vector<PagedSeq> seqs_;
  AttnBatch batch_;
  const int32_t* batch_slots_ = nullptr;  // the slot map batch_ was last checked against
  cuda::DeviceBuffer ids_;                // get_rows' token ids
  std::unordered_map<const float*, cuda::DeviceBuffer> ff_;
  /// run_graph's key pass over one step's ops: hashing_ set, and the context's `keying` (an op
  /// that enqueued work anyway throws std::logic_error), both cleared however the pass ends.
  struct KeyPass {
    explicit KeyPass(CudaBackend& b) : be(b) { be.hashing_ = be.ctx_.impl().keying = true; }
    ~KeyPass() { be.hashing_ = be.ctx_.impl().keying = false; }
    KeyPass(const KeyPass&) = delete;
    KeyPass& operator=(const KeyPass&) = delete;
    CudaBackend& be;
  };

  /// During run_graph's key pass: appends the op's arguments to key_ and returns true (the op
  /// then launches nothing); false otherwise. Every op that enqueues work calls it first.
  template <typename... A>
  bool keyed(KeyOp op, const A&... a) {
    if (hashing_) key_.op(op, a...);
    return hashing_;
  }

  /// A recorded step and the key of its arguments.
  struct KeyedGraph {
    StepGraph graph;
    StepKey key;
  };
  std::vector<KeyedGraph> graphs_by_rows_[kMatvecMaxRows + 1];  // [rows][run_graph call]
  int graph_calls_ = 0;                                         // run_graph calls since begin_step
  StepKey key_;                                                 // the dry pass's key
  bool hashing_ = false;
  GraphStats stats_;
  StepTimer timer_;  // KVRUN_CUDA_STEP_TIMES=1: reported on stderr when the backend ends
  bool graphs_ = graphs_enabled();
  bool capturing_ = false;
  int graph_failures_ = 0;
  bool warm_[kMatvecMaxRows + 1] = {};  // a step of this many rows has run directly
};

class CudaDevice final : public kvrun::Device {
 public:
  explicit CudaDevice(const DeviceInfo& info) : info_(info) {}
  std::string name() const override { return "CUDA" + std::to_string(info_.index); }
  std::string description() const override {
    return info_.name + " (compute " + std::to_string(info_.cc_major) + "." +
           std::to_string(info_.cc_minor) + ", CUDA runtime " + runtime_version() + ")";
  }
  bool host_memory() const override { return false; }
  int64_t total_memory() const override { return info_.total_bytes; }
  int64_t free_memory() const override {
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(info_.index) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return int64_t(free_b);
  }

  bool supports(Op op, DType a, DType b, int64_t k) const override {
    switch (op) {
      case Op::kGetRows:
        return get_rows_supported(a, k > 0 ? k : kAnyK);
      case Op::kMatmul:
        return matmul_supported(a, k > 0 ? k : kAnyK);
      case Op::kRmsNorm:
      case Op::kRope:
      case Op::kGlu:
      case Op::kAdd:
      case Op::kScale:
      case Op::kCopy:
        return true;
      case Op::kKvStore:
      case Op::kPagedAttention:
        return kv_type_supported(a) && kv_type_supported(b);
      case Op::kMoeRoute:  // mixture of experts: not written for CUDA yet (load refuses)
      case Op::kMatmulId:
      case Op::kLayerNorm:  // encoders (bert): not written for CUDA yet (load refuses)
      case Op::kGelu:
      case Op::kAttention:
      case Op::kAttnSinks:  // gpt-oss's attention sinks: not yet (load refuses)
      case Op::kMla:        // deepseek2's latent attention: not yet (load refuses)
        return false;
      case Op::kKvHostTier:  // pinned, mapped host memory (PinnedBuffer)
      case Op::kAttnParts:   // paged_attention_part / attn_merge
        return true;
    }
    return false;
  }

  std::unique_ptr<kvrun::DeviceBuffer> alloc(size_t bytes, BufferUse use) override {
    if (use == BufferUse::kKvHost) {
      try {
        return std::make_unique<PinnedBuffer>(*this, ctx(), bytes);
      } catch (const CudaError& e) {
        throw std::runtime_error(name() + ": cannot pin " + mib(int64_t(bytes)) +
                                 " of host memory for the KV host tier (lower --kv-host-max or "
                                 "raise --kv-mem) [" +
                                 e.what() + "]");
      }
    }
    if (use == BufferUse::kKv) {  // addresses for the whole budget, memory as blocks come
      ctx().impl().activate();
      if (std::unique_ptr<VmmRange> r = VmmRange::reserve(info_.index, bytes))
        return std::make_unique<VmmBuffer>(*this, std::move(r), bytes);
    }
    try {
      return std::make_unique<SeamBuffer>(*this, ctx(), bytes);
    } catch (const DeviceOutOfMemory& e) {
      throw DeviceOutOfMemory(out_of_memory(int64_t(bytes), use == BufferUse::kKv
                                                                ? "the KV cache (lower -c or "
                                                                  "--kv-mem, or use -nkvo)"
                                                                : "activations (lower -b)") +
                              " [" + e.what() + "]");
    }
  }

  std::unique_ptr<kvrun::DeviceBuffer> upload_weight(Tensor& t, bool release_mapped) override {
    if (!weight_type_ok(t.type))
      throw std::runtime_error(name() + ": weight type " + std::string(traits(t.type).name) +
                               " is not supported by the CUDA backend");
    if (!t.is_contiguous())
      throw std::runtime_error(name() + ": a weight must be contiguous to be uploaded");
    const size_t bytes = t.n_bytes();
    std::unique_ptr<SeamBuffer> buf;
    try {
      buf = std::make_unique<SeamBuffer>(*this, ctx(), bytes);
    } catch (const DeviceOutOfMemory& e) {
      throw DeviceOutOfMemory(out_of_memory(int64_t(bytes), "a weight (lower -ngl)") + " [" +
                              e.what() + "]");
    }
    // q4_0 / q8_0 / q6_K matrices go up in the split layout (16-byte loads of their quants);
    // q4_K / q5_K too with KVRUN_CUDA_SPLIT_K=1 (Context::Impl::split_k_quants).
    const bool k_quant = t.type == DType::Q4_K || t.type == DType::Q5_K;
    const bool split = split_layout_supported(t.type) && t.n_rows() > 1 &&
                       (!k_quant || ctx().impl().split_k_quants);
    std::vector<uint8_t> staged;
    if (split) staged = split_weight(t);
    {
      std::lock_guard<std::mutex> lock(mu_);
      Context& c = *ctx_;
      c.impl().activate();
      check(cudaMemcpy(buf->data(), split ? staged.data() : t.data, bytes, cudaMemcpyHostToDevice),
            "upload_weight: cudaMemcpy");
    }
    if (release_mapped) gguf::release_mapped_pages(t.data, bytes);  // the copy is on the GPU
    t.data = buf->data();
    t.packed = split ? t.data : nullptr;  // matmul.h: packed = data marks the split layout
    t.device = this;
    return buf;
  }

  std::unique_ptr<Backend> make_backend(int) override {
    return std::make_unique<CudaBackend>(*this, info_.index);
  }

 private:
  Context& ctx() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_) ctx_ = std::make_unique<Context>(info_.index);
    return *ctx_;
  }

  /// "CUDA0: out of memory allocating 512 MiB for <what> (free 100 MiB of 80 GiB)".
  std::string out_of_memory(int64_t bytes, const std::string& what) const {
    const int64_t free = free_memory();
    return name() + ": out of memory allocating " + mib(bytes) + " for " + what + " (free " +
           (free < 0 ? std::string("unknown") : mib(free)) + " of " + mib(info_.total_bytes) + ")";
  }

  DeviceInfo info_;
  std::mutex mu_;
  std::unique_ptr<Context> ctx_;  // alloc's and upload_weight's context
};

}  // namespace

std::vector<kvrun::Device*> seam_devices() {
  // Never destroyed: the CUDA runtime may be torn down before static destructors run.
  static const std::vector<kvrun::Device*>* const owned = [] {
    auto* v = new std::vector<kvrun::Device*>;
    for (const DeviceInfo& d : devices()) v->push_back(new CudaDevice(d));
    return v;
  }();
  return *owned;
}

GraphStats graph_stats(const kvrun::Backend& be) {
  const auto* cb = dynamic_cast<const CudaBackend*>(&be);
  if (!cb) throw std::invalid_argument("graph_stats: not a CUDA backend");
  return cb->stats();
}

}  // namespace kvrun::cuda

// counting_device.h — a CPU device standing in for a GPU in the seam's tests (test_backend_split,
// test_scheduler_oom): it counts uploads, KV allocations and boundary copies, can refuse ops as a
// device without them would, and can run out of memory in the middle of a step.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.h"

namespace kvrun {

/// A CPU device that counts the boundary copies and uploads its backends receive; with
/// `host = false` it says its memory is not the host's, as a GPU would (KvCache then writes its
/// KV rows through a backend of it).
class CountingDevice final : public Device {
 public:
  explicit CountingDevice(const std::string& name) : dev_(make_cpu_device(name)) {}
  std::string name() const override { return dev_->name(); }
  std::string description() const override { return "counting " + dev_->description(); }
  bool host_memory() const override { return host; }
  int64_t total_memory() const override { return dev_->total_memory(); }
  int64_t free_memory() const override { return dev_->free_memory(); }
  bool supports(Op op, DType a, DType b, int64_t k) const override {
    if (refuse_q4_0_kv && (op == Op::kKvStore || op == Op::kPagedAttention) &&
        (a == DType::Q4_0 || b == DType::Q4_0))
      return false;
    if (refuse_moe && (op == Op::kMoeRoute || op == Op::kMatmulId)) return false;
    if (refuse_sinks && op == Op::kAttnSinks) return false;
    if (refuse_mla && op == Op::kMla) return false;
    if (refuse_attn_parts && op == Op::kAttnParts) return false;
    if (op == Op::kMatmul &&
        std::find(refuse_weights.begin(), refuse_weights.end(), a) != refuse_weights.end())
      return false;
    return dev_->supports(op, a, b, k);
  }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes, BufferUse use) override;
  std::unique_ptr<DeviceBuffer> upload_weight(Tensor& t, bool release_mapped) override {
    auto b = dev_->upload_weight(t, release_mapped);
    t.device = this;
    ++uploads;
    return b;
  }
  std::unique_ptr<Backend> make_backend(int n_threads) override;

  bool refuse_q4_0_kv = false;        ///< stands in for a device without q4_0 KV kernels
  bool refuse_moe = false;            ///< stands in for a device without the MoE ops (Vulkan, CUDA)
  bool refuse_sinks = false;          ///< stands in for a device without attention sinks
  bool refuse_mla = false;            ///< stands in for a device without MLA (Vulkan, CUDA)
  bool refuse_attn_parts = false;     ///< stands in for a device without them (Vulkan)
  std::vector<DType> refuse_weights;  ///< weight types its matmul lacks (CUDA: the grid i-quants)
  bool host = true;                   ///< host_memory()
  /// Stand-ins for a device whose memory runs out in the middle of a step (its scratch grows with
  /// the step's rows and the context a query sees): paged_attention throws DeviceOutOfMemory
  /// when the step has more rows than oom_above_rows, or a sequence of it sees more positions
  /// than oom_above_context. oom_thrown counts the throws.
  int64_t oom_above_rows = INT64_MAX;
  int64_t oom_above_context = INT64_MAX;
  int64_t oom_thrown = 0;
  /// KV buffers as a device with virtual memory management gives them (CUDA): an address range
  /// reserved inaccessible (PROT_NONE), pages made read-write only where DeviceBuffer::commit
  /// asks, so a KV write or read outside the committed blocks faults. kv_committed counts the
  /// bytes committed (whole pages); past kv_commit_limit a commit throws DeviceOutOfMemory.
  bool lazy_kv = false;
  int64_t kv_committed = 0;
  int64_t kv_commit_limit = INT64_MAX;
  int kv_allocs = 0;
  int uploads = 0;
  int64_t copies_in = 0;     ///< copy_from calls on this device's backends
  int64_t attn_parts = 0;    ///< paged_attention_part calls on this device's backends
  int64_t upload_bytes = 0;  ///< bytes of Backend::upload calls on this device's backends

 private:
  std::unique_ptr<Device> dev_;
};

/// CountingDevice::lazy_kv's buffer: mmap'ed PROT_NONE, committed by mprotect page by page.
class LazyKvBuffer final : public DeviceBuffer {
 public:
  LazyKvBuffer(CountingDevice& d, size_t bytes) : d_(d), bytes_(bytes) {
    const size_t len = std::max<size_t>(bytes, 1);
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<uint8_t*>(p);
    pages_.assign((len + page_ - 1) / page_, false);
  }
  ~LazyKvBuffer() override { munmap(base_, std::max<size_t>(bytes_, 1)); }
  LazyKvBuffer(const LazyKvBuffer&) = delete;
  LazyKvBuffer& operator=(const LazyKvBuffer&) = delete;
  void* data() const override { return base_; }
  size_t size() const override { return bytes_; }
  Device& device() const override { return d_; }
  void commit(size_t offset, size_t bytes) override {
    if (bytes == 0) return;
    if (offset + bytes > bytes_) throw std::out_of_range("LazyKvBuffer::commit past the end");
    for (size_t pg = offset / page_; pg <= (offset + bytes - 1) / page_; ++pg) {
      if (pages_[pg]) continue;
      if (d_.kv_committed + int64_t(page_) > d_.kv_commit_limit)
        throw DeviceOutOfMemory(d_.name() + ": out of memory for KV blocks (test limit)");
      if (mprotect(base_ + pg * page_, page_, PROT_READ | PROT_WRITE) != 0) throw std::bad_alloc();
      pages_[pg] = true;
      d_.kv_committed += int64_t(page_);
    }
  }

 private:
  const size_t page_ = size_t(sysconf(_SC_PAGESIZE));
  CountingDevice& d_;
  size_t bytes_;
  uint8_t* base_ = nullptr;
  std::vector<bool> pages_;
};

inline std::unique_ptr<DeviceBuffer> CountingDevice::alloc(size_t bytes, BufferUse use) {
  if (use == BufferUse::kKv) ++kv_allocs;
  if (use == BufferUse::kKv && lazy_kv) return std::make_unique<LazyKvBuffer>(*this, bytes);
  return dev_->alloc(bytes, use);
}

/// Forwards every op to a CPU backend; counts the boundary copies into it.
class CountingBackend final : public Backend {
 public:
  CountingBackend(CountingDevice& d, std::unique_ptr<Backend> be) : d_(d), be_(std::move(be)) {}
  Device& device() const override { return d_; }
  int n_threads() const override { return be_->n_threads(); }
  void begin_step(const PageTable& pt) override {
    rows_ = pt.n_tokens;
    context_ = 0;
    for (int64_t i = 0; i < pt.n_seqs; ++i)
      context_ = std::max<int64_t>(context_, pt.pos[pt.seq_indptr[i + 1] - 1] + 1);
    be_->begin_step(pt);
  }
  const int32_t* positions() const override { return be_->positions(); }
  void get_rows(const Tensor& t, const int32_t* ids, int64_t n, float* out) override {
    be_->get_rows(t, ids, n, out);
  }
  void rms_norm(const float* x, const Tensor* w, float* y, int64_t r, int64_t c,
                float eps) override {
    be_->rms_norm(x, w, y, r, c, eps);
  }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    be_->matmul(w, x, n, y);
  }
  void matmul_many(const MatmulOut* o, int n_o, const float* x, int64_t n) override {
    be_->matmul_many(o, n_o, x, n);
  }
  void rope(float* x, int64_t n, int64_t h, int64_t hd, const RopeConfig& c) override {
    be_->rope(x, n, h, hd, c);
  }
  void glu(GluKind k, const float* g, const float* u, float* o, int64_t r, int64_t c) override {
    be_->glu(k, g, u, o, r, c);
  }
  void add(float* y, const float* x, int64_t n) override { be_->add(y, x, n); }
  void add_row(float* y, const Tensor& row, int64_t r, int64_t c) override {
    be_->add_row(y, row, r, c);
  }
  void scale(float* x, int64_t n, float s) override { be_->scale(x, n, s); }
  void softcap(float* x, int64_t n, float cap) override { be_->softcap(x, n, cap); }
  void copy_cols(const float* s, int64_t r, int64_t c, int64_t c0, int64_t n, float* d) override {
    be_->copy_cols(s, r, c, c0, n, d);
  }
  void kv_store(const KvLayer& kv, const PagedAttnParams& p, const float* k,
                const float* v) override {
    be_->kv_store(kv, p, k, v);
  }
  void paged_attention(const KvLayer& kv, const PagedAttnParams& p, const float* q,
                       float* out) override {
    if (rows_ > d_.oom_above_rows || context_ > d_.oom_above_context) {
      ++d_.oom_thrown;
      throw DeviceOutOfMemory(d_.name() +
                              ": out of device memory (a stand-in: " + std::to_string(rows_) +
                              " rows, context " + std::to_string(context_) + ")");
    }
    be_->paged_attention(kv, p, q, out);
  }
  void paged_attention_part(const KvLayer& kv, const PagedAttnParams& p, KvTier tier,
                            const float* q, float* part) override {
    ++d_.attn_parts;
    be_->paged_attention_part(kv, p, tier, q, part);
  }
  void attn_merge(const PagedAttnParams& p, const float* const* parts, int n_parts,
                  int64_t n_tokens, float* out) override {
    be_->attn_merge(p, parts, n_parts, n_tokens, out);
  }
  void upload(void* d, const void* h, size_t n) override {
    d_.upload_bytes += int64_t(n);
    be_->upload(d, h, n);
  }
  void download(void* h, const void* s, size_t n) override { be_->download(h, s, n); }
  void copy_from(Backend& from, const void* src, void* dst, size_t bytes) override {
    ++d_.copies_in;
    be_->copy_from(from, src, dst, bytes);
  }
  void synchronize() override { be_->synchronize(); }
  void moe_route(const float* logits, int64_t n, const MoeRouteParams& p, int32_t* ids,
                 float* weights) override {
    be_->moe_route(logits, n, p, ids, weights);
  }
  void matmul_id(const Tensor& w, const float* x, bool x_per_slot, const int32_t* ids,
                 const float* weights, int64_t n, int64_t n_used, float* y,
                 const Tensor* bias) override {
    be_->matmul_id(w, x, x_per_slot, ids, weights, n, n_used, y, bias);
  }
  void copy_strided(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows,
                    int64_t cols) override {
    be_->copy_strided(src, ss, dst, ds, rows, cols);
  }

 private:
  CountingDevice& d_;
  std::unique_ptr<Backend> be_;
  int64_t rows_ = 0, context_ = 0;  // of the step begun last
};

inline std::unique_ptr<Backend> CountingDevice::make_backend(int n_threads) {
  return std::make_unique<CountingBackend>(*this, dev_->make_backend(n_threads));
}

}  // namespace kvrun

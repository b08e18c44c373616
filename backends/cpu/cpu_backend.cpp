// cpu_backend.cpp — see cpu_backend.h.
#include "cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_info.h"
#include "cpu/cpu_traits.h"
#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/op_profile.h"
#include "cpu/ops.h"
#include "cpu/pack.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "gguf.h"
#include "kv_layout.h"

namespace kvrun::cpu {
namespace {

/// Heap memory (activations, packed weights).
class HeapBuffer final : public DeviceBuffer {
 public:
  HeapBuffer(Device& dev, kvrun::Buffer b) : dev_(dev), buf_(std::move(b)) {}
  void* data() const override { return const_cast<void*>(buf_.data()); }
  size_t size() const override { return buf_.size(); }
  Device& device() const override { return dev_; }

 private:
  Device& dev_;
  kvrun::Buffer buf_;
};

/// Address space reserved with mmap (KV rows): pages cost RAM only once written.
class MappedBuffer final : public DeviceBuffer {
 public:
  MappedBuffer(Device& dev, size_t bytes) : dev_(dev), size_(bytes) {
    void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = p;
  }
  ~MappedBuffer() override { munmap(data_, std::max<size_t>(size_, 1)); }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  Device& device() const override { return dev_; }

 private:
  Device& dev_;
  void* data_ = nullptr;
  size_t size_;
};

/// MemTotal / MemAvailable of /proc/meminfo in bytes (−1 when unreadable).
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string k;
  int64_t kb = 0;
  std::string unit;
  while (f >> k >> kb >> unit)
    if (k == key + ":") return kb * 1024;
  return -1;
}

bool is_kv_type(DType t) {
  return std::find(std::begin(kKvCacheTypes), std::end(kKvCacheTypes), t) !=
         std::end(kKvCacheTypes);
}

/// Bytes of a weight's rows (all of them: a matmul reads each once).
int64_t weight_bytes(const Tensor& w) { return int64_t(w.nb[1]) * w.ne[1] * w.ne[2] * w.ne[3]; }

/// Bytes of the experts of the 3-D weight w that `ids` (n_pairs of them) name, each once.
int64_t expert_bytes(const Tensor& w, const int32_t* ids, int64_t n_pairs) {
  std::vector<bool> seen(size_t(w.ne[2]), false);
  int64_t n = 0;
  for (int64_t i = 0; i < n_pairs; ++i)
    if (ids[i] >= 0 && ids[i] < w.ne[2] && !seen[size_t(ids[i])]) {
      seen[size_t(ids[i])] = true;
      ++n;
    }
  return n * int64_t(w.nb[2]);
}

/// Ops are timed (op_profile.h) when KVRUN_PROFILE is set; the table goes to stderr when the
/// backend is destroyed.
class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    if (!op_profile_enabled()) return;
    const std::string r = op_profile_report();
    if (!r.empty()) std::fprintf(stderr, "%s", r.c_str());
    op_profile_reset();
  }
  CpuBackend(Device& dev, int n_threads)
      : dev_(dev), pool_(n_threads > 0 ? n_threads : physical_cores()) {}
  Device& device() const override { return dev_; }
  int n_threads() const override { return pool_.size(); }

  /// Runs fn(r0, r1) over row ranges of [0, rows) on the pool, for ops whose rows (of `cols`
  /// values each) are computed independently, so the split changes no result. Chunks of at least
  /// 16K values: a decode row stays on the calling thread.
  template <typename Fn>
  void on_rows(int64_t rows, int64_t cols, const Fn& fn) {
    pool_.run(rows, fn, min_chunk_rows(cols));
  }
  /// Rows of `cols` values in the smallest chunk on_rows hands a thread.
  static int64_t min_chunk_rows(int64_t cols) {
    constexpr int64_t kMinChunkValues = 16 * 1024;
    return std::max<int64_t>(1, kMinChunkValues / std::max<int64_t>(1, cols));
  }

  void begin_step(const PageTable& pt) override {
    pt_ = pt;
    seqs_.resize(size_t(pt.n_seqs));
    for (int64_t i = 0; i < pt.n_seqs; ++i) {
      PagedSeq& s = seqs_[size_t(i)];
      s.block_table = pt.block_ids + pt.block_indptr[i];
      s.q0 = pt.seq_indptr[i];
      s.n_q = pt.seq_indptr[i + 1] - pt.seq_indptr[i];
      s.pos0 = s.n_q > 0 ? pt.pos[s.q0] : 0;
    }
  }
  const int32_t* positions() const override { return pt_.pos; }

  void get_rows(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    OpTimer t("get_rows", table.type);
    cpu::get_rows(table, ids, n, out);
  }
  void rms_norm(const float* x, const Tensor* w, float* y, int64_t rows, int64_t cols,
                float eps) override {
    OpTimer t("rms_norm");
    const float* wd = w ? static_cast<const float*>(w->data) : nullptr;
    on_rows(rows, cols, [&](int64_t r0, int64_t r1) {
      cpu::rms_norm(x + r0 * cols, wd, y + r0 * cols, r1 - r0, cols, eps);
    });
  }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    OpTimer t("matmul", w.type, weight_bytes(w));
    cpu::matmul(pool_, w, x, n, y);
  }
  void matmul_many(const MatmulOut* outs, int n_outs, const float* x, int64_t n) override {
    OpTimer t("matmul_many", n_outs > 0 ? outs[0].w->type : DType::F32);
    if (t.on()) {
      int64_t b = 0;
      for (int i = 0; i < n_outs; ++i) b += weight_bytes(*outs[i].w);
      t.set_weight_bytes(b);
    }
    // One call (activations converted once, one pool job) when the weights pair with the same
    // activation type, else one call each.
    bool same = true;
    for (int i = 1; i < n_outs; ++i)
      same = same && cpu_traits(outs[i].w->type)->act_type == cpu_traits(outs[0].w->type)->act_type;
    if (same) {
      cpu::matmul_many(pool_, outs, n_outs, x, n);
      return;
    }
    for (int i = 0; i < n_outs; ++i) cpu::matmul(pool_, *outs[i].w, x, n, outs[i].y);
  }
  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
            const RopeConfig& cfg) override {
    OpTimer t("rope");
    cpu::rope(x, n, n_heads, head_dim, pt_.pos, cfg);
  }
  void glu(GluKind kind, const float* gate, const float* up, float* out, int64_t rows,
           int64_t cols) override {
    OpTimer t("glu");
    using GluFn = void (*)(const float*, const float*, float*, int64_t, int64_t);
    const GluFn fn = kind == GluKind::kGeGlu       ? cpu::geglu
                     : kind == GluKind::kSwiGluOai ? cpu::swiglu_oai
                                                   : static_cast<GluFn>(cpu::swiglu);
    on_rows(rows, cols, [&](int64_t r0, int64_t r1) {
      fn(gate + r0 * cols, up + r0 * cols, out + r0 * cols, r1 - r0, cols);
    });
  }
  void add(float* y, const float* x, int64_t n) override {
    OpTimer t("add");
    cpu::add(y, x, n);
  }
  void add_row(float* y, const Tensor& row, int64_t rows, int64_t cols) override {
    OpTimer t("add_row");
    const float* b = static_cast<const float*>(row.data);
    for (int64_t r = 0; r < rows; ++r) cpu::add(y + r * cols, b, cols);
  }
  void scale(float* x, int64_t n, float s) override {
    OpTimer t("scale");
    cpu::scale(x, n, s);
  }
  void softcap(float* x, int64_t n, float cap) override {
    OpTimer t("softcap");
    cpu::softcap(x, n, cap);
  }
  void copy_cols(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                 float* dst) override {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * cols + c0, n, dst + r * n);
  }
  void copy_strided(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                    int64_t rows, int64_t cols) override {
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(src + r * src_stride, cols, dst + r * dst_stride);
  }
  void kv_store(const KvLayer& kv, const PagedAttnParams& p, const float* k,
                const float* v) override {
    OpTimer t("kv_store", kv.k_type, kv.v_type);
    // Each token's row is encoded on its own. A step of few rows (decode) is one call on this
    // thread; a prefill's rows split over the pool, after the shapes are checked here (an error
    // thrown on a worker would end the process).
    const int64_t row_values = p.attn.n_head_kv * (p.attn.head_dim + p.attn.head_dim_v);
    int64_t rows = 0;
    for (const PagedSeq& seq : seqs_) rows += seq.n_q;
    if (rows < 2 * min_chunk_rows(row_values)) {
      paged_kv_store(kv, p, seqs_.data(), int64_t(seqs_.size()), k, v);
      return;
    }
    paged_kv_store(kv, p, nullptr, 0, k, v);
    for (const PagedSeq& seq : seqs_)
      on_rows(seq.n_q, row_values, [&](int64_t i0, int64_t i1) {
        PagedSeq part = seq;
        part.pos0 += i0;
        part.q0 += i0;
        part.n_q = i1 - i0;
        paged_kv_store(kv, p, &part, 1, k, v);
      });
  }
  void paged_attention(const KvLayer& kv, const PagedAttnParams& p, const float* q,
                       float* out) override {
    OpTimer t("paged_attention", kv.k_type, kv.v_type);
    cpu::paged_attention(pool_, kv, p, seqs_.data(), int64_t(seqs_.size()), q, out);
  }
  void paged_attention_part(const KvLayer& kv, const PagedAttnParams& p, KvTier tier,
                            const float* q, float* part) override {
    OpTimer t("paged_attention_part", kv.k_type, kv.v_type);
    cpu::paged_attention_states(pool_, kv, p, tier, seqs_.data(), int64_t(seqs_.size()), q, part);
  }
  void attn_merge(const PagedAttnParams& p, const float* const* parts, int n_parts,
                  int64_t n_tokens, float* out) override {
    const int64_t nh = p.attn.n_head, hdv = p.attn.head_dim_v, sf = attn_state_floats(hdv);
    pool_.run(n_tokens * nh, [&](int64_t begin, int64_t end) {
      const size_t np = static_cast<size_t>(n_parts);
      std::vector<float> m(np), l(np);
      std::vector<const float*> acc(np);
      for (int64_t i = begin; i < end; ++i) {  // i = row · n_head + head
        for (int k = 0; k < n_parts; ++k) {
          const float* st = parts[k] + i * sf;
          m[size_t(k)] = st[0];
          l[size_t(k)] = st[1];
          acc[size_t(k)] = st + 2;
        }
        cpu::attn_merge_partials(n_parts, m.data(), l.data(), acc.data(), hdv, out + i * hdv,
                                 p.sinks ? p.sinks + i % nh : nullptr);
      }
    });
  }
  void upload(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override {
    std::memcpy(host, src, bytes);
  }
  void copy_from(Backend& from, const void* src, void* dst, size_t bytes) override {
    from.download(dst, src, bytes);  // waits for `from` (a GPU stream) before its bytes
  }
  void synchronize() override {}  // every op returned finished

  void moe_route(const float* logits, int64_t n, const MoeRouteParams& p, int32_t* ids,
                 float* weights) override {
    OpTimer t("moe_route");
    cpu::moe_route(logits, n, p, ids, weights);
  }
  void matmul_id(const Tensor& w, const float* x, bool x_per_slot, const int32_t* ids,
                 const float* weights, int64_t n, int64_t n_used, float* y,
                 const Tensor* bias) override {
    OpTimer t("matmul_id", w.type);
    if (t.on()) t.set_weight_bytes(expert_bytes(w, ids, n * n_used));
    const int64_t m = w.ne[1];
    if (bias && (bias->type != DType::F32 || bias->ne[0] != m || bias->ne[1] != w.ne[2]))
      throw std::invalid_argument("matmul_id: the bias must be f32 [m, n_expert]");
    float* ys = y;  // the per-slot outputs: y itself, or before the weighted sum moe_tmp_
    if (weights) {
      moe_tmp_.resize(size_t(n * n_used * m));
      ys = moe_tmp_.data();
    }
    cpu::matmul_id(pool_, w, x, x_per_slot, ids, n, n_used, ys);
    if (bias) cpu::moe_add_bias(ys, static_cast<const float*>(bias->data), ids, n, n_used, m);
    if (weights) cpu::moe_combine(ys, weights, n, n_used, m, y);
  }

  void layer_norm(const float* x, const Tensor* w, const Tensor* b, float* y, int64_t rows,
                  int64_t cols, float eps) override {
    OpTimer t("layer_norm");
    cpu::layer_norm(x, w ? static_cast<const float*>(w->data) : nullptr,
                    b ? static_cast<const float*>(b->data) : nullptr, y, rows, cols, eps);
  }
  void gelu(const float* x, float* y, int64_t n) override {
    OpTimer t("gelu");
    cpu::gelu(x, y, n);
  }
  void attention(const AttnParams& p, const float* q, const float* k, const float* v,
                 float* out) override {
    OpTimer t("attention");
    cpu::encoder_attention(pool_, p, seqs_.data(), int64_t(seqs_.size()), q, k, v, out);
  }

 private:
  Device& dev_;
  ThreadPool pool_;
  std::vector<float> moe_tmp_;  ///< the experts' outputs before matmul_id's weighted sum
  PageTable pt_;
  std::vector<PagedSeq> seqs_;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return cpu_features_string(); }
  bool host_memory() const override { return true; }
  int64_t total_memory() const override { return meminfo_bytes("MemTotal"); }
  int64_t free_memory() const override { return meminfo_bytes("MemAvailable"); }

  bool supports(Op op, DType a, DType b, int64_t k) const override {
    switch (op) {
      case Op::kMatmul:
      case Op::kMatmulId:
        return k > 0 ? matmul_supports(a, k) : cpu_traits(a) != nullptr;
      case Op::kGetRows:
        return traits(a).to_float != nullptr;
      case Op::kKvStore:
      case Op::kPagedAttention:
        return is_kv_type(a) && is_kv_type(b);
      default:
        return true;
    }
  }

  std::unique_ptr<DeviceBuffer> alloc(size_t bytes, BufferUse use) override {
    if (use == BufferUse::kKv || use == BufferUse::kKvHost)  // (host memory: both tiers alike)
      return std::make_unique<MappedBuffer>(*this, bytes);
    return std::make_unique<HeapBuffer>(*this, kvrun::Buffer(bytes));
  }

  std::unique_ptr<DeviceBuffer> upload_weight(Tensor& t, bool release_mapped) override {
    t.device = this;
    // The experts of a 3-D weight [k, m, n_expert] pack as one [k, m·n_expert] matrix: with m a
    // multiple of 16 no group straddles two experts, so expert e's groups follow expert e−1's.
    Tensor flat = t;
    if (t.ne[2] > 1 && t.ne[3] == 1 && t.ne[1] % kPackRows == 0 &&
        t.nb[2] == t.nb[1] * size_t(t.ne[1])) {
      flat.ne[1] *= t.ne[2];
      flat.ne[2] = 1;
      flat.nb[3] = flat.nb[2] = t.nb[2] * size_t(t.ne[2]);
    }
    if (!pack_supported(flat)) return keep_in_memory(t, release_mapped);
    auto buf = std::make_unique<HeapBuffer>(*this, pack_weight(flat));
    t.packed = buf->data();
    // A tied token embedding still reads its rows through `data`: the lookup faults in the few
    // pages it needs again (the mapping is read-only, so nothing is lost).
    if (release_mapped) gguf::release_mapped_pages(t.data, flat.nb[1] * size_t(flat.ne[1]));
    return buf;
  }

  std::unique_ptr<Backend> make_backend(int n_threads) override {
    return std::make_unique<CpuBackend>(*this, n_threads);
  }

 private:
  /// Weights of at most this many bytes that have no packed layout are copied out of the file
  /// mapping (norms, biases, MoE routers); larger ones stay mapped, so a model whose matrices
  /// have no packed kernel (f16, bf16, the i-quants) still runs from the page cache.
  static constexpr size_t kKeepBytes = size_t(16) << 20;

  /// For a mapped weight (`release_mapped`) of at most kKeepBytes without a packed layout: a copy
  /// in host memory that t.data then points to, its mapped pages given back, so that the
  /// per-step reads of norms and routers never wait on the page cache or the disk (qwen3-30b-a3b
  /// on a 24 GiB machine: its f32 routers 1.2–2.6× as fast, docs/benchmarks.md); null otherwise
  /// (t stays a view of the mapping).
  std::unique_ptr<DeviceBuffer> keep_in_memory(Tensor& t, bool release_mapped) {
    if (!release_mapped || !t.data) return nullptr;
    const size_t bytes = t.nb[3] * size_t(t.ne[3]);
    if (bytes == 0 || bytes > kKeepBytes) return nullptr;
    auto buf = std::make_unique<HeapBuffer>(*this, kvrun::Buffer(bytes));
    std::memcpy(buf->data(), t.data, bytes);
    gguf::release_mapped_pages(t.data, bytes);
    t.data = buf->data();
    return buf;
  }

  std::string name_;
};

}  // namespace

std::unique_ptr<Device> make_device(const std::string& name) {
  return std::make_unique<CpuDevice>(name);
}

}  // namespace kvrun::cpu

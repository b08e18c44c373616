// vulkan_backend.cpp — see vulkan_backend.h.
#include "vulkan/vulkan_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_grids.h"
#include "vulkan/vk_paged.h"

namespace kvrun::vulkan {
namespace {

/// The weight types of get_rows and matmul, and their shader suffixes.
const char* weight_suffix(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q4_1:
      return "q4_1";
    case DType::Q5_0:
      return "q5_0";
    case DType::Q5_1:
      return "q5_1";
    case DType::Q2_K:
      return "q2_k";
    case DType::Q3_K:
      return "q3_k";
    case DType::IQ4_NL:
      return "iq4_nl";
    case DType::IQ4_XS:
      return "iq4_xs";
    case DType::MXFP4:
      return "mxfp4";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q5_K:
      return "q5_k";
    case DType::Q6_K:
      return "q6_k";
    case DType::IQ2_XXS:
      return "iq2_xxs";
    case DType::IQ2_XS:
      return "iq2_xs";
    case DType::IQ2_S:
      return "iq2_s";
    case DType::IQ3_XXS:
      return "iq3_xxs";
    case DType::IQ3_S:
      return "iq3_s";
    case DType::IQ1_S:
      return "iq1_s";
    case DType::IQ1_M:
      return "iq1_m";
    default:
      return nullptr;
  }
}

uint64_t addr(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

/// `v` as a shader's 32-bit count; throws std::invalid_argument naming `what` when it does not
/// fit (the shaders index with 32-bit integers).
uint32_t u32(int64_t v, const char* what) {
  if (v < 0 || v > int64_t(UINT32_MAX))
    throw std::invalid_argument(std::string("Vulkan: ") + what + " = " + std::to_string(v) +
                                " is outside the 32-bit range the shaders index");
  return uint32_t(v);
}

/// Workgroups for a grid-stride loop over `n` items with 64-thread groups.
uint32_t stride_groups(uint32_t n) { return std::clamp<uint32_t>((n + 63) / 64, 1, 65535); }

/// A VkBuffer owned through the seam; data() is its device address.
class VulkanBuffer final : public DeviceBuffer {
 public:
  VulkanBuffer(Device& dev, Context& ctx, Allocation* a) : dev_(dev), ctx_(ctx), a_(a) {}
  ~VulkanBuffer() override { ctx_.release(a_); }
  void* data() const override { return reinterpret_cast<void*>(uintptr_t(a_->address)); }
  /// The host mapping of a host-tier buffer (BufferUse::kKvHost); null for device memory.
  void* host_data() const override { return a_->mapped; }
  size_t size() const override { return a_->size; }
  Device& device() const override { return dev_; }

 private:
  Device& dev_;
  Context& ctx_;
  Allocation* a_;
};

// Push-constant blocks: the same layout as each shader's `Push` (addresses first, as uvec2).
struct EltwisePush {
  uint64_t a, b, c;
  uint32_t n, op, cols, c0, n_out;
  float s;
};
enum EltOp : uint32_t { kAdd, kAddRow, kScale, kSoftcap, kSwiGlu, kGeGlu, kCopyCols };
struct RmsNormPush {
  uint64_t x, w, y;
  uint32_t rows, cols;
  float eps;
};
struct RopePush {
  uint64_t x, pos, factors;
  uint32_t n, n_heads, head_dim, half_rot, neox;
  float theta_scale, freq_scale, mscale;
};
struct GetRowsPush {
  uint64_t table, ids, out, grid;
  uint32_t cols, row_bytes, n;
};
struct MatvecPush {
  uint64_t w, x, y, grid;
  uint32_t k, m, row_bytes;
};
struct MatmulPush {
  uint64_t w, x, y, grid;
  uint32_t k, m, n, row_bytes;
};
struct QuantizeQ8Push {
  uint64_t x, qs, ds;
  uint32_t n_blocks;
};
struct MatvecDotPush {
  uint64_t w, qs, ds, y;
  uint32_t k, m, row_bytes;
};
struct KvStorePush {
  uint64_t k, v, dst;
  uint32_t n_rows, k_n, v_n, k_type, v_type, n_head_kv;
};
struct AttnPush {
  uint64_t q, out, part, blocks, rows;
  uint32_t n_head, n_head_kv, group, head_dim, head_dim_v, block_size, k_row_bytes, v_row_bytes,
      k_type, v_type, window, seg_len, n_seg;
  float scale, softcap;
  uint32_t states;
};
struct MergePush {
  uint64_t part, out;
  uint32_t n_head, head_dim_v, n_seg, states;
};
struct MergePartsPush {
  uint64_t parts[4], out;
  uint32_t n_parts, n_head, head_dim_v;
};
static_assert(sizeof(AttnPush) <= kPushBytes && sizeof(RopePush) <= kPushBytes &&
              sizeof(MergePartsPush) <= kPushBytes);

/// Context positions per attention segment (a workgroup's share of a long context; the
/// segments are merged by log-sum-exp).
constexpr int64_t kAttnSegment = 512;

/// Throws std::invalid_argument unless the Vulkan KV ops take this layer and call; `store`: for
/// kv_store on a device with (`float64`) or without shaderFloat64, which the nvfp4 encoder needs.
void check_paged(const KvLayer& kv, const PagedAttnParams& p, bool store = false,
                 bool float64 = true) {
  const AttnParams& a = p.attn;
  auto fail = [](const std::string& why) {
    throw std::invalid_argument("Vulkan kv_store / paged_attention: " + why);
  };
  if (kv_code(kv.k_type) < 0 || kv_code(kv.v_type) < 0)
    fail(std::string("K/V types ") + traits(kv.k_type).name + "/" + traits(kv.v_type).name +
         " are not supported");
  if (store && !float64 && (kv.k_type == DType::NVFP4 || kv.v_type == DType::NVFP4))
    fail(
        "the nvfp4 encoder needs shaderFloat64 (its block errors are float64, as the "
        "CPU's), which this device does not have");
  if (p.rotate) fail("--kv-rotate (Hadamard-rotated K) is not supported");
  if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv) fail("n_head must be a multiple of n_head_kv");
  if (a.head_dim > 256 || a.head_dim_v > 256) fail("head_dim and head_dim_v must be ≤ 256");
  // f16 / bf16 rows are written a 32-bit word (two values) at a time; blocks are read from a
  // 4-byte aligned start (q8_0, q4_0 and fp8 rows may start inside a word: the store merges
  // bytes).
  auto words = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  if ((words(kv.k_type) && kv.k_row_bytes % 4) || (words(kv.v_type) && kv.v_row_bytes % 4))
    fail("f16 / bf16 rows of an odd number of values are not supported");
  if ((kv.block_size * kv.k_row_bytes) % 4 || (kv.block_size * kv.v_row_bytes) % 4)
    fail(
        "a block of q8_0 / q4_0 / fp8 / nvfp4 rows must be a multiple of 4 bytes "
        "(block_size 4, 8, …)");
}

/// Activation rows up to this use the matrix-vector shader; more use the tiled one.
constexpr int64_t kMatvecMaxRows = 4;

/// The weight types of the int8 dot-product matvec (matvec_dot.comp), used for one activation
/// row (a decode step): 2–4 rows (a prompt's last chunk, small decode batches) keep the f32
/// matvec, so a prompt's rows all see f32 activations as in the tiled prefill (mixing the two
/// within one prompt moved tiny-qwen3's prompt logits further from the CPU's, test_gpu_e2e).
bool int8_dot_type(DType t) { return t == DType::Q8_0 || t == DType::Q4_0; }

/// The budget KVRUN_VULKAN_BUDGET forces on every Vulkan device (a byte count: what a smaller
/// GPU would have, for tests and for leaving room to other programs), or −1 when unset. Throws
/// std::invalid_argument naming the variable when it is not a byte count.
int64_t forced_budget() {
  const char* e = std::getenv("KVRUN_VULKAN_BUDGET");
  if (!e || !*e) return -1;
  const std::string v(e);
  if (v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("KVRUN_VULKAN_BUDGET=" + v + ": expected a byte count");
  return std::stoll(v);
}

/// Throws DeviceOutOfMemory ("out of device memory", what, the bytes needed and available)
/// when `bytes` more do not fit d.free_memory(): said before the driver's allocation fails, and
/// where a forced budget is smaller than the device.
void check_fits(const Device& d, size_t bytes, const char* what) {
  const int64_t free = d.free_memory();
  if (free >= 0 && int64_t(bytes) > free)
    throw DeviceOutOfMemory(d.name() + ": out of device memory: " + what + " of " +
                            std::to_string(bytes) + " bytes does not fit the " +
                            std::to_string(free) + " bytes available" +
                            (forced_budget() >= 0 ? " (KVRUN_VULKAN_BUDGET)" : ""));
}

/// Whether a backend made now uses the device's int8 dot product: when the device reports it,
/// unless KVRUN_VULKAN_NO_INT8_DOT=1 forces the portable f32 matvec (what a device without it
/// runs; the tests run both paths on one device this way).
bool int8_dot_wanted(const PhysicalDevice& pd) {
  const char* e = std::getenv("KVRUN_VULKAN_NO_INT8_DOT");
  return pd.int8_dot && !(e && std::string(e) == "1");
}

/// Whether a backend made now runs the fp16-arithmetic shaders (the tiled matmul's FP16 variant,
/// the f16 weights' FP16 matvec): when the device reports shaderFloat16, unless
/// KVRUN_VULKAN_NO_FP16=1 forces the portable f32 shaders (what a device without it runs; the
/// tests run both paths on one device this way).
bool fp16_wanted(const PhysicalDevice& pd) {
  const char* e = std::getenv("KVRUN_VULKAN_NO_FP16");
  return pd.float16 && !(e && std::string(e) == "1");
}

/// The grid i-quants' tables (vk_grids.h) in one buffer of a device, uploaded on first use.
class GridBuffer {
 public:
  explicit GridBuffer(Context& ctx) : ctx_(ctx) {}
  ~GridBuffer() { ctx_.release(a_); }
  GridBuffer(const GridBuffer&) = delete;
  GridBuffer& operator=(const GridBuffer&) = delete;

  /// The device address of the grid weight type `t` decodes with; 0 when `t` has none. The
  /// first call uploads the tables on `s` and submits it (so another stream never reads them
  /// before they are there): call it before an op stages anything on `s`.
  uint64_t address(DType t, Stream& s) {
    const int64_t off = iq_grid_offset(t);
    if (off < 0) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (!a_) {
      const std::vector<uint32_t>& w = iq_grid_words();
      Allocation* a = ctx_.allocate(w.size() * 4, false);
      s.upload(a->address, w.data(), w.size() * 4);
      s.flush();
      a_ = a;
    }
    return a_->address + uint64_t(off) * 4;
  }

 private:
  Context& ctx_;
  std::mutex mu_;
  Allocation* a_ = nullptr;
};

class VulkanBackend final : public Backend {
 public:
  VulkanBackend(Device& dev, Context& ctx, GridBuffer& grids)
      : dev_(dev),
        ctx_(ctx),
        grids_(grids),
        s_(ctx),
        int8_dot_(int8_dot_wanted(ctx.physical())),
        fp16_(fp16_wanted(ctx.physical())) {}
  ~VulkanBackend() override {  // s_ drops unsynchronized work
    ctx_.release(pos_);
    ctx_.release(part_);
    ctx_.release(xq_);
  }
  Device& device() const override { return dev_; }
  int n_threads() const override { return 1; }

  void begin_step(const PageTable& pt) override {
    pt_ = pt;
    const size_t bytes = size_t(std::max<int64_t>(pt.n_tokens, 1)) * sizeof(int32_t);
    regrow(pos_, bytes, 4096, "the step's positions");
    if (pt.n_tokens > 0) s_.upload(pos_->address, pt.pos, size_t(pt.n_tokens) * sizeof(int32_t));
  }
  const int32_t* positions() const override {
    return pos_ ? reinterpret_cast<const int32_t*>(uintptr_t(pos_->address)) : nullptr;
  }

  void get_rows(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    const auto hold = s_.hold();  // staged bytes stay until the dispatch is recorded
    const char* suffix = weight_suffix(table.type);
    if (!suffix)
      throw std::invalid_argument(std::string("Vulkan get_rows: table type ") +
                                  traits(table.type).name + " is not supported");
    const uint64_t grid = grids_.address(table.type, s_);  // before anything is staged
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= table.ne[1])
        throw std::out_of_range("get_rows: id " + std::to_string(ids[i]) + " outside [0, " +
                                std::to_string(table.ne[1]) + ")");
    if (n <= 0) return;
    const GetRowsPush p{addr(table.data),
                        s_.stage(ids, size_t(n) * sizeof(int32_t)),
                        addr(out),
                        grid,
                        u32(table.ne[0], "get_rows cols"),
                        u32(int64_t(table.nb[1]), "get_rows row bytes"),
                        u32(n, "get_rows n")};
    s_.dispatch(std::string("get_rows_") + suffix, &p, sizeof p,
                stride_groups(u32(n * table.ne[0], "get_rows n·cols")));
  }

  void rms_norm(const float* x, const Tensor* w, float* y, int64_t rows, int64_t cols,
                float eps) override {
    if (rows <= 0) return;
    u32(rows * cols, "rms_norm rows·cols");
    const RmsNormPush p{addr(x),        w ? addr(w->data) : 0, addr(y),
                        uint32_t(rows), uint32_t(cols),        eps};
    const uint32_t gx = std::min<uint32_t>(uint32_t(rows), 32768);
    s_.dispatch("rms_norm", &p, sizeof p, gx, (uint32_t(rows) + gx - 1) / gx);
  }

  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    const char* suffix = weight_suffix(w.type);
    if (!suffix)
      throw std::invalid_argument(std::string("Vulkan matmul: weight type ") + traits(w.type).name +
                                  " is not supported");
    if (n <= 0) return;
    const uint64_t grid = grids_.address(w.type, s_);
    const int64_t k = w.ne[0], m = w.n_rows();
    u32(n * k, "matmul n·k");
    u32(n * m, "matmul n·m");
    u32(int64_t(w.nb[1]) * m, "matmul weight bytes");
    if (n == 1 && int8_dot_ && int8_dot_type(w.type)) {  // one-row decode (see int8_dot_type)
      matvec_dot(w, x, n, y, suffix);
    } else if (n <= kMatvecMaxRows) {
      const MatvecPush p{addr(w.data), addr(x),     addr(y),          grid,
                         uint32_t(k),  uint32_t(m), uint32_t(w.nb[1])};
      const uint32_t gx = std::min<uint32_t>(uint32_t(m), 32768);
      // f16 weights of even k (whole words per row) on the fp16 path: packed f16 products.
      const bool h = fp16_ && w.type == DType::F16 && k % 2 == 0;
      s_.dispatch(std::string(h ? "matvec_fp16_" : "matvec_") + suffix, &p, sizeof p, gx,
                  (uint32_t(m) + gx - 1) / gx, uint32_t(n));
    } else {
      const MatmulPush p{addr(w.data), addr(x),     addr(y),     grid,
                         uint32_t(k),  uint32_t(m), uint32_t(n), uint32_t(w.nb[1])};
      s_.dispatch(std::string(fp16_ ? "matmul_fp16_" : "matmul_") + suffix, &p, sizeof p,
                  u32((m + 31) / 32, "matmul m"), u32((n + 31) / 32, "matmul n"));
    }
  }

  void matmul_many(const MatmulOut* outs, int n_outs, const float* x, int64_t n) override {
    for (int i = 0; i < n_outs; ++i) matmul(*outs[i].w, x, n, outs[i].y);
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
            const RopeConfig& cfg) override {
    const auto hold = s_.hold();  // staged bytes stay until the dispatch is recorded
    if (cfg.n_rot <= 0 || cfg.n_rot % 2 || cfg.n_rot > head_dim)
      throw std::invalid_argument("Vulkan rope: n_rot " + std::to_string(cfg.n_rot) +
                                  " must be even and within head_dim " + std::to_string(head_dim));
    if (n <= 0) return;
    const int64_t half = cfg.n_rot / 2;
    // freq_factors is host memory (the model passes the GGUF's mapped rope_freqs tensor).
    const uint64_t ff = cfg.freq_factors ? s_.stage(cfg.freq_factors, size_t(half) * 4) : 0;
    const RopePush p{addr(x),
                     addr(positions()),
                     ff,
                     u32(n, "rope n"),
                     u32(n_heads, "rope n_heads"),
                     u32(head_dim, "rope head_dim"),
                     uint32_t(half),
                     cfg.neox ? 1u : 0u,
                     std::pow(cfg.freq_base, -2.0f / float(cfg.n_rot)),
                     cfg.freq_scale,
                     cfg.mscale};
    s_.dispatch("rope", &p, sizeof p, stride_groups(u32(n * n_heads * half, "rope items")));
  }

  void glu(GluKind kind, const float* gate, const float* up, float* out, int64_t rows,
           int64_t cols) override {
    if (kind == GluKind::kSwiGluOai)  // only gpt-oss's experts use it; MoE layers are refused
      throw std::logic_error("glu swiglu_oai is not implemented by the Vulkan backend");
    eltwise(kind == GluKind::kGeGlu ? kGeGlu : kSwiGlu, gate, up, out, rows * cols, 0, 0, 0, 0);
  }
  void add(float* y, const float* x, int64_t n) override {
    eltwise(kAdd, y, x, nullptr, n, 0, 0, 0, 0);
  }
  void add_row(float* y, const Tensor& row, int64_t rows, int64_t cols) override {
    eltwise(kAddRow, y, static_cast<const float*>(row.data), nullptr, rows * cols, cols, 0, 0, 0);
  }
  void scale(float* x, int64_t n, float s) override {
    eltwise(kScale, x, nullptr, nullptr, n, 0, 0, 0, s);
  }
  void softcap(float* x, int64_t n, float cap) override {
    eltwise(kSoftcap, x, nullptr, nullptr, n, 0, 0, 0, cap);
  }
  void copy_cols(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                 float* dst) override {
    eltwise(kCopyCols, src, nullptr, dst, rows * n, cols, c0, n, 0);
  }

  void kv_store(const KvLayer& kv, const PagedAttnParams& p, const float* k,
                const float* v) override {
    check_paged(kv, p, true, ctx_.physical().float64);
    const auto hold = s_.hold();  // staged bytes stay until the dispatch is recorded
    if (pt_.n_tokens <= 0) return;
    const std::vector<uint64_t> dst = kv_store_targets(kv, pt_);
    check_on_device(dst, size_t(kv.k_row_bytes), size_t(kv.v_row_bytes), "kv_store");
    const KvStorePush push{addr(k),
                           addr(v),
                           s_.stage(dst.data(), dst.size() * sizeof(uint64_t)),
                           u32(pt_.n_tokens, "kv_store rows"),
                           u32(p.attn.n_head_kv * p.attn.head_dim, "K row"),
                           u32(p.attn.n_head_kv * p.attn.head_dim_v, "V row"),
                           uint32_t(kv_code(kv.k_type)),
                           uint32_t(kv_code(kv.v_type)),
                           uint32_t(p.attn.n_head_kv)};
    const int64_t words = (kv.k_row_bytes + kv.v_row_bytes) / 4;
    const bool nvfp4 = kv.k_type == DType::NVFP4 || kv.v_type == DType::NVFP4;
    s_.dispatch(nvfp4 ? "kv_store_nvfp4" : "kv_store", &push, sizeof push,
                stride_groups(u32(pt_.n_tokens * words, "kv_store words")));
  }

  void paged_attention(const KvLayer& kv, const PagedAttnParams& p, const float* q,
                       float* out) override {
    attend(kv, p, q, out, KvTier::kAll, nullptr);
  }
  void paged_attention_part(const KvLayer& kv, const PagedAttnParams& p, KvTier tier,
                            const float* q, float* part) override {
    attend(kv, p, q, nullptr, tier, part);
  }
  void attn_merge(const PagedAttnParams& p, const float* const* parts, int n_parts,
                  int64_t n_tokens, float* out) override {
    if (p.sinks)
      throw std::invalid_argument("Vulkan attn_merge: attention sinks are not supported");
    if (n_parts < 1 || n_parts > 4) throw std::invalid_argument("Vulkan attn_merge: 1 to 4 parts");
    if (n_tokens <= 0) return;
    if (n_tokens > 65535) throw std::invalid_argument("Vulkan attn_merge: more than 65535 rows");
    MergePartsPush m{};
    for (int k = 0; k < n_parts; ++k) m.parts[k] = addr(parts[k]);
    m.out = addr(out);
    m.n_parts = uint32_t(n_parts);
    m.n_head = u32(p.attn.n_head, "n_head");
    m.head_dim_v = uint32_t(p.attn.head_dim_v);
    s_.dispatch("attn_merge_parts", &m, sizeof m, uint32_t(n_tokens), m.n_head);
  }

  /// paged_attention (states null) or paged_attention_part (the blocks of `tier` only, each row's
  /// and head's online-softmax state into `states`).
  void attend(const KvLayer& kv, const PagedAttnParams& p, const float* q, float* out, KvTier tier,
              float* states) {
    check_paged(kv, p);
    const auto hold = s_.hold();  // staged bytes stay until the dispatch is recorded
    const AttnParams& a = p.attn;
    const int64_t n_rows = pt_.n_tokens;
    if (n_rows <= 0) return;
    if (n_rows > 65535) throw std::invalid_argument("Vulkan paged_attention: more than 65535 rows");
    const int64_t n_seg = (max_visible(pt_, p.window) + kAttnSegment - 1) / kAttnSegment;
    uint64_t part = 0;
    if (n_seg > 1) {
      const size_t bytes = size_t(n_rows * a.n_head * n_seg * (2 + a.head_dim_v)) * 4;
      regrow(part_, bytes, 0, "attention's split partials");
      part = part_->address;
    } else if (states) {  // one segment: its states are the call's
      part = addr(states);
    }
    const std::vector<uint64_t> blocks = block_addresses(kv, pt_, tier);
    check_on_device(blocks, size_t(kv.block_size * kv.k_row_bytes),
                    size_t(kv.block_size * kv.v_row_bytes), "paged_attention");
    const std::vector<int32_t> rows = row_info(pt_);
    const AttnPush push{addr(q),
                        addr(out),
                        part,
                        s_.stage(blocks.data(), blocks.size() * sizeof(uint64_t)),
                        s_.stage(rows.data(), rows.size() * sizeof(int32_t)),
                        u32(a.n_head, "n_head"),
                        uint32_t(a.n_head_kv),
                        uint32_t(a.n_head / a.n_head_kv),
                        uint32_t(a.head_dim),
                        uint32_t(a.head_dim_v),
                        u32(kv.block_size, "block_size"),
                        u32(kv.k_row_bytes, "K row bytes"),
                        u32(kv.v_row_bytes, "V row bytes"),
                        uint32_t(kv_code(kv.k_type)),
                        uint32_t(kv_code(kv.v_type)),
                        u32(p.window, "window"),
                        uint32_t(kAttnSegment),
                        uint32_t(n_seg),
                        a.scale,
                        p.softcap,
                        states ? 1u : 0u};
    s_.dispatch("attention", &push, sizeof push, u32(n_rows, "attention rows"), push.n_head,
                push.n_seg);
    if (n_seg > 1) {
      const MergePush m{part,        states ? addr(states) : addr(out),
                        push.n_head, push.head_dim_v,
                        push.n_seg,  states ? 1u : 0u};
      s_.dispatch("attn_merge", &m, sizeof m, uint32_t(n_rows), push.n_head);
    }
  }

  void upload(void* dst, const void* host, size_t bytes) override {
    s_.upload(addr(dst), host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    s_.download(host, addr(src), bytes);
  }
  void copy_from(Backend& from, const void* src, void* dst, size_t bytes) override {
    if (from.device().host_memory()) {
      from.synchronize();
      s_.upload(addr(dst), src, bytes);
    } else if (auto* vb = dynamic_cast<VulkanBackend*>(&from); vb && &vb->ctx_ == &ctx_) {
      from.synchronize();
      s_.copy(addr(dst), addr(src), bytes);
    } else {  // another device: through the host
      std::vector<uint8_t> tmp(bytes);
      from.download(tmp.data(), src, bytes);
      s_.upload(addr(dst), tmp.data(), bytes);
    }
  }
  void synchronize() override { s_.flush(); }

 private:
  /// Makes `a` (a scratch buffer of this backend) at least `bytes` long: when it is shorter, the
  /// recorded ops (which may still read it) are submitted, it is given back and max(bytes, min)
  /// bytes are allocated. Throws DeviceOutOfMemory (naming `what`, the bytes and what is
  /// available) when they do not fit the device's free memory (Device::free_memory: the forced
  /// budget, VK_EXT_memory_budget or the heap), before the driver is asked; `a` is then null.
  void regrow(Allocation*& a, size_t bytes, size_t min, const char* what) {
    if (a && a->size >= bytes) return;
    s_.flush();
    ctx_.release(a);
    a = nullptr;
    const size_t n = std::max(bytes, min);
    check_fits(dev_, n, what);
    a = ctx_.allocate(n, false);
  }

  /// The decode matvec of a q8_0 / q4_0 weight with the int8 dot product: x quantized to q8_0
  /// blocks (quantize_q8.comp) into the backend's scratch, then matvec_dot.comp.
  void matvec_dot(const Tensor& w, const float* x, int64_t n, float* y, const char* suffix) {
    const int64_t k = w.ne[0], m = w.n_rows(), nb = n * k / 32;
    const size_t bytes = size_t(nb) * 36;  // 8 words of codes + an f32 scale per block
    regrow(xq_, bytes, 64 << 10, "the q8_0 activations");
    const uint64_t qs = xq_->address, ds = qs + uint64_t(nb) * 32;
    const QuantizeQ8Push q{addr(x), qs, ds, uint32_t(nb)};
    s_.dispatch("quantize_q8", &q, sizeof q, stride_groups(q.n_blocks));
    const MatvecDotPush p{addr(w.data),     qs, ds, addr(y), uint32_t(k), uint32_t(m),
                          uint32_t(w.nb[1])};
    const uint32_t gx = std::min<uint32_t>(uint32_t(m), 32768);
    s_.dispatch(std::string("matvec_dot_") + suffix, &p, sizeof p, gx, (uint32_t(m) + gx - 1) / gx,
                uint32_t(n));
  }

  void eltwise(EltOp op, const void* a, const void* b, void* c, int64_t n, int64_t cols, int64_t c0,
               int64_t n_out, float s) {
    if (n <= 0) return;
    const EltwisePush p{addr(a),       addr(b),         addr(c), u32(n, "n"), op, u32(cols, "cols"),
                        u32(c0, "c0"), u32(n_out, "n"), s};
    s_.dispatch("eltwise", &p, sizeof p, stride_groups(p.n));
  }

  /// Throws std::invalid_argument unless every (K, V) address pair of `a` (0: skipped) starts
  /// `k_bytes` / `v_bytes` inside one buffer of this device: KV rows in host memory that is not
  /// one of its buffers (the CPU's file tier, rows kept on the host) must never reach a shader.
  /// (The host tier, BufferUse::kKvHost, is such a buffer: its blocks are read in place.)
  void check_on_device(const std::vector<uint64_t>& a, size_t k_bytes, size_t v_bytes,
                       const char* op) const {
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == 0) continue;
      try {
        ctx_.locate(a[i], i % 2 ? v_bytes : k_bytes);
      } catch (const VulkanError&) {
        throw std::invalid_argument(std::string("Vulkan ") + op + ": KV rows outside " +
                                    dev_.name() + "'s memory (a host or slow-tier block)");
      }
    }
  }

  Device& dev_;
  Context& ctx_;
  GridBuffer& grids_;
  Stream s_;
  PageTable pt_;
  Allocation* pos_ = nullptr;
  Allocation* part_ = nullptr;  // attention's per-segment partial states
  const bool int8_dot_;         // int8_dot_wanted() when made
  const bool fp16_;             // fp16_wanted() when made
  Allocation* xq_ = nullptr;    // matvec_dot's q8_0 activations
};

class VulkanDevice final : public Device {
 public:
  VulkanDevice(std::string name, const PhysicalDevice& pd) : name_(std::move(name)), pd_(pd) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return pd_.name + " (Vulkan " + std::to_string(VK_API_VERSION_MAJOR(pd_.api_version)) + "." +
           std::to_string(VK_API_VERSION_MINOR(pd_.api_version)) + ", subgroup " +
           std::to_string(pd_.subgroup_size) + (pd_.software ? ", software" : "") +
           (pd_.float16 ? ", fp16" : "") +
           (pd_.int8_dot ? (pd_.int8_dot_accelerated ? ", int8 dot" : ", int8 dot (emulated)")
                         : "") +
           ")";
  }
  bool host_memory() const override { return false; }
  int64_t total_memory() const override { return pd_.local_bytes; }
  /// KVRUN_VULKAN_BUDGET (forced_budget) less this device's allocations; else what
  /// VK_EXT_memory_budget says is left (every process counted); else the largest device-local
  /// heap less this device's allocations (other processes not seen).
  int64_t free_memory() const override {
    const int64_t forced = forced_budget();
    if (forced >= 0) return std::max<int64_t>(0, forced - used_bytes());
    const int64_t b = heap_budget_free(pd_);
    if (b >= 0) return b;
    return pd_.local_bytes < 0 ? -1 : std::max<int64_t>(0, pd_.local_bytes - used_bytes());
  }

  bool supports(Op op, DType a, DType b, int64_t k) const override {
    switch (op) {
      case Op::kGetRows:
        return weight_suffix(a) != nullptr;
      case Op::kMatmul:
        return weight_suffix(a) != nullptr && (k <= 0 || k % traits(a).block_elems == 0);
      case Op::kRmsNorm:
      case Op::kRope:
      case Op::kGlu:
      case Op::kAdd:
      case Op::kScale:
      case Op::kCopy:
        return true;
      case Op::kKvStore:  // the nvfp4 encoder needs shaderFloat64 (check_paged says so)
        if ((a == DType::NVFP4 || b == DType::NVFP4) && !pd_.float64) return false;
        return kv_code(a) >= 0 && kv_code(b) >= 0;
      case Op::kPagedAttention:
        return kv_code(a) >= 0 && kv_code(b) >= 0;
      case Op::kMoeRoute:  // not yet: a MoE model is refused by -ngl
      case Op::kMatmulId:
      case Op::kLayerNorm:  // encoders (bert): not yet, refused by -ngl
      case Op::kGelu:
      case Op::kAttention:
      case Op::kAttnSinks:  // gpt-oss's attention sinks: not yet (load refuses)
      case Op::kMla:        // deepseek2's latent attention: not yet (load refuses)
        return false;
      case Op::kAttnParts:   // paged_attention_part / attn_merge (attention.comp, attn_merge_parts)
      case Op::kKvHostTier:  // host-visible memory with a device address (allocate_host_tier)
        return true;
    }
    return false;
  }

  std::unique_ptr<DeviceBuffer> alloc(size_t bytes, BufferUse use) override {
    Context& c = ctx();
    if (use == BufferUse::kKvHost)  // host RAM: not counted against the device's budget
      return std::make_unique<VulkanBuffer>(*this, c, c.allocate_host_tier(bytes));
    check_fits(*this, bytes, "a buffer");
    return std::make_unique<VulkanBuffer>(*this, c, c.allocate(bytes, false));
  }

  std::unique_ptr<DeviceBuffer> upload_weight(Tensor& t, bool release_mapped) override {
    if (!weight_suffix(t.type))
      throw std::runtime_error(name_ + ": weight type " + std::string(traits(t.type).name) +
                               " is not supported by the Vulkan backend");
    if (!t.is_contiguous())
      throw std::runtime_error(name_ + ": a weight must be contiguous to be uploaded");
    const size_t bytes = t.n_bytes();
    check_fits(*this, bytes, "a weight");
    Context& c = ctx();
    auto buf = std::make_unique<VulkanBuffer>(*this, c, c.allocate(bytes, false));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!transfer_) transfer_ = std::make_unique<Stream>(c);
      transfer_->upload(addr(buf->data()), t.data, bytes);
      transfer_->flush();
    }
    if (release_mapped) gguf::release_mapped_pages(t.data, bytes);  // the copy is on the GPU
    t.data = buf->data();
    t.packed = nullptr;
    t.device = this;
    return buf;
  }

  std::unique_ptr<Backend> make_backend(int) override {
    Context& c = ctx();
    return std::make_unique<VulkanBackend>(*this, c, *grids_);
  }

 private:
  /// Device-local bytes this device holds now.
  int64_t used_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ctx_ ? ctx_->device_bytes() : 0;
  }

  Context& ctx() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_) {
      ctx_ = std::make_unique<Context>(pd_);
      grids_ = std::make_unique<GridBuffer>(*ctx_);
    }
    return *ctx_;
  }

  std::string name_;
  const PhysicalDevice& pd_;
  mutable std::mutex mu_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<GridBuffer> grids_;  // after ctx_: destroyed first
  std::unique_ptr<Stream> transfer_;   // upload_weight's copies
};

bool software_wanted() {
  const char* e = std::getenv("KVRUN_VULKAN_SOFTWARE");
  return e && std::string(e) == "1";
}

struct Registry {
  std::vector<std::unique_ptr<VulkanDevice>> owned;
  std::vector<Device*> devices;
  std::vector<std::string> skipped;
};

/// The devices, destroyed at exit after every static that was made after them (a test's
/// backend): the driver's threads must not outlive their devices into its own teardown.
const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    const bool software = software_wanted();
    for (const PhysicalDevice& pd : physical_devices()) {
      std::string why = pd.unusable;
      if (why.empty() && pd.software && !software)
        why = "software implementation (set KVRUN_VULKAN_SOFTWARE=1 to use it)";
      if (!why.empty()) {
        reg.skipped.push_back(pd.name + ": " + why);
        continue;
      }
      reg.owned.push_back(
          std::make_unique<VulkanDevice>("Vulkan" + std::to_string(reg.owned.size()), pd));
      reg.devices.push_back(reg.owned.back().get());
    }
    return reg;
  }();
  return r;
}

}  // namespace

std::vector<Device*> devices() { return registry().devices; }

std::vector<std::string> skipped_devices() { return registry().skipped; }

}  // namespace kvrun::vulkan

// info.cpp — `kvrun info -m model.gguf [-c N] [--json]`.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "backend.h"
#include "commands.h"
#include "cpu/cpu_info.h"
#include "cpu/cpu_level.h"
#include "device_options.h"
#include "eval/model_info.h"
#include "gguf.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "kv_options.h"
#include "models/arch.h"
#include "models/rope_scaling.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/cuda_device.h"
#endif

namespace kvrun::tools {
namespace {

nlohmann::ordered_json to_json(const ModelInfo& mi) {
  nlohmann::ordered_json j;
  j["model"] = mi.path;
  j["gguf_version"] = mi.gguf_version;
  j["file_bytes"] = mi.file_bytes;
  j["split_count"] = mi.split_count;
  j["name"] = mi.name;
  j["arch"] = mi.hp.arch;
  j["n_layer"] = mi.hp.n_layer;
  j["n_embd"] = mi.hp.n_embd;
  j["n_head"] = mi.hp.n_head;
  j["n_head_kv"] = mi.hp.n_head_kv;
  j["head_dim"] = mi.hp.head_dim;
  j["head_dim_v"] = mi.hp.head_dim_v;
  j["n_ff"] = mi.hp.n_ff;
  if (mi.hp.n_expert > 0)
    j["experts"] = {{"n_expert", mi.hp.n_expert},
                    {"n_expert_used", mi.hp.n_expert_used},
                    {"n_ff_exp", mi.hp.n_ff_exp}};
  if (mi.hp.kv_lora_rank > 0)
    j["mla"] = {{"kv_lora_rank", mi.hp.kv_lora_rank},
                {"q_lora_rank", mi.hp.q_lora_rank},
                {"kv_row_values", mi.hp.kv_rows().head_dim}};
  j["n_params"] = mi.n_params;
  j["n_params_active"] = mi.n_params_active;
  j["weight_bytes_active"] = mi.weight_bytes_active;
  j["n_ctx_train"] = mi.hp.n_ctx_train;
  j["n_vocab"] = mi.hp.n_vocab;
  j["rms_eps"] = mi.hp.rms_eps;
  if (is_encoder_arch(mi.hp.arch)) {  // bert, nomic-bert: LayerNorm, embeddings only
    j["norm_eps"] = mi.hp.norm_eps;
    j["encoder"] = true;
  }
  j["tokenizer"] = {{"model", mi.tokenizer_model}, {"pre", mi.tokenizer_pre}};
  j["rope"] = {{"freq_base", mi.hp.rope.freq_base},
               {"n_rot", mi.hp.rope.n_rot},
               {"scaling_type", mi.hp.rope.scaling_type},
               {"scaling_factor", mi.hp.rope.scaling_factor},
               {"n_ctx_orig", mi.hp.rope.n_ctx_orig},
               {"freq_factors", mi.hp.rope.has_freq_factors},
               {"freq_scale", rope_freq_scale(mi.hp.rope)},
               {"ext_factor", rope_ext_factor(mi.hp.rope)},
               {"mscale",
                rope_mscale(mi.hp.rope, rope_freq_scale(mi.hp.rope), rope_ext_factor(mi.hp.rope))}};
  if (rope_ext_factor(mi.hp.rope) != 0.0f)
    j["rope"]["yarn"] = {{"n_ctx_orig", yarn_n_ctx_orig(mi.hp.rope, mi.hp.n_ctx_train)},
                         {"beta_fast", mi.hp.rope.yarn_beta_fast},
                         {"beta_slow", mi.hp.rope.yarn_beta_slow},
                         {"attn_factor", mi.hp.rope.yarn_attn_factor}};
  nlohmann::ordered_json mix = nlohmann::ordered_json::object();
  for (const QuantMixEntry& e : mi.quant_mix)
    mix[traits(e.type).name] = {{"n_tensors", e.n_tensors}, {"bytes", e.bytes}};
  j["quant_mix"] = mix;
  j["n_tensors"] = mi.n_tensors;
  j["weight_bytes"] = mi.weight_bytes;
  j["has_weights"] = mi.has_weights;
  j["truncated"] = mi.truncated();
  j["data_bytes_needed"] = mi.data_bytes_needed;
  j["data_bytes_present"] = mi.data_bytes_present;
  j["n_ctx"] = mi.n_ctx;
  nlohmann::ordered_json kv = nlohmann::ordered_json::object();
  for (const KvSizeEntry& e : mi.kv)
    kv[kv_type_name(e.type)] = {
        {"bytes_per_token", e.bytes_per_token},     {"bytes_global", e.bytes_global},
        {"bytes_window", e.bytes_window},           {"bytes_total", e.bytes_total},
        {"fits_fast_tier", e.bytes_offloaded == 0}, {"bytes_offloaded", e.bytes_offloaded}};
  j["kv"] = kv;
  j["kv_tokens"] = mi.kv_tokens;
  if (mi.n_layer_window > 0)
    j["kv_window"] = {{"n_swa", mi.hp.n_swa},
                      {"n_layer_window", mi.n_layer_window},
                      {"n_layer_global", mi.hp.n_layer - mi.n_layer_window},
                      {"window_tokens", mi.kv_window_tokens}};
  j["kv_fast_budget"] = mi.kv_fast_budget;
  return j;
}

/// A parameter count as "30.53 B", "3.35 M", "812 K".
std::string format_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", double(n) * 1e-9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2f M", double(n) * 1e-6);
  else
    std::snprintf(buf, sizeof buf, "%.0f K", double(n) * 1e-3);
  return buf;
}

void print_text(const ModelInfo& mi, const std::string& fast_source) {
  const Hparams& hp = mi.hp;
  std::printf("model        %s (GGUF v%u, %s", mi.path.c_str(), mi.gguf_version,
              format_bytes(int64_t(mi.file_bytes)).c_str());
  if (mi.split_count > 1) std::printf(" in %d split files", mi.split_count);
  std::printf(")\n");
  if (!mi.name.empty()) std::printf("name         %s\n", mi.name.c_str());
  std::printf("arch         %s\n", hp.arch.c_str());
  std::printf("n_layer      %lld\n", (long long)hp.n_layer);
  std::printf("n_embd       %lld\n", (long long)hp.n_embd);
  std::printf("n_head       %lld\n", (long long)hp.n_head);
  std::printf("n_head_kv    %lld%s\n", (long long)hp.n_head_kv,
              hp.n_head_kv < hp.n_head ? " (GQA)" : "");
  std::printf("head_dim     %lld", (long long)hp.head_dim);
  if (hp.head_dim_v != hp.head_dim) std::printf(" (V: %lld)", (long long)hp.head_dim_v);
  std::printf("\nn_ff         %lld\n", (long long)hp.n_ff);
  if (hp.kv_lora_rank > 0)
    std::printf(
        "mla          kv_lora_rank %lld + %lld RoPE values: one KV row per layer, V read "
        "from its latent (q_lora_rank %lld)\n",
        (long long)hp.kv_lora_rank, (long long)hp.rope.n_rot, (long long)hp.q_lora_rank);
  if (hp.n_expert > 0)
    std::printf("experts      %lld, %lld used per token, expert n_ff %lld\n",
                (long long)hp.n_expert, (long long)hp.n_expert_used, (long long)hp.n_ff_exp);
  std::printf("n_ctx_train  %lld\n", (long long)hp.n_ctx_train);
  std::printf("n_vocab      %lld (tokenizer %s%s%s)\n", (long long)hp.n_vocab,
              mi.tokenizer_model.empty() ? "none" : mi.tokenizer_model.c_str(),
              mi.tokenizer_pre.empty() ? "" : ", pre ", mi.tokenizer_pre.c_str());
  if (is_encoder_arch(hp.arch))
    std::printf("norm_eps     %g (LayerNorm; an encoder: embeddings only, kvrun embed)\n",
                double(hp.norm_eps));
  else
    std::printf("rms_eps      %g\n", double(hp.rms_eps));
  std::printf("rope         freq_base %g, n_rot %lld, scaling %s", double(hp.rope.freq_base),
              (long long)hp.rope.n_rot, describe_rope_scaling(hp.rope, hp.n_ctx_train).c_str());
  if (hp.rope.has_freq_factors) std::printf(", rope_freqs tensor");
  std::printf("\nweights      %lld tensors, %lld bytes (%s)%s\n", (long long)mi.n_tensors,
              (long long)mi.weight_bytes, format_bytes(mi.weight_bytes).c_str(),
              mi.has_weights || mi.n_tensors == 0 ? ""
              : mi.truncated()                    ? " — TRUNCATED, see below"
                                                  : " — metadata only, no tensor data");
  for (const QuantMixEntry& e : mi.quant_mix)
    std::printf("  %-8s %5lld tensors %14lld bytes  %5.1f%%\n", traits(e.type).name,
                (long long)e.n_tensors, (long long)e.bytes,
                mi.weight_bytes > 0 ? 100.0 * double(e.bytes) / double(mi.weight_bytes) : 0.0);
  std::printf("params       %s", format_count(mi.n_params).c_str());
  if (mi.n_params_active != mi.n_params)
    std::printf(", %s active per token (%s of weights read per decode step)",
                format_count(mi.n_params_active).c_str(),
                format_bytes(mi.weight_bytes_active).c_str());
  std::printf("\n");
  std::printf("cpu          %s\n", cpu::cpu_features_string().c_str());
  std::printf(
      "cpu kernels  %s (best here: %s; KVRUN_CPU=scalar|avx2|avx512 selects), %s order "
      "(--kernels exact|fast), huge pages %s (--thp on|off)\n",
      cpu::cpu_level_name(cpu::cpu_level()), cpu::cpu_level_name(cpu::best_cpu_level()),
      cpu::kernel_order_name(cpu::kernel_order()), huge_pages() ? "on" : "off");
#ifdef KVRUN_HAVE_CUDA
  const auto gpus = cuda::devices();
  if (gpus.empty())
    std::printf("gpu          none found (CUDA %s build)\n", cuda::runtime_version().c_str());
  for (const auto& g : gpus)
    std::printf("gpu %d        %s, sm_%d%d, %s (%s free)\n", g.index, g.name.c_str(), g.cc_major,
                g.cc_minor, format_bytes(g.total_bytes).c_str(),
                format_bytes(g.free_bytes).c_str());
#else
  std::printf("gpu          not built (configure with -DKVRUN_CUDA=ON)\n");
#endif
  std::printf("\nKV cache for n_ctx = %lld (%s; layout in docs/formats.md)\n", (long long)mi.n_ctx,
              hp.kv_lora_rank > 0 ? "MLA: latent + RoPE part of the type, no V rows"
                                  : "K and V both of the type");
  if (mi.n_layer_window > 0)
    std::printf(
        "window tables: %lld windowed layers (n_swa %lld) hold %lld positions, %lld global "
        "layers hold %lld\n",
        (long long)mi.n_layer_window, (long long)mi.hp.n_swa, (long long)mi.kv_window_tokens,
        (long long)(mi.hp.n_layer - mi.n_layer_window), (long long)mi.kv_tokens);
  std::printf("fast tier %s (%s); the rest goes to the slow tier (--kv-offload-dir)\n",
              format_bytes(mi.kv_fast_budget, true).c_str(), fast_source.c_str());
  std::printf("  %-9s %15s %18s %12s %12s %12s %10s %12s\n", "type", "bytes/token", "total bytes",
              "total", "global", "window", "fits fast", "offloaded");
  for (const KvSizeEntry& e : mi.kv)
    std::printf("  %-9s %15lld %18lld %12s %12s %12s %10s %12s\n", kv_type_name(e.type),
                (long long)e.bytes_per_token, (long long)e.bytes_total,
                format_bytes(e.bytes_total, true).c_str(),
                format_bytes(e.bytes_global, true).c_str(),
                format_bytes(e.bytes_window, true).c_str(), e.bytes_offloaded == 0 ? "yes" : "no",
                format_bytes(e.bytes_offloaded, true).c_str());
}

/// `kvrun info -ngl N|all|auto`: what the GPU part needs per KV cache type, against the free
/// memory of the chosen GPU when there is one.
struct GpuPlanReport {
  std::string device;  ///< "" without a GPU
  int64_t free = -1;   ///< bytes; −1 unknown
  struct Row {
    DType type;
    GpuPlan plan;
    int64_t fit = -1;       ///< the largest -ngl that fits (−1: free memory unknown)
    int64_t positions = 0;  ///< positions whose KV rows the plan puts on the GPU
  };
  std::vector<Row> rows;
  bool host_tier = false;  ///< --kv-host-tier: positions past --kv-mem's are in host memory
  std::vector<std::string> fallback;  ///< what the GPU lacks and runs on the host (gpu_fallback)
};

GpuPlanReport plan_report(const InfoOptions& opt, const ModelInfo& mi, const gguf::File& file) {
  GpuPlanReport r;
  Device* gpu = pick_gpu(opt.dev.device);
  if (gpu) {
    r.device = gpu->name();
    r.free = gpu->free_memory();
  }
  const std::string& v = opt.dev.n_gpu_layers;
  const bool kv_on_gpu = !opt.dev.no_kv_offload;
  // -ot rules that keep layers' FFN on the host leave their tensors out of the plan, and so do
  // the FFNs the GPU cannot run (the MoE ops), which the loader keeps on the host
  const GpuFallback fb = gpu ? gpu_fallback(*gpu, file, kv_on_gpu) : GpuFallback{};
  r.fallback = fb.lines;
  const std::vector<bool> on_host =
      ffn_kept_on_host(file, mi.hp.n_layer, parse_tensor_overrides(opt.dev.override_tensor), fb);
  AutoFit tier;  // --kv-host-tier: the GPU holds the rows of what --kv-mem holds
  if (opt.kv_host_tier) {
    if (!kv_on_gpu)
      throw DeviceOptionError("--kv-host-tier: -nkvo keeps every KV row on the host already");
    if (opt.kv_mem.empty())
      throw DeviceOptionError(
          "--kv-host-tier needs --kv-mem (the KV bytes the GPU holds; the rest is host memory)");
    tier.kv_fast_bytes = parse_size(opt.kv_mem);
    r.host_tier = true;
  }
  for (DType t : kKvCacheTypes) {
    GpuPlanReport::Row row{t, {}, -1};
    ModelInfo m = mi;
    tier.type_k = tier.type_v = t;
    cap_to_fast_tier(m, tier);
    row.positions = kv_on_gpu ? m.kv_tokens : 0;
    if (r.free >= 0) row.fit = fit_gpu_layers(m, file, t, t, kv_on_gpu, r.free, 512, &on_host);
    const int64_t n = parse_ngl(v, mi.hp.n_layer + 1).value_or(std::max<int64_t>(0, row.fit));
    row.plan = plan_gpu(m, file, n, t, t, kv_on_gpu, 512, &on_host);
    r.rows.push_back(row);
  }
  return r;
}

nlohmann::ordered_json plan_json(const GpuPlanReport& r) {
  nlohmann::ordered_json j;
  j["device"] = r.device.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.device);
  j["free_bytes"] = r.free;
  j["kv_host_tier"] = r.host_tier;
  j["on_host"] = r.fallback;  // what the GPU lacks and the loader runs on the host
  nlohmann::ordered_json per = nlohmann::ordered_json::object();
  for (const auto& row : r.rows) {
    const GpuPlan& p = row.plan;
    nlohmann::ordered_json e = {{"n_gpu_layers", p.n_gpu},
                                {"layers", p.layers},
                                {"output", p.output},
                                {"weight_bytes", p.weight_bytes},
                                {"kv_bytes", p.kv_bytes},
                                {"kv_positions", row.positions},
                                {"scratch_bytes", p.scratch_bytes},
                                {"total_bytes", p.total()}};
    if (r.free >= 0) {
      e["fits"] = p.total() <= r.free;
      e["max_n_gpu_layers"] = row.fit;
    }
    per[kv_type_name(row.type)] = e;
  }
  j["by_kv_type"] = per;
  return j;
}

void print_plan(const GpuPlanReport& r, const ModelInfo& mi) {
  const GpuPlan& first = r.rows.front().plan;
  std::printf("\nGPU plan for -ngl %lld: the last %lld of %lld layers%s", (long long)first.n_gpu,
              (long long)first.layers, (long long)mi.hp.n_layer,
              first.output ? " and the output head" : "");
  if (r.device.empty())
    std::printf(" (no GPU device here: sizes only)\n");
  else if (r.free < 0)
    std::printf(" on %s (free memory unknown)\n", r.device.c_str());
  else
    std::printf(" on %s, %s free\n", r.device.c_str(), format_bytes(r.free).c_str());
  std::printf("  %-9s %12s %12s %12s %12s %6s %s\n", "KV type", "weights", "KV", "scratch~",
              "total", "fits", "largest -ngl that fits");
  for (const auto& row : r.rows) {
    const GpuPlan& p = row.plan;
    std::printf("  %-9s %12s %12s %12s %12s %6s %s\n", kv_type_name(row.type),
                format_bytes(p.weight_bytes).c_str(), format_bytes(p.kv_bytes).c_str(),
                format_bytes(p.scratch_bytes).c_str(), format_bytes(p.total()).c_str(),
                r.free < 0            ? "?"
                : p.total() <= r.free ? "yes"
                                      : "no",
                row.fit < 0 ? "?" : std::to_string(row.fit).c_str());
  }
  for (const std::string& line : r.fallback) std::printf("  on the CPU: %s\n", line.c_str());
  if (r.host_tier)
    std::printf(
        "  --kv-host-tier: KV on the GPU for at most the positions --kv-mem holds (%lld "
        "at %s), the rest in host memory the GPU reads in place\n",
        (long long)r.rows.front().positions, kv_type_name(r.rows.front().type));
}

}  // namespace

int cmd_info(const InfoOptions& opt) {
  try {
    gguf::File file = gguf::File::open_metadata_only(opt.model);
    ModelInfo mi = describe_model(file, opt.n_ctx);
    apply_rope_overrides(mi.hp.rope, opt.dev.rope);  // the scaling in effect
    check_rope_params(mi.hp.rope);
    // The fast tier on the CPU backend is RAM: --kv-mem, or what is available beside the
    // weights (which are mapped from the file and compete for the same memory).
    std::string fast_source = "--kv-mem";
    int64_t fast = 0;
    if (!opt.kv_mem.empty()) {
      fast = parse_size(opt.kv_mem);
      if (fast <= 0) throw std::invalid_argument("--kv-mem must be positive");
    } else {
      const int64_t avail = std::max<int64_t>(0, mem_available_bytes());
      fast = std::max<int64_t>(0, avail - (mi.has_weights ? mi.weight_bytes : 0));
      fast_source = "this machine: MemAvailable " + format_bytes(avail, true) + " less " +
                    format_bytes(mi.has_weights ? mi.weight_bytes : 0, true) + " of weights";
    }
    plan_kv_tiers(mi, fast);
    const bool want_plan = opt.dev.n_gpu_layers != "0";
    const GpuPlanReport plan = want_plan ? plan_report(opt, mi, file) : GpuPlanReport{};
    if (opt.json) {
      nlohmann::ordered_json j = to_json(mi);
      if (want_plan) j["gpu_plan"] = plan_json(plan);
      j["cpu_level"] = cpu::cpu_level_name(cpu::cpu_level());
      j["kernels"] = cpu::kernel_order_name(cpu::kernel_order());
      j["thp"] = huge_pages();
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_text(mi, fast_source);
      if (want_plan) print_plan(plan, mi);
    }
    if (mi.truncated()) {
      // A download cut mid-data: the report above is what the header promises, but the file
      // cannot be loaded (kvrun -m refuses it), so say so and fail.
      std::fprintf(stderr,
                   "kvrun: error: %s: truncated: %lld of %lld bytes of tensor data (the file "
                   "ends early; download it again)\n",
                   opt.model.c_str(), (long long)mi.data_bytes_present,
                   (long long)mi.data_bytes_needed);
      return 1;
    }
    return 0;
  } catch (const DeviceOptionError& e) {
    std::fprintf(stderr, "kvrun: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s: %s\n", opt.model.c_str(), e.what());
    return 1;
  }
}

std::string format_bytes(int64_t bytes, bool si) {
  const double base = si ? 1000.0 : 1024.0;
  static const char* const kSi[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  static const char* const kBin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= base && u < 5) {
    v /= base;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", (long long)bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, si ? kSi[u] : kBin[u]);
  return buf;
}

}  // namespace kvrun::tools

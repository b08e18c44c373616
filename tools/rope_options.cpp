// rope_options.cpp — see rope_options.h.
#include "rope_options.h"

namespace kvrun::tools {

void add_rope_options(CLI::App& app, RopeOverrides& o) {
  const char* g = "RoPE scaling (default: from the model file)";
  app.add_option_function<std::string>(
         "--rope-scaling", [&o](const std::string& v) { o.scaling_type = v; },
         "RoPE frequency scaling method: none, linear or yarn")
      ->check(CLI::IsMember({"none", "linear", "yarn"}))
      ->group(g);
  app.add_option_function<float>(
         "--rope-scale", [&o](float v) { o.freq_scale = 1.0f / v; },
         "RoPE context scaling factor: expands the context by a factor of N")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<float>(
         "--rope-freq-base", [&o](float v) { o.freq_base = v; }, "RoPE base frequency")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<float>(
         "--rope-freq-scale", [&o](float v) { o.freq_scale = v; },
         "RoPE frequency scaling factor: expands the context by a factor of 1/N")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<int64_t>(
         "--yarn-orig-ctx", [&o](int64_t v) { o.yarn_orig_ctx = v; },
         "YaRN: original context size of the model (default: the model's)")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<float>(
         "--yarn-ext-factor", [&o](float v) { o.yarn_ext_factor = v; },
         "YaRN: extrapolation mix factor (negative: 1 for yarn, 0 otherwise; 0 = full "
         "interpolation)")
      ->group(g);
  app.add_option_function<float>(
         "--yarn-attn-factor", [&o](float v) { o.yarn_attn_factor = v; },
         "YaRN: scales the attention magnitude (cos and sin) by N (default 1)")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<float>(
         "--yarn-beta-slow", [&o](float v) { o.yarn_beta_slow = v; },
         "YaRN: high correction dimension, alpha (default 1)")
      ->check(CLI::PositiveNumber)
      ->group(g);
  app.add_option_function<float>(
         "--yarn-beta-fast", [&o](float v) { o.yarn_beta_fast = v; },
         "YaRN: low correction dimension, beta (default 32)")
      ->check(CLI::PositiveNumber)
      ->group(g);
}

}  // namespace kvrun::tools

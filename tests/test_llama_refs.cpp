// test_llama_refs.cpp — end to end, through the kvrun binary, against llama.cpp's reference
// generations: refs/kv_f16 (12 stories260K GGUF files × 6 prompts, f16 KV, no flash attention)
// and refs/kv_q8_0_fa, refs/kv_q4_0_fa (pad-F32, pad-Q8_0, pad-Q4_0 × 6 prompts, quantized KV,
// flash attention): `kvrun -m MODEL -f PROMPT -n 64 --temp 0 --json --n-probs 10 -c 128 -t 2
// [-ctk T -ctv T]`.
//
// Per reference: the prompt tokenizes to `prompt_tokens`; the first step's top-10 logprobs
// (log_softmax over the full vocabulary) are within 1e-3 (F32/F16 files) or 2e-2 (quantized;
// 0.1 for the Q4_0 file with q4_0 KV, see below) of llama.cpp's; greedy decoding reproduces all 64
// `greedy_tokens` for F32, F16 and pad-Q8_0, and for the other quantized files every token up to
// the first position where kvrun's own top-2 logprobs are within 0.05 of each other (a near-tie,
// where rounding may legitimately flip the choice).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvrun {
namespace {

constexpr double kNearTie = 0.05;

/// One reference set of one model: refs/<set>/<model>__*.json, run with the cache `flags`.
struct RefCase {
  std::string model;         ///< e.g. "stories260K-pad-F32"
  std::string set;           ///< "kv_f16", "kv_q8_0_fa" or "kv_q4_0_fa"
  std::string flags;         ///< KV cache flags matching how llama.cpp made the set
  double logprob_tol = 0.0;  ///< first-step logprob tolerance; 0: 1e-3 float files, 2e-2 else
};

class LlamaRefs : public ::testing::TestWithParam<RefCase> {};

std::vector<std::filesystem::path> ref_files(const std::string& model, const std::string& set) {
  std::vector<std::filesystem::path> out;
  const auto dir = test::fixture("refs/" + set);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(model + "__", 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_P(LlamaRefs, MatchesLlamaCpp) {
  const std::string model_name = GetParam().model;
  const std::string rel = "models/" + model_name + ".gguf";
  KVRUN_REQUIRE_FIXTURE(rel);
  KVRUN_REQUIRE_FIXTURE("refs/" + GetParam().set);
  const bool exact = model_name.ends_with("F32") || model_name.ends_with("F16") ||
                     model_name.ends_with("pad-Q8_0");
  const bool float_model = model_name.ends_with("F32") || model_name.ends_with("F16");
  const double tol =
      GetParam().logprob_tol > 0 ? GetParam().logprob_tol : (float_model ? 1e-3 : 2e-2);

  const auto files = ref_files(model_name, GetParam().set);
  ASSERT_EQ(files.size(), 6u) << "reference files for " << model_name;
  test::TempDir dir;
  double max_diff = 0.0;
  int n_checked_tokens = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    std::ifstream in(path);
    const nlohmann::json ref = nlohmann::json::parse(in);
    const auto want = ref["greedy_tokens"].get<std::vector<int32_t>>();
    const auto prompt_file = (dir / "prompt.txt").string();
    std::ofstream(prompt_file, std::ios::binary) << ref["prompt"].get<std::string>();
    const auto r = test::run_command(
        test::kvrun_binary() + " -m '" + test::fixture(rel).string() + "' -f '" + prompt_file +
        "' -n 64 --temp 0 --json --n-probs 10 -c 128 -t 2 " + GetParam().flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    ASSERT_EQ(out["prompt_tokens"], ref["prompt_tokens"]);
    const auto got = out["tokens"].get<std::vector<int32_t>>();
    const auto& probs = out["probs"];
    ASSERT_EQ(got.size(), want.size()) << "stop: " << out["stop"];
    ASSERT_EQ(probs.size(), got.size());

    for (const auto& e : ref["first_step_top10_logprobs"]) {
      const auto it = std::find_if(probs[0].begin(), probs[0].end(),
                                   [&](const auto& p) { return p["id"] == e["id"]; });
      ASSERT_NE(it, probs[0].end()) << "token " << e["id"] << " is not in kvrun's top 10";
      const double diff = std::fabs((*it)["logprob"].get<double>() - e["logprob"].get<double>());
      max_diff = std::max(max_diff, diff);
      EXPECT_LE(diff, tol) << "token " << e["id"] << " logprob";
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const double gap =
          probs[i][0]["logprob"].get<double>() - probs[i][1]["logprob"].get<double>();
      if (!exact && gap < kNearTie) break;  // near-tie: the rest may legitimately differ
      ASSERT_EQ(got[i], want[i]) << "greedy token " << i << " (top-2 gap " << gap << ")";
      ASSERT_EQ(probs[i][0]["id"], got[i]) << "greedy must pick the top token";
      ++n_checked_tokens;
    }
  }
  std::cout << "[ model    ] " << model_name << " " << GetParam().set << ": max |logprob diff| "
            << max_diff << ", " << n_checked_tokens << " greedy tokens checked\n";
  RecordProperty("max_logprob_diff", std::to_string(max_diff));
}

std::string case_name(const ::testing::TestParamInfo<RefCase>& info) {
  std::string s = info.param.model + "_" + info.param.set;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// f16 KV, no flash attention (how llama.cpp made the set; kvrun's exact scheme): all 12 models.
INSTANTIATE_TEST_SUITE_P(KvF16, LlamaRefs,
                         ::testing::Values(RefCase{"stories260K-F32", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-F16", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-Q4_K_M", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-Q5_K_M", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-Q6_K", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-F32", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-F16", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-Q8_0", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-Q4_0", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-Q4_K_M", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-Q5_K_M", "kv_f16", "-fa off"},
                                           RefCase{"stories260K-pad-Q6_K", "kv_f16", "-fa off"}),
                         case_name);

// Quantized KV with flash attention (llama.cpp: -ctk T -ctv T -fa; kvrun's auto picks its flash
// kernel for a quantized cache). kvrun's flash kernel sums a block of 16 positions at a time with
// a polynomial e^x, where llama.cpp's goes position by position with libm expf: the attention
// outputs differ by ~1e-7 relative. A 4-bit K cache amplifies that: a K value that sits on a
// q4_0 rounding boundary in the next layer moves by a whole step (1/8 of its block's range).
// On the Q4_0-weight model with q4_0 K one of the six prompts' first-step logprobs moves by up
// to 0.08 (measured; every other set stays within 8e-4), so that set is held to 0.1.
INSTANTIATE_TEST_SUITE_P(
    KvQuantizedFlash, LlamaRefs,
    ::testing::Values(RefCase{"stories260K-pad-F32", "kv_q8_0_fa", "-ctk q8_0 -ctv q8_0"},
                      RefCase{"stories260K-pad-Q8_0", "kv_q8_0_fa", "-ctk q8_0 -ctv q8_0"},
                      RefCase{"stories260K-pad-F32", "kv_q4_0_fa", "-ctk q4_0 -ctv q4_0"},
                      RefCase{"stories260K-pad-Q8_0", "kv_q4_0_fa", "-ctk q4_0 -ctv q4_0"},
                      RefCase{"stories260K-pad-Q4_0", "kv_q8_0_fa", "-ctk q8_0 -ctv q8_0"},
                      RefCase{"stories260K-pad-Q4_0", "kv_q4_0_fa", "-ctk q4_0 -ctv q4_0", 0.1}),
    case_name);

}  // namespace
}  // namespace kvrun

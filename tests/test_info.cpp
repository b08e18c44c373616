// test_info.cpp — `kvrun info` end to end: the binary on every fixture model, on a
// metadata-only Llama-3.1-70B-shaped file, and on files that are not usable models.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf.h"
#include "kv_layout.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace kvrun {
namespace {

using nlohmann::json;

json info_json(const std::string& path, const std::string& extra = "") {
  auto r = test::run_command(test::kvrun_binary() + " info -m '" + path + "' --json " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

std::vector<std::filesystem::path> fixture_models() {
  std::vector<std::filesystem::path> out;
  const auto dir = test::fixture("models");
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".gguf") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// stories260K (fixtures README): 5 layers, n_embd 64, 8 heads, 4 KV heads, vocab 512,
// context_length 128; head_dim 8 and n_ff 172, or 32 and 256 for the pad family.
TEST(Info, EveryFixtureModelReportsItsShape) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  const auto models = fixture_models();
  ASSERT_EQ(models.size(), 12u);
  for (const auto& m : models) {
    SCOPED_TRACE(m.filename().string());
    const bool pad = m.filename().string().find("-pad-") != std::string::npos;
    json j = info_json(m.string());
    EXPECT_EQ(j["arch"], "llama");
    EXPECT_EQ(j["n_layer"], 5);
    EXPECT_EQ(j["n_embd"], 64);
    EXPECT_EQ(j["n_head"], 8);
    EXPECT_EQ(j["n_head_kv"], 4);
    EXPECT_EQ(j["head_dim"], pad ? 32 : 8);
    EXPECT_EQ(j["n_ff"], pad ? 256 : 172);
    EXPECT_EQ(j["n_ctx_train"], 128);
    EXPECT_EQ(j["n_vocab"], 512);
    EXPECT_EQ(j["tokenizer"]["model"], "llama");
    EXPECT_EQ(j["rope"]["n_rot"], pad ? 32 : 8);
    EXPECT_FLOAT_EQ(j["rope"]["freq_base"].get<float>(), 10000.0f);
    // Weights: every byte of tensor data, and only the header beyond it.
    const int64_t wb = j["weight_bytes"];
    const int64_t fb = j["file_bytes"];
    EXPECT_GT(wb, fb / 2);
    EXPECT_LT(wb, fb);
    int64_t mix_bytes = 0, mix_tensors = 0;
    for (auto& [name, e] : j["quant_mix"].items()) {
      mix_bytes += e["bytes"].get<int64_t>();
      mix_tensors += e["n_tensors"].get<int64_t>();
    }
    EXPECT_EQ(mix_bytes, wb);
    EXPECT_EQ(mix_tensors, 48);  // 5 × 9 per layer + token_embd, output_norm, output
    // KV table: default n_ctx = n_ctx_train; f16 = 2 bytes × 2 (K,V) × 5 × 4 heads × head_dim.
    const int64_t hd = pad ? 32 : 8;
    EXPECT_EQ(j["n_ctx"], 128);
    EXPECT_EQ(j["kv"]["f16"]["bytes_per_token"], 2 * 2 * 5 * 4 * hd);
    EXPECT_EQ(j["kv"]["f16"]["bytes_total"], 2 * 2 * 5 * 4 * hd * 128);
    for (DType t : kKvCacheTypes)
      EXPECT_EQ(j["kv"][kv_type_name(t)]["bytes_per_token"], 5 * 2 * kv_row_bytes(t, 4, hd))
          << kv_type_name(t);
  }
}

// The F32 file holds 292,800 parameters (computed from the shapes) at 4 bytes each.
TEST(Info, F32WeightBytesEqualParameterCountTimesFour) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  json j = info_json(test::fixture("models/stories260K-F32.gguf").string());
  const int64_t e = 64, kv = 4 * 8, ff = 172, v = 512;
  const int64_t per_layer = e * e + e * kv + e * kv + e * e + 3 * e * ff + 2 * e;
  const int64_t params = 5 * per_layer + 2 * v * e + e;
  EXPECT_EQ(j["weight_bytes"], 4 * params);
  EXPECT_EQ(j["quant_mix"].size(), 1u);
  EXPECT_EQ(j["quant_mix"]["f32"]["n_tensors"], 48);
}

// pad-Q4_0: llama-quantize chose q4_0 for 36 tensors, q8_0 for output, f32 for 11 norms.
TEST(Info, QuantMixOfPadQ4_0) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-Q4_0.gguf");
  json j = info_json(test::fixture("models/stories260K-pad-Q4_0.gguf").string());
  EXPECT_EQ(j["quant_mix"]["q4_0"]["n_tensors"], 36);
  EXPECT_EQ(j["quant_mix"]["q8_0"]["n_tensors"], 1);
  EXPECT_EQ(j["quant_mix"]["f32"]["n_tensors"], 11);
  EXPECT_EQ(j["quant_mix"]["q8_0"]["bytes"], 512 * 64 / 32 * 34);  // output: 512 rows of 64
}

TEST(Info, ContextLengthScalesTheTable) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  json j = info_json(test::fixture("models/stories260K-pad-F32.gguf").string(), "-c 4096");
  EXPECT_EQ(j["n_ctx"], 4096);
  for (auto& [name, e] : j["kv"].items())
    EXPECT_EQ(e["bytes_total"].get<int64_t>(), e["bytes_per_token"].get<int64_t>() * 4096) << name;
}

TEST(Info, TiersSayWhatFitsTheFastTierAndWhatIsOffloaded) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  const std::string m = test::fixture("models/stories260K-pad-F32.gguf").string();
  json j = info_json(m, "-c 131072 --kv-mem 32MiB");
  EXPECT_EQ(j["kv_fast_budget"], 33554432);
  EXPECT_EQ(j["kv"]["f16"]["bytes_total"], 335544320);
  EXPECT_EQ(j["kv"]["f16"]["fits_fast_tier"], false);
  EXPECT_EQ(j["kv"]["f16"]["bytes_offloaded"], 335544320 - 33554432);
  EXPECT_EQ(j["kv"]["q4_0"]["bytes_offloaded"], 94371840 - 33554432);
  j = info_json(m, "-c 4096 --kv-mem 32MiB");
  for (auto& [name, e] : j["kv"].items()) {
    EXPECT_EQ(e["fits_fast_tier"], true) << name;
    EXPECT_EQ(e["bytes_offloaded"], 0) << name;
  }
  // Without --kv-mem the plan is against this machine's memory, which holds 4096 tokens.
  j = info_json(m, "-c 4096");
  EXPECT_GT(j["kv_fast_budget"].get<int64_t>(), 20971520);
  EXPECT_EQ(j["kv"]["f32"]["fits_fast_tier"], true);
  auto text =
      test::run_command(test::kvrun_binary() + " info -m '" + m + "' -c 131072 --kv-mem 32MiB");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("fast tier 33.55 MB (--kv-mem)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("301.99 MB"), std::string::npos) << text.out;  // f16 offloaded
}

// Llama 3.1 70B's shape in a metadata-only file: 131072 tokens at bf16 = 42.9 GB, fp8 ≈ 21.5 GB.
TEST(Info, Llama70BMetadataOnly) {
  test::TempDir dir;
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 80);
  w.set_u32("llama.embedding_length", 8192);
  w.set_u32("llama.feed_forward_length", 28672);
  w.set_u32("llama.attention.head_count", 64);
  w.set_u32("llama.attention.head_count_kv", 8);
  w.set_u32("llama.context_length", 131072);
  w.set_f32("llama.rope.freq_base", 500000.0f);
  w.set_u32("llama.vocab_size", 128256);
  w.add_tensor("token_embd.weight", DType::Q4_K, {8192, 128256}, nullptr);
  const auto path = (dir / "llama70b-meta.gguf").string();
  w.write(path);

  json j = info_json(path);
  EXPECT_EQ(j["n_layer"], 80);
  EXPECT_EQ(j["n_head_kv"], 8);
  EXPECT_EQ(j["head_dim"], 128);
  EXPECT_EQ(j["n_ctx"], 131072);
  EXPECT_EQ(j["n_vocab"], 128256);
  EXPECT_EQ(j["has_weights"], false);
  EXPECT_EQ(j["weight_bytes"], int64_t(8192) * 128256 / 256 * 144);
  const int64_t bf16 = j["kv"]["bf16"]["bytes_total"];
  EXPECT_EQ(bf16, int64_t(42949672960));
  EXPECT_NEAR(double(bf16) / 1e9, 42.9, 0.05);
  const int64_t fp8 = j["kv"]["fp8_e4m3"]["bytes_total"];
  EXPECT_NEAR(double(fp8) / 21.5e9, 1.0, 0.01);

  auto text = test::run_command(test::kvrun_binary() + " info -m '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("42.95 GB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("n_head_kv    8 (GQA)"), std::string::npos) << text.out;
}

// A metadata-only Qwen3-30B-A3B (tensor infos of kvrun synth's plan, no data): 30.53 B
// parameters, 3.35 B active per token (Qwen's model card: 30.5B total, 3.3B activated), the
// experts counted at 8 of 128.
TEST(Info, Qwen3MoeCountsActiveParameters) {
  test::TempDir dir;
  gguf::Writer w;
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32("qwen3moe.block_count", 48);
  w.set_u32("qwen3moe.embedding_length", 2048);
  w.set_u32("qwen3moe.feed_forward_length", 6144);
  w.set_u32("qwen3moe.attention.head_count", 32);
  w.set_u32("qwen3moe.attention.head_count_kv", 4);
  w.set_u32("qwen3moe.attention.key_length", 128);
  w.set_u32("qwen3moe.context_length", 40960);
  w.set_u32("qwen3moe.vocab_size", 151936);
  w.set_u32("qwen3moe.expert_count", 128);
  w.set_u32("qwen3moe.expert_used_count", 8);
  w.set_u32("qwen3moe.expert_feed_forward_length", 768);
  int64_t expert_bytes = 0, bytes = 0, embd_bytes = 0;
  for (const SynthTensor& t :
       synth_tensor_plan(*find_synth_shape("qwen3-30b-a3b"), SynthFileType::Q4_K)) {
    w.add_tensor(t.name, t.type, t.ne, nullptr);
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    const int64_t b = *row_bytes(t.type, t.ne[0]) * rows;
    bytes += b;
    if (t.ne.size() == 3) expert_bytes += b;
    if (t.name == "token_embd.weight") embd_bytes = b;
  }
  const auto path = (dir / "qwen3-30b-a3b-meta.gguf").string();
  w.write(path);

  json j = info_json(path);
  EXPECT_EQ(j["arch"], "qwen3moe");
  EXPECT_EQ(j["experts"]["n_expert"], 128);
  EXPECT_EQ(j["experts"]["n_expert_used"], 8);
  EXPECT_EQ(j["experts"]["n_ff_exp"], 768);
  EXPECT_EQ(j["n_params"], int64_t(30532122624));
  // Dense part + 8/128 of the 48 layers' 3 · 2048 · 768 · 128 expert weights.
  const int64_t experts = int64_t(48) * 3 * 2048 * 768 * 128;
  EXPECT_EQ(j["n_params_active"], int64_t(30532122624) - experts + experts / 16);
  // A decode step reads 8/128 of the experts and one row of the (untied) token embedding.
  ASSERT_GT(embd_bytes, 0);
  EXPECT_EQ(j["weight_bytes_active"], bytes - expert_bytes + expert_bytes / 16 - embd_bytes);
  auto text = test::run_command(test::kvrun_binary() + " info -m '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("experts      128, 8 used per token, expert n_ff 768"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("params       30.53 B, 3.35 B active per token"), std::string::npos)
      << text.out;
}

// A metadata-only gpt-oss-20b (the tensor infos of kvrun synth's MXFP4 plan: MXFP4 experts, Q8_0
// elsewhere, as released): 20.91 B parameters (the model card's 20.9B), 4 of 32 experts per
// token (the card's 3.6B active leaves out the 1.16 B of embedding and unembedding, which kvrun
// counts), and the architecture's keys read (its window of 128 on even layers, YaRN ×32).
TEST(Info, GptOssCountsActiveParameters) {
  test::TempDir dir;
  gguf::Writer w;
  const std::string a = "gpt-oss.";
  w.set_string("general.architecture", "gpt-oss");
  w.set_u32(a + "block_count", 24);
  w.set_u32(a + "embedding_length", 2880);
  w.set_u32(a + "feed_forward_length", 2880);
  w.set_u32(a + "attention.head_count", 64);
  w.set_u32(a + "attention.head_count_kv", 8);
  w.set_u32(a + "attention.key_length", 64);
  w.set_u32(a + "attention.value_length", 64);
  w.set_u32(a + "attention.sliding_window", 128);
  w.set_u32(a + "context_length", 131072);
  w.set_u32(a + "vocab_size", 201088);
  w.set_f32(a + "rope.freq_base", 150000.0f);
  w.set_string(a + "rope.scaling.type", "yarn");
  w.set_f32(a + "rope.scaling.factor", 32.0f);
  w.set_u32(a + "rope.scaling.original_context_length", 4096);
  w.set_u32(a + "expert_count", 32);
  w.set_u32(a + "expert_used_count", 4);
  w.set_u32(a + "expert_feed_forward_length", 2880);
  for (const SynthTensor& t :
       synth_tensor_plan(*find_synth_shape("gpt-oss-20b"), SynthFileType::MXFP4))
    w.add_tensor(t.name, t.type, t.ne, nullptr);
  const auto path = (dir / "gpt-oss-20b-meta.gguf").string();
  w.write(path);

  json j = info_json(path);
  EXPECT_EQ(j["arch"], "gpt-oss");
  EXPECT_EQ(j["experts"]["n_expert"], 32);
  EXPECT_EQ(j["experts"]["n_expert_used"], 4);
  EXPECT_EQ(j["n_params"], int64_t(20914757184));
  const int64_t experts = int64_t(24) * 3 * 2880 * 2880 * 32;
  EXPECT_EQ(j["n_params_active"], int64_t(20914757184) - experts + experts / 8);
  auto text = test::run_command(test::kvrun_binary() + " info -m '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("experts      32, 4 used per token, expert n_ff 2880"), std::string::npos)
      << text.out;
}

void expect_one_line_error(const std::string& path, const std::string& what) {
  auto r = test::run_command(test::kvrun_binary() + " info -m '" + path + "'");
  EXPECT_NE(r.exit_code, 0) << what;
  EXPECT_EQ(r.out, "") << what;
  ASSERT_FALSE(r.err.empty()) << what;
  EXPECT_EQ(r.err.find("kvrun: error: "), 0u) << what << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
}

TEST(Info, NotAModelIsAOneLineError) {
  test::TempDir dir;
  const auto text = (dir / "text.gguf").string();
  std::ofstream(text) << "this is not a GGUF file\n";
  expect_one_line_error(text, "text file");

  const auto empty = (dir / "empty.gguf").string();
  std::ofstream{empty};
  expect_one_line_error(empty, "empty file");

  gguf::Writer w;  // a valid GGUF without general.architecture
  w.set_string("general.name", "no arch");
  const auto noarch = (dir / "noarch.gguf").string();
  w.write(noarch);
  expect_one_line_error(noarch, "no architecture");

  gguf::Writer w2;  // architecture but no block_count
  w2.set_string("general.architecture", "llama");
  w2.set_u32("llama.embedding_length", 64);
  const auto nolayers = (dir / "nolayers.gguf").string();
  w2.write(nolayers);
  expect_one_line_error(nolayers, "no block_count");
}

TEST(Info, TruncatedFixtureIsAOneLineError) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  test::TempDir dir;
  std::ifstream in(test::fixture("models/stories260K-F32.gguf"), std::ios::binary);
  std::vector<char> bytes(3000);
  in.read(bytes.data(), std::streamsize(bytes.size()));
  const auto path = (dir / "truncated.gguf").string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  expect_one_line_error(path, "truncated inside the metadata");
}

// A download cut mid-data (issue 24): the header parses, the data section is short. info
// reports what the header says, then fails naming how many of the bytes are there; a file cut
// where its data section begins is a metadata-only file and stays a success.
TEST(Info, CutMidDataSaysTruncatedAndFails) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  test::TempDir dir;
  const auto src = test::fixture("models/stories260K-F32.gguf");
  const gguf::File full = gguf::File::open(src.string());
  int64_t needed = 0;
  for (const gguf::TensorInfo& t : full.tensors())
    needed = std::max<int64_t>(needed, int64_t(t.offset + t.n_bytes));
  const int64_t data_offset = int64_t(full.data_offset());
  std::ifstream in(src, std::ios::binary);
  std::vector<char> bytes(size_t(data_offset + needed / 2));
  in.read(bytes.data(), std::streamsize(bytes.size()));
  const auto path = (dir / "cut.gguf").string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));

  const std::string want =
      "truncated: " + std::to_string(needed / 2) + " of " + std::to_string(needed) + " bytes";
  auto r = test::run_command(test::kvrun_binary() + " info -m '" + path + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("TRUNCATED"), std::string::npos) << r.out;
  auto rj = test::run_command(test::kvrun_binary() + " info -m '" + path + "' --json");
  EXPECT_EQ(rj.exit_code, 1);
  const json j = json::parse(rj.out);
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["has_weights"], false);
  EXPECT_EQ(j["data_bytes_present"], needed / 2);
  EXPECT_EQ(j["data_bytes_needed"], needed);

  // Cut exactly at the data section: metadata only, a success.
  const auto meta = (dir / "meta.gguf").string();
  std::ofstream(meta, std::ios::binary).write(bytes.data(), std::streamsize(data_offset));
  const json m = info_json(meta);
  EXPECT_EQ(m["truncated"], false);
  EXPECT_EQ(m["data_bytes_present"], 0);
  // The complete file: not truncated, every byte present.
  const json c = info_json(src.string());
  EXPECT_EQ(c["truncated"], false);
  EXPECT_EQ(c["has_weights"], true);
  EXPECT_GE(c["data_bytes_present"].get<int64_t>(), needed);
}

}  // namespace
}  // namespace kvrun

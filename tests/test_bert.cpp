// test_bert.cpp — the encoder architectures (bert, nomic-bert; models/bert.h) and their seam ops.
//
// References: tests/data/bert_refs/SHAPE-TYPE.json, ik_llama.cpp's embeddings of a few prompts
// on the synthetic files `kvrun synth --shape tiny-bert|tiny-nomic-bert --type F32|Q8_0` (seed
// 42) as llama-embedding computes them (pooling from the GGUF, Euclidean normalization; the
// README there says how they were made). Each file is written again here and must have the
// reference's sha256 (a change to synth is caught as such, not read as a forward-pass bug); the
// token ids must be equal and every embedding within the bounds below. The CPU ops the encoders
// add to the seam (layer_norm, gelu, bidirectional attention) are checked against their
// definitions computed in double, attention with two sequences in one step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend.h"
#include "engine/context.h"
#include "engine/embed.h"
#include "engine/model.h"
#include "synth_util.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

using nlohmann::json;

/// Agreement with ik_llama.cpp's embeddings (unit vectors). F32: measured cosine 1 − 1e-9 and
/// max |diff| 6.0e-8 over the 10 vectors. Q8_0: both sides round the activations to q8_0, but
/// ik_llama.cpp's own q8_0 kernels round some differently (as tests/data/arch_refs' README
/// reports for its logprobs): measured worst cosine 0.99989, max |diff| 5.1e-3.
struct Bounds {
  double min_cos;
  double max_abs;
};
Bounds bounds_for(const std::string& type) {
  return type == "F32" ? Bounds{0.9999, 1e-6} : Bounds{0.9998, 1e-2};
}

json load_ref(const std::string& model) {
  std::ifstream f(test::test_data("bert_refs/" + model + ".json"));
  return json::parse(f, nullptr, false);
}

std::string sha256_of(const std::string& path) {
  const auto r = test::run_command("sha256sum '" + path + "'");
  return r.exit_code == 0 ? r.out.substr(0, 64) : "";
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

struct EncoderCase {
  std::string shape;
  std::string type;
};
void PrintTo(const EncoderCase& c, std::ostream* os) { *os << c.shape << " " << c.type; }

class EncoderRefs : public ::testing::TestWithParam<EncoderCase> {};

TEST_P(EncoderRefs, MatchIkLlamaCpp) {
  const EncoderCase& c = GetParam();
  const std::string name = c.shape + "-" + c.type;
  const json ref = load_ref(name);
  ASSERT_TRUE(ref.is_object()) << "tests/data/bert_refs/" << name << ".json is missing";
  if (test::run_command("sha256sum /dev/null").exit_code != 0) GTEST_SKIP() << "no sha256sum";
  test::TempDir dir;
  const std::string path =
      test::synth_model(dir, c.shape, *synth_file_type_from_name(c.type), /*n_threads=*/2);
  ASSERT_EQ(sha256_of(path), ref["sha256"].get<std::string>())
      << "kvrun synth no longer writes the file the reference was made from";
  const Model model = Model::load(path);
  ASSERT_TRUE(model.encoder());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const Pooling pooling = model_pooling(model);
  EXPECT_EQ(int(pooling),
            ref["pooling_type"].get<int>() == 2 ? int(Pooling::kCls) : int(Pooling::kMean));
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = 8;  // an encoder's context raises it to n_ctx: one step per input
  cp.n_threads = 2;
  cp.embeddings = true;
  Context ctx(model, cp);
  EXPECT_EQ(ctx.n_batch(), 512);
  const Bounds b = bounds_for(c.type);
  double worst_cos = 1, worst_abs = 0;
  std::vector<std::vector<int32_t>> all_ids;
  std::vector<std::vector<float>> singles;
  for (const json& item : ref["items"]) {
    const std::string prompt = item["prompt"];
    const std::vector<int32_t> ids = tok.tokenize(prompt, true, false);
    ASSERT_EQ(ids, item["tokens"].get<std::vector<int32_t>>()) << prompt;
    const std::vector<float> got = embed_tokens(ctx, ids, pooling);
    all_ids.push_back(ids);
    singles.push_back(got);
    const auto want = item["embedding"].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(double(got[i]) - want[i]));
    const double cs = cosine(got, want);
    EXPECT_GE(cs, b.min_cos) << prompt;
    EXPECT_LE(max_abs, b.max_abs) << prompt;
    worst_cos = std::min(worst_cos, cs);
    worst_abs = std::max(worst_abs, max_abs);
  }
  std::cout << name << ": worst cosine " << worst_cos << ", max |diff| " << worst_abs << "\n";
  // Every prompt in one step (embed_inputs → Context::eval_each), each its own sequence: the
  // same vectors as one at a time.
  ctx.reset();
  const auto rows = ctx.eval_each(all_ids);
  ASSERT_EQ(rows.size(), all_ids.size());
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i].size(), all_ids[i].size() * size_t(model.hparams().n_embd));
  EXPECT_EQ(ctx.n_past(), 0);  // the step's sequences gave their blocks back
  const auto batched = embed_inputs(ctx, all_ids, pooling);
  ASSERT_EQ(batched.size(), singles.size());
  for (size_t i = 0; i < batched.size(); ++i) {
    ASSERT_EQ(batched[i].size(), singles[i].size());
    for (size_t j = 0; j < batched[i].size(); ++j)
      ASSERT_NEAR(batched[i][j], singles[i][j], 1e-5) << "input " << i << " element " << j;
  }
  ctx.reset();
  EXPECT_THROW(ctx.eval_each(std::vector<std::vector<int32_t>>{std::vector<int32_t>(300, 5),
                                                               std::vector<int32_t>(300, 5)}),
               ContextError);  // 600 tokens > n_batch 512
}

INSTANTIATE_TEST_SUITE_P(Shapes, EncoderRefs,
                         ::testing::Values(EncoderCase{"tiny-bert", "F32"},
                                           EncoderCase{"tiny-bert", "Q8_0"},
                                           EncoderCase{"tiny-nomic-bert", "F32"},
                                           EncoderCase{"tiny-nomic-bert", "Q8_0"}),
                         [](const auto& info) {
                           std::string s = info.param.shape + "_" + info.param.type;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(Encoder, CliEmbedsAndGenerationIsRefused) {
  const json ref = load_ref("tiny-bert-F32");
  ASSERT_TRUE(ref.is_object());
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-bert", SynthFileType::F32);
  const json& item = ref["items"][0];
  std::ofstream(dir / "p.txt") << item["prompt"].get<std::string>() << "\n";
  const auto r = test::run_command(test::kvrun_binary() + " embed -m '" + path + "' -f '" +
                                   (dir / "p.txt").string() + "' --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["pooling"], "cls");  // bert.pooling_type 2
  EXPECT_GE(cosine(j["data"][0]["embedding"].get<std::vector<float>>(),
                   item["embedding"].get<std::vector<float>>()),
            bounds_for("F32").min_cos);
  // Text generation: a clear error, no crash.
  const auto gen = test::run_command(test::kvrun_binary() + " -m '" + path + "' -p hello -n 4");
  EXPECT_NE(gen.exit_code, 0);
  EXPECT_NE(gen.err.find("embedding (encoder-only) model"), std::string::npos) << gen.err;
  const Model model = Model::load(path);
  ContextParams cp;
  cp.n_ctx = 64;
  EXPECT_THROW(Context(model, cp).n_ctx(), ContextError);  // not in embeddings mode
  cp.n_ctx = 1024;                                         // past the 512 position rows
  cp.embeddings = true;
  EXPECT_THROW(Context(model, cp).n_ctx(), ContextError);
}

/// A CPU device standing in for a GPU backend without the encoder ops (as CUDA and Vulkan).
class NoEncoderDevice final : public Device {
 public:
  std::string name() const override { return "NoEnc0"; }
  std::string description() const override { return "test device"; }
  bool host_memory() const override { return true; }
  int64_t total_memory() const override { return -1; }
  int64_t free_memory() const override { return -1; }
  bool supports(Op op, DType a, DType b, int64_t k) const override {
    if (op == Op::kLayerNorm || op == Op::kGelu || op == Op::kAttention) return false;
    return dev_->supports(op, a, b, k);
  }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes, BufferUse use) override {
    return dev_->alloc(bytes, use);
  }
  std::unique_ptr<DeviceBuffer> upload_weight(Tensor& t, bool release) override {
    return dev_->upload_weight(t, release);
  }
  std::unique_ptr<Backend> make_backend(int n) override { return dev_->make_backend(n); }

 private:
  std::unique_ptr<Device> dev_ = make_cpu_device("inner");
};

// An encoder layer -ngl puts on a device without layer_norm / gelu / attention (CUDA and Vulkan
// today) runs on the host instead (fit_placement_to_devices), as llama.cpp runs such ops on the
// CPU; an -ot rule cannot move an encoder layer's FFN off its layer.
TEST(Encoder, GpuLayersWithoutTheEncoderOpsRunOnTheHost) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-nomic-bert", SynthFileType::F32);
  NoEncoderDevice gpu;
  ModelParams mp;
  mp.n_gpu_layers = 1000;
  mp.gpu = &gpu;
  const Model m = Model::load(path, mp);
  for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
    EXPECT_EQ(m.placement().layers[size_t(il)], &cpu_device()) << il;
    EXPECT_EQ(m.placement().ffn[size_t(il)], &cpu_device()) << il;
  }
  ModelParams rule;
  rule.overrides = {{"ffn_", &gpu}};
  try {
    Model::load(path, rule);
    FAIL() << "an encoder layer's FFN was moved by -ot";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("encoder layer"), std::string::npos) << e.what();
  }
}

TEST(EncoderOps, LayerNormAndGeluFollowTheirDefinitions) {
  const int64_t rows = 3, cols = 40;
  const std::vector<float> x = test::random_floats(size_t(rows * cols), 7, 2.0f);
  std::vector<float> w = test::random_floats(size_t(cols), 8),
                     bias = test::random_floats(size_t(cols), 9);
  Tensor tw, tb;
  tw.type = tb.type = DType::F32;
  tw.ne[0] = tb.ne[0] = cols;
  tw.data = w.data();
  tb.data = bias.data();
  auto be = cpu_device().make_backend(1);
  std::vector<float> y(x.size());
  be->layer_norm(x.data(), &tw, &tb, y.data(), rows, cols, 1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < cols; ++i) mean += x[size_t(r * cols + i)];
    mean /= cols;
    for (int64_t i = 0; i < cols; ++i) var += std::pow(x[size_t(r * cols + i)] - mean, 2);
    var /= cols;
    for (int64_t i = 0; i < cols; ++i) {
      const double want =
          (x[size_t(r * cols + i)] - mean) / std::sqrt(var + 1e-5) * w[size_t(i)] + bias[size_t(i)];
      ASSERT_NEAR(y[size_t(r * cols + i)], want, 1e-5 * (1 + std::fabs(want))) << r << " " << i;
    }
  }
  std::vector<float> g = {-12.0f, -3.0f, -0.5f, 0.0f, 0.7f, 2.5f, 9.0f, 11.0f};
  std::vector<float> gy(g.size());
  be->gelu(g.data(), gy.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = g[i];
    const double want =
        v <= -10  ? 0
        : v >= 10 ? v
                  : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * v * (1 + 0.044715 * v * v)));
    EXPECT_NEAR(gy[i], want, 1e-6 * (1 + std::fabs(want))) << v;
  }
}

TEST(EncoderOps, AttentionIsBidirectionalWithinEachSequence) {
  // Two sequences (3 and 4 rows) in one step, 4 query heads over 2 KV heads (GQA).
  const AttnParams p{4, 2, 16, 8, 0.25f};
  const int64_t n = 7;
  const int32_t seq_indptr[3] = {0, 3, 7}, block_indptr[3] = {0, 1, 2}, blocks[2] = {0, 1};
  const int32_t last_len[2] = {3, 4}, pos[7] = {0, 1, 2, 0, 1, 2, 3};
  const int64_t slots[7] = {0, 1, 2, 16, 17, 18, 19};
  const PageTable pt{2, n, 16, seq_indptr, block_indptr, blocks, last_len, pos, slots};
  const std::vector<float> q = test::random_floats(size_t(n * p.n_head * p.head_dim), 1);
  const std::vector<float> k = test::random_floats(size_t(n * p.n_head_kv * p.head_dim), 2);
  const std::vector<float> v = test::random_floats(size_t(n * p.n_head_kv * p.head_dim_v), 3);
  std::vector<float> out(size_t(n * p.n_head * p.head_dim_v));
  auto be = cpu_device().make_backend(2);
  be->begin_step(pt);
  be->attention(p, q.data(), k.data(), v.data(), out.data());
  for (int64_t r = 0; r < n; ++r) {
    const int64_t s = r < 3 ? 0 : 1, j0 = seq_indptr[s], j1 = seq_indptr[s + 1];
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t hk = h / 2;
      std::vector<double> sc;
      for (int64_t j = j0; j < j1; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d)
          dot += double(q[size_t((r * p.n_head + h) * p.head_dim + d)]) *
                 k[size_t((j * p.n_head_kv + hk) * p.head_dim + d)];
        sc.push_back(dot * p.scale);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        double want = 0;
        for (int64_t j = j0; j < j1; ++j)
          want += sc[size_t(j - j0)] / sum * v[size_t((j * p.n_head_kv + hk) * p.head_dim_v + d)];
        ASSERT_NEAR(out[size_t((r * p.n_head + h) * p.head_dim_v + d)], want, 1e-5)
            << "row " << r << " head " << h << " dim " << d;
      }
    }
  }
}

}  // namespace
}  // namespace kvrun

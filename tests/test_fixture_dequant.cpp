// test_fixture_dequant.cpp — real llama.cpp-made files decode: every tensor of every quantized
// fixture model, decoded with the traits' scalar `to_float`, is close to the same tensor of the
// F32 file it was quantized from (stories260K-pad-* from stories260K-pad-F32, stories260K-* from
// stories260K-F32). The bound is on the normalized error ‖decoded − f32‖² / ‖f32‖², per dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gguf.h"
#include "test_util.h"

namespace kvrun {
namespace {

// Bounds on the normalized squared error of one tensor, per dtype: 2–4× the worst tensor measured
// on these fixtures (printed by the test; f16 4.4e-8, q8_0 3.8e-5, q6_K 3.3e-4, q5_0 2.5e-3,
// q5_1 1.7e-3, q5_K 1.4e-3, q4_K 5.3e-3, q4_0 9.2e-3), far below what a wrong nibble order or
// scale unpacking gives (≥ 0.1).
double nmse_bound(DType t) {
  switch (t) {
    case DType::F32:
      return 0.0;
    case DType::F16:
      return 1e-7;
    case DType::Q8_0:
      return 1e-4;
    case DType::Q6_K:
      return 1e-3;
    case DType::Q5_1:
    case DType::Q5_0:
    case DType::Q5_K:
      return 5e-3;
    case DType::Q4_0:
    case DType::Q4_K:
      return 2e-2;
    default:
      return -1;  // a type the fixtures are not expected to contain
  }
}

std::vector<float> decode(const gguf::File& f, const gguf::TensorInfo& t) {
  const Tensor v = f.view(t);
  std::vector<float> out(size_t(v.n_elements()));
  for (int64_t r = 0; r < v.n_rows(); ++r) v.row_to_float(out.data() + r * v.ne[0], r);
  return out;
}

struct Worst {
  double nmse = 0;
  std::string where;
};

void check_file(const std::string& quant_name, const std::string& f32_name,
                std::map<DType, Worst>& worst) {
  const gguf::File q = gguf::File::open(test::fixture("models/" + quant_name).string());
  const gguf::File ref = gguf::File::open(test::fixture("models/" + f32_name).string());
  ASSERT_EQ(q.tensors().size(), ref.tensors().size());
  for (const gguf::TensorInfo& t : q.tensors()) {
    SCOPED_TRACE(quant_name + " " + std::string(t.name) + " " + traits(t.type).name);
    const gguf::TensorInfo* r = ref.find_tensor(t.name);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->type, DType::F32);
    for (int d = 0; d < kMaxDims; ++d) ASSERT_EQ(t.ne[d], r->ne[d]);
    const std::vector<float> a = decode(q, t), b = decode(ref, *r);
    double err = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << "element " << i;
      err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(b[i]) * b[i];
    }
    ASSERT_GT(norm, 0.0);
    const double nmse = err / norm;
    const double bound = nmse_bound(t.type);
    ASSERT_GE(bound, 0.0) << "unexpected dtype in a fixture";
    EXPECT_LE(nmse, bound);
    Worst& w = worst[t.type];
    if (nmse >= w.nmse) w = {nmse, quant_name + ":" + std::string(t.name)};
  }
}

TEST(FixtureDequant, EveryQuantizedTensorMatchesTheF32File) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  std::map<DType, Worst> worst;
  for (const char* t : {"F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"})
    check_file(std::string("stories260K-pad-") + t + ".gguf", "stories260K-pad-F32.gguf", worst);
  for (const char* t : {"F16", "Q4_K_M", "Q5_K_M", "Q6_K"})
    check_file(std::string("stories260K-") + t + ".gguf", "stories260K-F32.gguf", worst);
  // The pad family holds real q8_0, q4_0, q4_K, q5_K and q6_K blocks (fixtures README).
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::Q5_0, DType::Q5_1})
    EXPECT_TRUE(worst.count(t)) << traits(t).name << " not seen in the fixtures";
  for (const auto& [t, w] : worst)
    std::printf("  %-5s worst nmse %.3e (bound %.0e) at %s\n", traits(t).name, w.nmse,
                nmse_bound(t), w.where.c_str());
}

}  // namespace
}  // namespace kvrun

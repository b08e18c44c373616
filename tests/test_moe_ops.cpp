// test_moe_ops.cpp — the seam's mixture-of-experts ops (Backend::moe_route, Backend::matmul_id)
// on the CPU backend, against plain scalar references on random data:
//  * moe_route: softmax in double, the k largest by a full sort, renormalized in double;
//    gpt-oss's order (the k largest logits, then a softmax over them); DeepSeek-V3's sigmoid
//    scores and a selection bias that picks the experts but does not weight them;
//  * matmul_id: for every (row, slot), the expert's weights decoded with traits().to_float times
//    the input row quantized to the paired activation type and decoded (as test_cpu_ops), in
//    double; with router weights, the weighted sum of those; with a bias row per expert (gpt-oss),
//    the unbiased outputs plus the bias exactly. Also bit for bit: each expert's
//    outputs equal Backend::matmul of that expert's matrix (uploaded alone, so packed alike) on
//    the rows routed to it — the grouping and the packed experts' offsets change nothing.
// Weight types F32, Q8_0, Q4_0, Q4_K, Q6_K; k ∈ {1, 2, 4} of 6 experts, so experts repeat across
// rows; n = 1 (decode) and n = 7 (prefill); m = 32 (packed) and m = 24 (not packable).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "backend.h"
#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "cpu/ops.h"
#include "test_util.h"

namespace kvrun {
namespace {

using test::random_floats;

/// Reference router of one row: ids by descending softmax probability, weights renormalized.
void route_ref(const float* logits, int64_t ne, int64_t k, bool norm, std::vector<int32_t>& ids,
               std::vector<double>& w) {
  double mx = *std::max_element(logits, logits + ne), sum = 0;
  std::vector<double> p(static_cast<size_t>(ne));
  for (int64_t e = 0; e < ne; ++e) sum += p[size_t(e)] = std::exp(double(logits[e]) - mx);
  std::vector<int32_t> idx(static_cast<size_t>(ne));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  ids.assign(idx.begin(), idx.begin() + k);
  w.clear();
  double s = 0;
  for (int32_t id : ids) s += p[size_t(id)] / sum;
  for (int32_t id : ids) w.push_back(p[size_t(id)] / sum / (norm ? s : 1.0));
}

TEST(MoeRoute, MatchesScalarReference) {
  auto be = cpu_device().make_backend(2);
  const int64_t ne = 8, n = 9;
  const auto logits = random_floats(size_t(n * ne), 7, 2.0f);
  for (int64_t k : {1, 2, 5, 8})
    for (bool norm : {true, false}) {
      SCOPED_TRACE("k " + std::to_string(k) + (norm ? " norm" : ""));
      std::vector<int32_t> ids(size_t(n * k), -1);
      std::vector<float> w(size_t(n * k), -1);
      be->moe_route(logits.data(), n, MoeRouteParams{ne, k, norm}, ids.data(), w.data());
      for (int64_t r = 0; r < n; ++r) {
        std::vector<int32_t> rid;
        std::vector<double> rw;
        route_ref(logits.data() + r * ne, ne, k, norm, rid, rw);
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(ids[size_t(r * k + j)], rid[size_t(j)]) << "row " << r << " slot " << j;
          EXPECT_NEAR(w[size_t(r * k + j)], rw[size_t(j)], 1e-6) << "row " << r << " slot " << j;
          sum += w[size_t(r * k + j)];
        }
        if (norm) {
          EXPECT_NEAR(sum, 1.0, 1e-6);
        }
      }
    }
  std::vector<int32_t> ids(8);
  std::vector<float> w(8);
  EXPECT_THROW(be->moe_route(logits.data(), 1, MoeRouteParams{ne, 9, true}, ids.data(), w.data()),
               std::invalid_argument);
  EXPECT_THROW(be->moe_route(logits.data(), 1, MoeRouteParams{ne, 0, true}, ids.data(), w.data()),
               std::invalid_argument);
}

// gpt-oss's gating (kTopkSoftmax): the k largest logits in descending order, then a softmax
// over those k only, against the same in double; the weights sum to 1 and differ from the
// softmax-first probabilities.
TEST(MoeRoute, TopkThenSoftmaxMatchesScalarReference) {
  auto be = cpu_device().make_backend(2);
  const int64_t ne = 8, n = 9;
  const auto logits = random_floats(size_t(n * ne), 8, 2.0f);
  for (int64_t k : {1, 2, 4, 8}) {
    SCOPED_TRACE("k " + std::to_string(k));
    std::vector<int32_t> ids(size_t(n * k), -1);
    std::vector<float> w(size_t(n * k), -1);
    MoeRouteParams p{ne, k, false};
    p.gating = MoeGating::kTopkSoftmax;
    be->moe_route(logits.data(), n, p, ids.data(), w.data());
    for (int64_t r = 0; r < n; ++r) {
      const float* lr = logits.data() + r * ne;
      std::vector<int32_t> idx(static_cast<size_t>(ne));
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return lr[a] > lr[b]; });
      double mx = lr[idx[0]], den = 0, sum = 0;
      for (int64_t j = 0; j < k; ++j) den += std::exp(double(lr[idx[size_t(j)]]) - mx);
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(ids[size_t(r * k + j)], idx[size_t(j)]) << "row " << r << " slot " << j;
        EXPECT_NEAR(w[size_t(r * k + j)], std::exp(double(lr[idx[size_t(j)]]) - mx) / den, 1e-6)
            << "row " << r << " slot " << j;
        sum += w[size_t(r * k + j)];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
}

/// Gate scores of one row of logits in double: sigmoid, or softmax.
std::vector<double> gate_scores_ref(const float* lr, int64_t ne, MoeGating g) {
  std::vector<double> sc(static_cast<size_t>(ne));
  double mx = *std::max_element(lr, lr + ne), z = 0;
  for (int64_t e = 0; e < ne; ++e) {
    sc[size_t(e)] = g == MoeGating::kSigmoid ? 1 / (1 + std::exp(-double(lr[e])))
                                             : std::exp(double(lr[e]) - mx);
    z += sc[size_t(e)];
  }
  if (g == MoeGating::kSoftmax)
    for (double& v : sc) v /= z;
  return sc;
}

// DeepSeek-V3's gating (kSigmoid) and a selection bias (exp_probs_b), also with softmax scores:
// the experts are the k largest of score + bias, weighted by their unbiased scores (renormalized
// or not), against the same in double. The bias must change some row's choice (so a router that
// ignored it would fail here), and one that is not {n_expert} f32 is refused.
TEST(MoeRoute, SelectionBiasAndSigmoidMatchScalarReference) {
  auto be = cpu_device().make_backend(2);
  const int64_t ne = 8, n = 16;
  const auto logits = random_floats(size_t(n * ne), 9, 2.0f);
  auto bias_v = random_floats(size_t(ne), 10, 0.3f);
  const Tensor bias = Tensor::contiguous(DType::F32, bias_v.data(), ne, 1);
  for (MoeGating g : {MoeGating::kSigmoid, MoeGating::kSoftmax})
    for (int64_t k : {1, 2, 4, 8})
      for (bool norm : {true, false}) {
        SCOPED_TRACE(std::string(g == MoeGating::kSigmoid ? "sigmoid" : "softmax") + " k " +
                     std::to_string(k) + (norm ? " norm" : ""));
        MoeRouteParams p{ne, k, norm};
        p.gating = g;
        p.selection_bias = &bias;
        std::vector<int32_t> ids(size_t(n * k), -1), plain(size_t(n * k), -1);
        std::vector<float> w(size_t(n * k), -1), pw(size_t(n * k));
        be->moe_route(logits.data(), n, p, ids.data(), w.data());
        p.selection_bias = nullptr;
        be->moe_route(logits.data(), n, p, plain.data(), pw.data());
        if (k < ne) {
          EXPECT_NE(ids, plain) << "the bias changed no choice";
        }
        for (int64_t r = 0; r < n; ++r) {
          const float* lr = logits.data() + r * ne;
          const std::vector<double> sc = gate_scores_ref(lr, ne, g);
          std::vector<int32_t> idx(static_cast<size_t>(ne));
          std::iota(idx.begin(), idx.end(), 0);
          auto sel = [&](int32_t e) { return sc[size_t(e)] + double(bias_v[size_t(e)]); };
          std::stable_sort(idx.begin(), idx.end(),
                           [&](int32_t a, int32_t b) { return sel(a) > sel(b); });
          double sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += sc[size_t(idx[size_t(j)])];
          for (int64_t j = 0; j < k; ++j) {
            const int32_t e = idx[size_t(j)];
            EXPECT_EQ(ids[size_t(r * k + j)], e) << "row " << r << " slot " << j;
            EXPECT_NEAR(w[size_t(r * k + j)], sc[size_t(e)] / (norm ? sum : 1.0), 1e-6)
                << "row " << r << " slot " << j;
          }
        }
      }
  std::vector<int32_t> ids(8);
  std::vector<float> w(8);
  MoeRouteParams p{ne, 2, true};
  p.gating = MoeGating::kSigmoid;
  const Tensor short_bias = Tensor::contiguous(DType::F32, bias_v.data(), ne - 1, 1);
  p.selection_bias = &short_bias;
  EXPECT_THROW(be->moe_route(logits.data(), 1, p, ids.data(), w.data()), std::invalid_argument);
}

// Group-limited routing (DeepSeek-V2's group_limited_greedy with group_top 1, DeepSeek-V3's
// noaux_tc with group_top 2): a hand-made row first — the best single expert lies in a group
// whose two best scores sum lower than two other groups', so V3's rule drops it and V2's keeps it
// — then random rows against the rule in double: group scores from score + bias, the n_group_used
// best groups, the top k among their experts, weights the unbiased scores. Groups that do not
// divide the experts or cannot give k are refused.
TEST(MoeRoute, GroupLimitedRoutingMatchesScalarReference) {
  auto be = cpu_device().make_backend(2);
  {
    // 8 experts in 4 groups of 2, sigmoid scores, no bias.
    const std::vector<float> lg = {3.0f, -3.0f, 1.0f, 1.0f, 0.9f, 0.9f, -1.0f, -1.0f};
    MoeRouteParams p{8, 2, false};
    p.gating = MoeGating::kSigmoid;
    p.n_group = 4;
    p.n_group_used = 2;
    std::vector<int32_t> ids(2);
    std::vector<float> w(2);
    p.group_top = 2;  // group sums: g0 σ(3)+σ(−3) = 1.0, g1 1.46, g2 1.42, g3 0.54
    be->moe_route(lg.data(), 1, p, ids.data(), w.data());
    EXPECT_EQ(ids, (std::vector<int32_t>{2, 3}));
    p.group_top = 1;  // group maxima: g0 0.95 is best, then g1 0.73
    be->moe_route(lg.data(), 1, p, ids.data(), w.data());
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 2}));
  }
  const int64_t ne = 16, n = 24;
  const auto logits = random_floats(size_t(n * ne), 21, 2.0f);
  auto bias_v = random_floats(size_t(ne), 22, 0.3f);
  const Tensor bias = Tensor::contiguous(DType::F32, bias_v.data(), ne, 1);
  for (MoeGating g : {MoeGating::kSigmoid, MoeGating::kSoftmax})
    for (int64_t top : {1, 2})
      for (int64_t k : {1, 4, 8}) {
        SCOPED_TRACE(std::string(g == MoeGating::kSigmoid ? "sigmoid" : "softmax") + " top " +
                     std::to_string(top) + " k " + std::to_string(k));
        MoeRouteParams p{ne, k, true};
        p.gating = g;
        p.selection_bias = &bias;
        p.n_group = 4;
        p.n_group_used = 2;
        p.group_top = top;
        std::vector<int32_t> ids(size_t(n * k), -1), plain(size_t(n * k));
        std::vector<float> w(size_t(n * k), -1), pw(size_t(n * k));
        be->moe_route(logits.data(), n, p, ids.data(), w.data());
        MoeRouteParams q = p;
        q.n_group = 1;
        be->moe_route(logits.data(), n, q, plain.data(), pw.data());
        if (top > 1 || k > 1) {  // the best expert's group is always kept: k 1 by max can't differ
          EXPECT_NE(ids, plain) << "the group limit changed no choice";
        }
        for (int64_t r = 0; r < n; ++r) {
          const float* lr = logits.data() + r * ne;
          const std::vector<double> sc = gate_scores_ref(lr, ne, g);
          std::vector<double> sel(static_cast<size_t>(ne));
          for (int64_t e = 0; e < ne; ++e) sel[size_t(e)] = sc[size_t(e)] + bias_v[size_t(e)];
          std::vector<std::pair<double, int>> gs;
          for (int grp = 0; grp < 4; ++grp) {
            std::vector<double> part(sel.begin() + grp * 4, sel.begin() + grp * 4 + 4);
            std::sort(part.rbegin(), part.rend());
            gs.push_back({-(part[0] + (top == 2 ? part[1] : 0.0)), grp});
          }
          std::sort(gs.begin(), gs.end());
          std::vector<int32_t> idx;
          for (int e = 0; e < ne; ++e)
            if (e / 4 == gs[0].second || e / 4 == gs[1].second) idx.push_back(e);
          std::stable_sort(idx.begin(), idx.end(),
                           [&](int32_t a, int32_t b) { return sel[size_t(a)] > sel[size_t(b)]; });
          double sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += sc[size_t(idx[size_t(j)])];
          for (int64_t j = 0; j < k; ++j) {
            EXPECT_EQ(ids[size_t(r * k + j)], idx[size_t(j)]) << "row " << r << " slot " << j;
            EXPECT_NEAR(w[size_t(r * k + j)], sc[size_t(idx[size_t(j)])] / sum, 1e-6)
                << "row " << r << " slot " << j;
          }
        }
      }
  std::vector<int32_t> ids(16);
  std::vector<float> w(16);
  MoeRouteParams p{ne, 9, true};
  p.n_group = 4;
  p.n_group_used = 2;  // 8 experts in 2 groups cannot give 9
  EXPECT_THROW(be->moe_route(logits.data(), 1, p, ids.data(), w.data()), std::invalid_argument);
  p.n_used = 2;
  p.n_group = 3;  // 3 groups do not divide 16 experts
  EXPECT_THROW(be->moe_route(logits.data(), 1, p, ids.data(), w.data()), std::invalid_argument);
  p.n_group = 4;
  p.group_top = 5;  // more than a group's 4 experts
  EXPECT_THROW(be->moe_route(logits.data(), 1, p, ids.data(), w.data()), std::invalid_argument);
}

/// Row-major bytes of `rows` rows of `k` floats encoded in `t`.
std::vector<uint8_t> encode(DType t, const std::vector<float>& x, int64_t rows, int64_t k) {
  const size_t rb = size_t(*row_bytes(t, k));
  std::vector<uint8_t> out(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) traits(t).from_float(x.data() + r * k, out.data() + r * rb, k);
  return out;
}

/// x rounded through the activation type that weights of type t pair with.
std::vector<float> through_act(DType t, const float* x, int64_t k) {
  const cpu::CpuTypeTraits* ct = cpu::cpu_traits(t);
  std::vector<uint8_t> a(size_t(*row_bytes(ct->act_type, k)));
  std::vector<float> out(static_cast<size_t>(k));
  ct->act_from_float(x, a.data(), k);
  traits(ct->act_type).to_float(a.data(), out.data(), k);
  return out;
}

struct IdCase {
  DType type;
  int64_t m;
};

class MatmulIdTypes : public ::testing::TestWithParam<IdCase> {};

/// matmul_id of one weight type and row count against the float64 reference and, bit for bit,
/// against Backend::matmul of each expert on its rows, in the process's current kernel order.
void check_matmul_id(const IdCase& c) {
  const DType t = c.type;
  const int64_t k = 256, m = c.m, ne = 6;
  std::unique_ptr<Device> dev = make_cpu_device("MoeTest");
  auto be = dev->make_backend(2);
  const auto wf = random_floats(size_t(ne * m * k), 11 + uint32_t(t));
  auto wbytes = encode(t, wf, ne * m, k);
  Tensor w = Tensor::contiguous(t, wbytes.data(), k, m, ne);
  std::vector<float> wd(size_t(ne * m * k));  // decoded reference weights
  for (int64_t e = 0; e < ne; ++e)
    for (int64_t r = 0; r < m; ++r) w.row_to_float(wd.data() + (e * m + r) * k, r, e);
  auto up = dev->upload_weight(w, false);  // packs where the level has a kernel
  // Each expert alone, uploaded the same way: what Backend::matmul gives on its rows.
  std::vector<Tensor> slices(static_cast<size_t>(ne));
  std::vector<std::unique_ptr<DeviceBuffer>> slice_ups;
  for (int64_t e = 0; e < ne; ++e) {
    slices[size_t(e)] = Tensor::contiguous(t, wbytes.data() + size_t(e) * w.nb[2], k, m);
    slice_ups.push_back(dev->upload_weight(slices[size_t(e)], false));
  }
  EXPECT_EQ(w.packed != nullptr, slices[0].packed != nullptr) << "experts packed as one matrix";
  const auto bf = random_floats(size_t(ne * m), 12 + uint32_t(t));  // a bias row per expert
  const Tensor bias = Tensor::contiguous(DType::F32, const_cast<float*>(bf.data()), m, ne);

  // n = 300: 1200 pairs, so the activation quantization and the experts' units are split over
  // the pool's chunks (the smaller calls fit one chunk).
  for (int64_t n : {1, 7, 300})
    for (int64_t nu : {1, 2, 4}) {
      if (n == 300 && nu != 4) continue;
      SCOPED_TRACE("n " + std::to_string(n) + ", k " + std::to_string(nu));
      const auto logits = random_floats(size_t(n * ne), uint32_t(100 * n + nu));
      std::vector<int32_t> ids(size_t(n * nu));
      std::vector<float> rw(size_t(n * nu));
      be->moe_route(logits.data(), n, MoeRouteParams{ne, nu, true}, ids.data(), rw.data());
      const auto x = random_floats(size_t(n * k), uint32_t(7 * n + nu));
      const auto xs = random_floats(size_t(n * nu * k), uint32_t(9 * n + nu));
      for (bool per_slot : {false, true}) {
        const std::vector<float>& in = per_slot ? xs : x;
        std::vector<float> y(size_t(n * nu * m), -7), yw(size_t(n * m), -7);
        be->matmul_id(w, in.data(), per_slot, ids.data(), nullptr, n, nu, y.data(), nullptr);
        be->matmul_id(w, in.data(), per_slot, ids.data(), rw.data(), n, nu, yw.data(), nullptr);
        // With a bias per expert (gpt-oss, ggml's add_id): each slot's output plus its expert's
        // bias row, exactly (one f32 add), and the weighted sum of those.
        std::vector<float> yb(y.size(), -7), ywb(yw.size(), -7);
        be->matmul_id(w, in.data(), per_slot, ids.data(), nullptr, n, nu, yb.data(), &bias);
        be->matmul_id(w, in.data(), per_slot, ids.data(), rw.data(), n, nu, ywb.data(), &bias);
        for (int64_t i = 0; i < n * nu; ++i)
          for (int64_t c = 0; c < m; ++c)
            EXPECT_EQ(yb[size_t(i * m + c)],
                      y[size_t(i * m + c)] + bf[size_t(ids[size_t(i)] * m + c)])
                << "biased pair " << i << " out " << c;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < m; ++c) {
            double ref = 0;
            for (int64_t j = 0; j < nu; ++j)
              ref += double(rw[size_t(r * nu + j)]) * double(yb[size_t((r * nu + j) * m + c)]);
            EXPECT_NEAR(ywb[size_t(r * m + c)], ref, 1e-5 * (1 + std::fabs(ref)));
          }
        std::vector<double> ref_w(size_t(n * m), 0.0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < nu; ++j) {
            const int64_t e = ids[size_t(r * nu + j)];
            const auto xr = through_act(t, in.data() + (per_slot ? r * nu + j : r) * k, k);
            for (int64_t i = 0; i < m; ++i) {
              double ref = 0;
              for (int64_t c = 0; c < k; ++c)
                ref += double(wd[size_t((e * m + i) * k + c)]) * double(xr[size_t(c)]);
              ref_w[size_t(r * m + i)] += double(rw[size_t(r * nu + j)]) * ref;
              EXPECT_NEAR(y[size_t((r * nu + j) * m + i)], ref, 1e-4 * (1 + std::fabs(ref)))
                  << "row " << r << " slot " << j << " out " << i;
            }
          }
        for (size_t i = 0; i < ref_w.size(); ++i)
          EXPECT_NEAR(yw[i], ref_w[i], 1e-4 * (1 + std::fabs(ref_w[i]))) << "weighted out " << i;
        // Bit for bit: expert e's outputs are Backend::matmul of e on its rows, in row order.
        for (int64_t e = 0; e < ne; ++e) {
          std::vector<int64_t> pairs;
          for (int64_t i = 0; i < n * nu; ++i)
            if (ids[size_t(i)] == e) pairs.push_back(i);
          if (pairs.empty()) continue;
          std::vector<float> xe, ye(pairs.size() * size_t(m));
          for (int64_t i : pairs) {
            const float* src = in.data() + (per_slot ? i : i / nu) * k;
            xe.insert(xe.end(), src, src + k);
          }
          be->matmul(slices[size_t(e)], xe.data(), int64_t(pairs.size()), ye.data());
          for (size_t q = 0; q < pairs.size(); ++q)
            EXPECT_EQ(0, std::memcmp(ye.data() + q * size_t(m), y.data() + pairs[q] * m,
                                     size_t(m) * sizeof(float)))
                << "expert " << e << " pair " << pairs[q];
        }
      }
    }
  int32_t bad[2] = {0, int32_t(ne)};
  std::vector<float> x(size_t(2 * k)), y(size_t(2 * m));
  EXPECT_THROW(be->matmul_id(w, x.data(), false, bad, nullptr, 2, 1, y.data(), nullptr),
               std::out_of_range);
  const Tensor wrong = Tensor::contiguous(DType::F32, x.data(), m + 1, ne);  // not [m, n_expert]
  int32_t good[2] = {0, 1};
  EXPECT_THROW(be->matmul_id(w, x.data(), false, good, nullptr, 2, 1, y.data(), &wrong),
               std::invalid_argument);
}

// In both summation orders (`--kernels exact|fast`): under fast, the experts' prefill (≥ 2 rows
// of an expert) runs the fast kernels where the level has them, and must still equal the matmul
// of each expert alone, bit for bit.
TEST_P(MatmulIdTypes, MatchesScalarReferenceAndPerExpertMatmul) {
  const cpu::KernelOrder saved = cpu::kernel_order();
  for (cpu::KernelOrder order : {cpu::KernelOrder::exact, cpu::KernelOrder::fast}) {
    cpu::set_kernel_order(order);
    SCOPED_TRACE(order == cpu::KernelOrder::fast ? "--kernels fast" : "--kernels exact");
    check_matmul_id(GetParam());
  }
  cpu::set_kernel_order(saved);
}

INSTANTIATE_TEST_SUITE_P(
    Types, MatmulIdTypes,
    ::testing::Values(IdCase{DType::F32, 32}, IdCase{DType::Q8_0, 32}, IdCase{DType::Q4_0, 32},
                      IdCase{DType::Q4_K, 32}, IdCase{DType::Q6_K, 32}, IdCase{DType::Q8_0, 24},
                      IdCase{DType::Q4_K, 24}, IdCase{DType::Q5_K, 32}, IdCase{DType::MXFP4, 32}),
    [](const ::testing::TestParamInfo<IdCase>& i) {
      return std::string(traits(i.param.type).name) + "_m" + std::to_string(i.param.m);
    });

// The CPU backend's glu runs the clamped SwiGLU of gpt-oss for GluKind::kSwiGluOai
// (cpu::swiglu_oai, bit for bit; its formula is tested in test_cpu_ops), and plain SwiGLU, which
// differs wherever a clamp or the slope matters, for kSwiGlu: the kind is not ignored.
TEST(MoeOps, BackendGluRunsTheClampedSwiglu) {
  auto g = random_floats(200, 31, 6.0f), u = random_floats(200, 32, 6.0f);
  std::vector<float> want(g.size()), via(g.size());
  cpu::swiglu_oai(g.data(), u.data(), want.data(), 10, 20);
  auto be = cpu_device().make_backend(1);
  be->glu(GluKind::kSwiGluOai, g.data(), u.data(), via.data(), 20, 10);
  EXPECT_EQ(want, via);
  be->glu(GluKind::kSwiGlu, g.data(), u.data(), via.data(), 20, 10);
  EXPECT_NE(want, via);
}

}  // namespace
}  // namespace kvrun

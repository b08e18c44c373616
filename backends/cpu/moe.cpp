// moe.cpp — see moe.h.
#include "cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/ops.h"

namespace kvrun::cpu {

namespace {

/// Checks p's group-limited routing fields (backend.h MoeRouteParams); true when they restrict
/// the choice (more than one group and fewer of them used).
bool grouped(const MoeRouteParams& p) {
  const int64_t ng = p.n_group, nu = p.n_group_used;
  if (ng < 1 || p.n_expert % ng != 0)
    throw std::invalid_argument("moe_route: " + std::to_string(ng) +
                                " expert groups do not divide " + std::to_string(p.n_expert) +
                                " experts");
  if (ng == 1 || nu == ng) return false;
  const int64_t size = p.n_expert / ng;
  if (nu < 1 || nu > ng || nu * size < p.n_used || p.group_top < 1 || p.group_top > size)
    throw std::invalid_argument(
        "moe_route: " + std::to_string(nu) + " of " + std::to_string(ng) + " groups of " +
        std::to_string(size) + " experts (group score from the best " +
        std::to_string(p.group_top) + ") cannot give " + std::to_string(p.n_used) + " experts");
  return true;
}

/// Scratch of group_candidates, sized once per moe_route call.
struct GroupScratch {
  std::vector<float> gscore, part;  ///< [n_group] group scores; [group size] one group's scores
  std::vector<int32_t> groups;      ///< [n_group] group ids
  explicit GroupScratch(const MoeRouteParams& p)
      : gscore(static_cast<size_t>(p.n_group)),
        part(static_cast<size_t>(p.n_expert / p.n_group)),
        groups(static_cast<size_t>(p.n_group)) {}
};

/// The ids of the experts in the p.n_group_used best groups of sel (MoeRouteParams), in
/// ascending order, into idx (resized).
void group_candidates(const MoeRouteParams& p, const std::vector<float>& sel, GroupScratch& gs,
                      std::vector<int32_t>& idx) {
  const int64_t ng = p.n_group, size = p.n_expert / ng, top = p.group_top;
  std::vector<float>& gscore = gs.gscore;
  std::vector<float>& part = gs.part;
  std::vector<int32_t>& groups = gs.groups;
  for (int64_t g = 0; g < ng; ++g) {
    std::copy_n(sel.begin() + g * size, size, part.begin());
    std::partial_sort(part.begin(), part.begin() + top, part.end(), std::greater<float>());
    float sum = 0;
    for (int64_t j = 0; j < top; ++j) sum += part[size_t(j)];
    gscore[size_t(g)] = sum;
    groups[size_t(g)] = int32_t(g);
  }
  std::partial_sort(groups.begin(), groups.begin() + p.n_group_used, groups.end(),
                    [&](int32_t a, int32_t c) {
                      return gscore[size_t(a)] > gscore[size_t(c)] ||
                             (gscore[size_t(a)] == gscore[size_t(c)] && a < c);
                    });
  std::sort(groups.begin(), groups.begin() + p.n_group_used);
  idx.clear();
  for (int64_t j = 0; j < p.n_group_used; ++j)
    for (int64_t e = 0; e < size; ++e) idx.push_back(int32_t(groups[size_t(j)] * size + e));
}

}  // namespace

void moe_route(const float* logits, int64_t n, const MoeRouteParams& p, int32_t* ids,
               float* weights) {
  const int64_t ne = p.n_expert, k = p.n_used;
  if (ne < 1 || k < 1 || k > ne)
    throw std::invalid_argument("moe_route: " + std::to_string(k) + " experts used of " +
                                std::to_string(ne));
  const Tensor* b = p.selection_bias;
  if (b && (b->type != DType::F32 || b->ne[0] != ne || b->ne[1] != 1 || !b->data))
    throw std::invalid_argument("moe_route: the selection bias must be {" + std::to_string(ne) +
                                "} f32");
  const float* bias = b ? static_cast<const float*>(b->data) : nullptr;
  const bool by_group = grouped(p);
  GroupScratch gs(p);
  std::vector<float> score(static_cast<size_t>(ne)), sel(static_cast<size_t>(ne));
  std::vector<int32_t> idx(static_cast<size_t>(ne));
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(logits + r * ne, ne, score.begin());
    if (p.gating == MoeGating::kSoftmax) {
      softmax(score.data(), ne);
    } else if (p.gating == MoeGating::kSigmoid) {  // as ggml's sigmoid op: libm expf
      for (float& s : score) s = 1.0f / (1.0f + std::exp(-s));
    }
    for (int64_t e = 0; e < ne; ++e)
      sel[size_t(e)] = bias ? score[size_t(e)] + bias[e] : score[size_t(e)];
    if (by_group) {
      group_candidates(p, sel, gs, idx);
    } else {
      idx.resize(size_t(ne));
      for (int64_t e = 0; e < ne; ++e) idx[size_t(e)] = int32_t(e);
    }
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t c) {
      return sel[size_t(a)] > sel[size_t(c)] || (sel[size_t(a)] == sel[size_t(c)] && a < c);
    });
    int32_t* id = ids + r * k;
    float* w = weights + r * k;
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      id[j] = idx[size_t(j)];
      w[j] = score[size_t(id[j])];
      sum += w[j];
    }
    if (p.gating == MoeGating::kTopkSoftmax)
      softmax(w, k);  // over the k chosen logits
    else if (p.norm)
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

void moe_add_bias(float* ys, const float* bias, const int32_t* ids, int64_t n, int64_t n_used,
                  int64_t m) {
  for (int64_t i = 0; i < n * n_used; ++i) {
    float* y = ys + i * m;
    const float* b = bias + int64_t(ids[i]) * m;
    for (int64_t c = 0; c < m; ++c) y[c] += b[c];
  }
}

void moe_combine(const float* ys, const float* weights, int64_t n, int64_t n_used, int64_t m,
                 float* y) {
  for (int64_t r = 0; r < n; ++r) {
    float* out = y + r * m;
    const float* w = weights + r * n_used;
    for (int64_t c = 0; c < m; ++c) out[c] = ys[r * n_used * m + c] * w[0];
    for (int64_t j = 1; j < n_used; ++j) {
      const float* yj = ys + (r * n_used + j) * m;
      for (int64_t c = 0; c < m; ++c) out[c] += yj[c] * w[j];
    }
  }
}

}  // namespace kvrun::cpu

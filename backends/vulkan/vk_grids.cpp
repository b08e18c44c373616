// vk_grids.cpp — see vk_grids.h.
#include "vulkan/vk_grids.h"

#include <array>

#include "iq_grids.h"

namespace kvrun::vulkan {
namespace {

struct Layout {
  std::vector<uint32_t> words;
  int64_t iq2xxs = 0, iq2xs = 0, iq2s = 0, iq3xxs = 0, iq3s = 0, iq1s = 0;
};

template <size_t N>
int64_t append(std::vector<uint32_t>& w, const std::array<uint64_t, N>& grid) {
  const int64_t at = int64_t(w.size());
  for (uint64_t e : grid) {
    w.push_back(uint32_t(e));
    w.push_back(uint32_t(e >> 32));
  }
  return at;
}

template <size_t N>
int64_t append(std::vector<uint32_t>& w, const std::array<uint32_t, N>& grid) {
  const int64_t at = int64_t(w.size());
  w.insert(w.end(), grid.begin(), grid.end());
  return at;
}

const Layout& layout() {
  static const Layout l = [] {
    Layout r;
    r.iq2xxs = append(r.words, kIq2xxsGrid);
    r.iq2xs = append(r.words, kIq2xsGrid);
    r.iq2s = append(r.words, kIq2sGrid);
    r.iq3xxs = append(r.words, kIq3xxsGrid);
    r.iq3s = append(r.words, kIq3sGrid);
    r.iq1s = append(r.words, kIq1sGrid);
    return r;
  }();
  return l;
}

}  // namespace

const std::vector<uint32_t>& iq_grid_words() { return layout().words; }

int64_t iq_grid_offset(DType t) {
  const Layout& l = layout();
  switch (t) {
    case DType::IQ2_XXS:
      return l.iq2xxs;
    case DType::IQ2_XS:
      return l.iq2xs;
    case DType::IQ2_S:
      return l.iq2s;
    case DType::IQ3_XXS:
      return l.iq3xxs;
    case DType::IQ3_S:
      return l.iq3s;
    case DType::IQ1_S:
    case DType::IQ1_M:
      return l.iq1s;
    default:
      return -1;
  }
}

}  // namespace kvrun::vulkan

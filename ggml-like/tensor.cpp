// tensor.cpp — Tensor view helpers and the aligned Buffer.
#include "tensor.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace kvrun {

Tensor Tensor::contiguous(DType type, void* data, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3) {
  const DTypeTraits& tr = traits(type);
  if (ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0)
    throw std::invalid_argument("tensor shape has a negative dimension");
  auto rb = row_bytes(type, ne0);
  if (!rb)
    throw std::invalid_argument("row of " + std::to_string(ne0) +
                                " elements is not a multiple of " + std::string(tr.name) +
                                "'s block of " + std::to_string(tr.block_elems));
  Tensor t;
  t.type = type;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.ne[2] = ne2;
  t.ne[3] = ne3;
  t.nb[0] = size_t(tr.block_bytes);
  t.nb[1] = size_t(*rb);
  t.nb[2] = t.nb[1] * size_t(ne1);
  t.nb[3] = t.nb[2] * size_t(ne2);
  t.data = data;
  return t;
}

bool Tensor::is_contiguous() const {
  const DTypeTraits& tr = traits(type);
  auto rb = row_bytes(type, ne[0]);
  return nb[0] == size_t(tr.block_bytes) && rb && nb[1] == size_t(*rb) &&
         nb[2] == nb[1] * size_t(ne[1]) && nb[3] == nb[2] * size_t(ne[2]);
}

void Tensor::row_to_float(float* dst, int64_t i1, int64_t i2, int64_t i3) const {
  const DTypeTraits& tr = traits(type);
  if (!tr.to_float) throw std::invalid_argument(std::string("no float decoder for ") + tr.name);
  tr.to_float(row(i1, i2, i3), dst, ne[0]);
}

namespace {
std::atomic<bool> g_huge_pages{true};
}  // namespace

void set_huge_pages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }
bool huge_pages() { return g_huge_pages.load(std::memory_order_relaxed); }

Buffer::Buffer(size_t n_bytes) : Buffer(n_bytes, true) {}

Buffer Buffer::uninitialized(size_t n_bytes) { return Buffer(n_bytes, false); }

Buffer::Buffer(size_t n_bytes, bool zero) : size_(n_bytes) {
  // Only the start moves to 2 MiB: the size stays a multiple of 64, so the tail past the last
  // whole huge page stays on 4 KiB pages and costs no more RAM than before.
  const bool huge = n_bytes >= kHugePageBytes && huge_pages();
  const size_t align = huge ? kHugePageBytes : 64;
  const size_t rounded = (n_bytes + 63) / 64 * 64;
  void* p = nullptr;  // posix_memalign: no size-multiple-of-alignment rule (aligned_alloc has one)
  if (posix_memalign(&p, align, rounded == 0 ? 64 : rounded) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) madvise(p, rounded / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  if (zero)
    std::memset(p, 0, rounded == 0 ? 64 : rounded);
  else
    std::memset(static_cast<char*>(p) + n_bytes, 0, (rounded == 0 ? 64 : rounded) - n_bytes);
  ptr_.reset(p);
}

void Buffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace kvrun

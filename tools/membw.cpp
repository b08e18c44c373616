// membw.cpp — see membw.h.
#include "membw.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include "cpu/thread_pool.h"

namespace kvrun::tools {

double stream_triad_bytes_per_s(int n_threads, int64_t n_doubles, int reps) {
  if (n_doubles < 1 || reps < 1) throw std::invalid_argument("stream triad: bad size or reps");
  std::unique_ptr<double[]> a(new double[size_t(n_doubles)]);
  std::unique_ptr<double[]> b(new double[size_t(n_doubles)]);
  std::unique_ptr<double[]> c(new double[size_t(n_doubles)]);
  cpu::ThreadPool pool(n_threads);
  const int nt = pool.size();
  auto each_thread = [&](auto&& body) {
    pool.run(nt, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) body(n_doubles * t / nt, n_doubles * (t + 1) / nt);
    });
  };
  each_thread([&](int64_t i0, int64_t i1) {  // first touch by the thread that uses the pages
    for (int64_t i = i0; i < i1; ++i) {
      a[size_t(i)] = 1.0;
      b[size_t(i)] = 2.0;
      c[size_t(i)] = 0.5;
    }
  });
  const double s = 3.0;
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    each_thread([&](int64_t i0, int64_t i1) {
      double* __restrict pa = a.get();
      const double* __restrict pb = b.get();
      const double* __restrict pc = c.get();
      for (int64_t i = i0; i < i1; ++i) pa[i] = pb[i] + s * pc[i];
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sec > 0) best = std::max(best, 3.0 * 8.0 * double(n_doubles) / sec);
  }
  if (a[size_t(n_doubles / 2)] != 2.0 + s * 0.5)
    throw std::runtime_error("stream triad: wrong result");
  return best;
}

}  // namespace kvrun::tools

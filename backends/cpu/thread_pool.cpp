// thread_pool.cpp — persistent workers; see thread_pool.h.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace kvrun::cpu {

namespace {

/// Bounds of chunk `i` of `n_chunks` equal parts of [0, n).
void chunk_bounds(int64_t n, int n_chunks, int i, int64_t* begin, int64_t* end) {
  *begin = n * i / n_chunks;
  *end = n * (i + 1) / n_chunks;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/// Spins until `done()` or about `micros` microseconds passed; returns done(). Between checks
/// it yields the core, so that on a machine with more runnable threads than cores the thread it
/// waits for can run (a pure spin would hold the core for a whole scheduler slice).
template <typename Done>
bool spin_until(Done done, int micros) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(int64_t n, const Job& job, int64_t min_chunk) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  const int n_chunks = int(std::min<int64_t>(n_threads_, max_chunks));
  if (n_chunks == 1) {
    job(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    n_ = n;
    n_chunks_ = n_chunks;
    pending_.store(n_chunks - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  int64_t begin, end;
  chunk_bounds(n, n_chunks, 0, &begin, &end);
  job(begin, end);
  auto finished = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished, kSpinMicros)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, finished);
  }
  std::lock_guard<std::mutex> lock(mu_);
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  auto has_work = [&] {
    return stop_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    const Job* job;
    int64_t n;
    int n_chunks;
    if (!spin_until(has_work, kSpinMicros)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, has_work);
    }
    {
      // The job's fields were written under mu_ before generation_ changed.
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
      n = n_;
      n_chunks = n_chunks_;
    }
    if (index < n_chunks) {
      int64_t begin, end;
      chunk_bounds(n, n_chunks, index, &begin, &end);
      (*job)(begin, end);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { std::lock_guard<std::mutex> lock(mu_); }  // the caller is spinning or in done_.wait
        done_.notify_one();
      }
    }
  }
}

}  // namespace kvrun::cpu

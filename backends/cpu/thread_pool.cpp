// thread_pool.cpp — persistent workers; see thread_pool.h.
#include "cpu/thread_pool.h"

#include <algorithm>

namespace kvrun::cpu {

namespace {

/// One step of a spin-wait: a few pause hints first, then sched_yield, so a waiting thread gives
/// its core away when other threads (of this pool or another process) are runnable on it.
inline void spin_step(int i) {
  if (i < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  } else {
    std::this_thread::yield();
  }
}

/// Bounds of chunk `i` of `n_chunks` equal parts of [0, n).
void chunk_bounds(int64_t n, int n_chunks, int i, int64_t* begin, int64_t* end) {
  *begin = n * i / n_chunks;
  *end = n * (i + 1) / n_chunks;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(int64_t n, const Job& job, int64_t min_chunk) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  const int n_chunks = int(std::min<int64_t>(int64_t(n_threads_) * kChunksPerThread, max_chunks));
  if (n_chunks == 1 || n_threads_ == 1) {
    job(0, n);
    return;
  }
  const int helpers = std::min(n_chunks, n_threads_) - 1;  // workers that take part
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    n_ = n;
    n_chunks_ = n_chunks;
    helpers_ = helpers;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(helpers, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) wake_.notify_all();
  }
  take_chunks(job, n, n_chunks);
  for (int i = 0; i < kSpinIters && pending_.load(std::memory_order_acquire) != 0; ++i)
    spin_step(i);
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::take_chunks(const Job& job, int64_t n, int n_chunks) {
  for (int i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
    int64_t begin, end;
    chunk_bounds(n, n_chunks, i, &begin, &end);
    job(begin, end);
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a while for the next job (ops of one decode step come microseconds apart), then
    // sleep on the condition variable.
    for (int i = 0; i < kSpinIters && generation_.load(std::memory_order_acquire) == seen &&
                    !stop_.load(std::memory_order_acquire);
         ++i)
      spin_step(i);
    const Job* job;
    int64_t n;
    int n_chunks, helpers;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, [&] {
        return stop_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
      --sleepers_;
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
      n = n_;
      n_chunks = n_chunks_;
      helpers = helpers_;
    }
    if (index <= helpers) {
      take_chunks(*job, n, n_chunks);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);  // the caller may be about to wait
        done_.notify_one();
      }
    }
  }
}

}  // namespace kvrun::cpu

// thread_pool.cpp — persistent workers; see thread_pool.h.
#include "cpu/thread_pool.h"

#include <algorithm>

namespace kvrun::cpu {

namespace {

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
    pending_ = n_chunks - 1;
    ++generation_;
  }
  wake_.notify_all();
  int64_t begin, end;
  chunk_bounds(n, n_chunks, 0, &begin, &end);
  job(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const Job* job;
    int64_t n;
    int n_chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
      n_chunks = n_chunks_;
    }
    if (index < n_chunks) {
      int64_t begin, end;
      chunk_bounds(n, n_chunks, index, &begin, &end);
      (*job)(begin, end);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace kvrun::cpu

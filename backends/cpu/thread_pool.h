// thread_pool.h — a persistent pool of worker threads for the CPU kernels.
//
// The workers are created once and sleep on a condition variable between jobs, so an op costs a
// wake-up, never a thread creation. A job is a function of (begin, end) over a 1-D index range
// (rows of a matmul, (token, head) pairs of attention); the range is split into up to
// kChunksPerThread contiguous chunks per thread, which the threads (the caller among them) take
// in turn from an atomic counter, so a thread slowed by other work on its core takes fewer
// chunks instead of holding the others at the end of the job (with one chunk per thread, the
// waiting showed as sched_yield in profiles of MoE decode on a busy 2-core machine). Which thread
// computes an index then depends on timing; the result of an index must not (every job computes
// each index on its own, so results stay reproducible).
//
// Waiting: between jobs a worker polls an atomic job counter kSpinIters times (a few pause
// hints, then sched_yield, so that a waiting thread hands its core to any runnable thread when
// the machine is oversubscribed) and only then sleeps on the condition variable; the caller
// likewise polls before sleeping until the workers are done. The ops of one decode step come
// microseconds apart and a condition-variable wake-up costs as much as a small op, so a busy
// pool never pays one between ops, and an idle pool sleeps.
//
// Invariants: one job at a time (run() is not re-entrant and must be called from one thread);
// run() returns only after every chunk finished.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvrun::cpu {

/// A fixed set of worker threads that split index ranges among themselves.
class ThreadPool {
 public:
  /// A range job: computes indices [begin, end).
  using Job = std::function<void(int64_t begin, int64_t end)>;

  /// Starts `n_threads - 1` workers (the caller is the n-th thread). `n_threads` < 1 means 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that take part in a job (workers + the caller).
  int size() const { return n_threads_; }

  /// Runs `job` over [0, n) split into at most kChunksPerThread · size() contiguous chunks (fewer
  /// when n is small or `min_chunk` asks for bigger chunks), taken by the threads in turn, and
  /// waits for all of them. Exceptions from chunks
  /// run by workers terminate the program; kernels do not throw.
  void run(int64_t n, const Job& job, int64_t min_chunk = 1);

 private:
  void worker_loop(int index);
  /// Takes chunks of the current job from next_ and runs them until none is left.
  void take_chunks(const Job& job, int64_t n, int n_chunks);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  /// Polls of a waiting thread before it sleeps (64 pauses, then yields of ~1 µs each when the
  /// core is otherwise idle).
  static constexpr int kSpinIters = 1 << 10;
  /// Chunks per thread of a job (when it has that many indices and min_chunk allows).
  static constexpr int kChunksPerThread = 4;

  const Job* job_ = nullptr;  ///< the job of generation_ (written under mu_)
  int64_t n_ = 0;
  int n_chunks_ = 0;
  int helpers_ = 0;                      ///< workers 1..helpers_ take part in the current job
  std::atomic<int> next_{0};             ///< the next chunk of the current job to take
  std::atomic<uint64_t> generation_{0};  ///< incremented (under mu_) when a job is posted
  std::atomic<int> pending_{0};          ///< workers of the current job not yet done
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;  ///< workers waiting on wake_ (under mu_)
};

}  // namespace kvrun::cpu

// cuda_graph.cu — StepGraph and StepTimer (see cuda_graph.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/cuda_graph.h"

namespace kvrun::cuda {

struct StepGraph::Impl {
  cudaGraphExec_t exec = nullptr;
  int instantiations = 0;
  ~Impl() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}
StepGraph::~StepGraph() = default;
StepGraph::StepGraph(StepGraph&&) noexcept = default;
StepGraph& StepGraph::operator=(StepGraph&&) noexcept = default;

bool StepGraph::ready() const { return impl_->exec != nullptr; }
int StepGraph::instantiations() const { return impl_->instantiations; }

void StepGraph::capture(Context& ctx, const std::function<void()>& enqueue) {
  Context::Impl& c = ctx.impl();
  c.activate();
  check(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(c.stream, &graph);  // leave capture mode before reporting
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(c.stream, &graph), "cudaStreamEndCapture");
  if (impl_->exec) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(impl_->exec, graph, &info) == cudaSuccess) {
      cudaGraphDestroy(graph);
      return;
    }
    cudaGetLastError();  // the update was refused: instantiate anew
    cudaGraphExecDestroy(impl_->exec);
    impl_->exec = nullptr;
  }
  const cudaError_t err = cudaGraphInstantiate(&impl_->exec, graph, 0);
  cudaGraphDestroy(graph);
  check(err, "cudaGraphInstantiate");
  ++impl_->instantiations;
}

void StepGraph::launch(Context& ctx) {
  if (!impl_->exec) throw std::logic_error("StepGraph::launch before capture");
  Context::Impl& c = ctx.impl();
  c.activate();
  check(cudaGraphLaunch(impl_->exec, c.stream), "cudaGraphLaunch");
}

namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

struct StepTimer::Impl {
  bool on = false;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool pending = false;  // start/stop of the last launch not yet read
  Clock::time_point host_begin, last_launch;
  bool launched = false;
  std::vector<double> replay_host_us, record_host_us, gpu_us, wall_us;
  ~Impl() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

StepTimer::StepTimer() : impl_(std::make_unique<Impl>()) {
  const char* e = std::getenv("KVRUN_CUDA_STEP_TIMES");
  impl_->on = e && std::string(e) == "1";
}
StepTimer::~StepTimer() = default;
StepTimer::StepTimer(StepTimer&&) noexcept = default;
StepTimer& StepTimer::operator=(StepTimer&&) noexcept = default;

bool StepTimer::enabled() const { return impl_->on; }

void StepTimer::begin_host() {
  if (impl_->on) impl_->host_begin = Clock::now();
}

void StepTimer::end_host(bool recorded) {
  if (!impl_->on) return;
  const double us = micros(Clock::now() - impl_->host_begin);
  (recorded ? impl_->record_host_us : impl_->replay_host_us).push_back(us);
}

void StepTimer::before_launch(Context& ctx) {
  Impl& t = *impl_;
  if (!t.on) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  if (!t.start) {
    check(cudaEventCreate(&t.start), "cudaEventCreate");
    check(cudaEventCreate(&t.stop), "cudaEventCreate");
  }
  if (t.pending) {
    check(cudaEventSynchronize(t.stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, t.start, t.stop), "cudaEventElapsedTime");
    t.gpu_us.push_back(double(ms) * 1e3);
    t.pending = false;
  }
  const Clock::time_point now = Clock::now();
  if (t.launched) t.wall_us.push_back(micros(now - t.last_launch));
  t.last_launch = now;
  t.launched = true;
  check(cudaEventRecord(t.start, c.stream), "cudaEventRecord");
}

void StepTimer::after_launch(Context& ctx) {
  Impl& t = *impl_;
  if (!t.on) return;
  check(cudaEventRecord(t.stop, ctx.impl().stream), "cudaEventRecord");
  t.pending = true;
}

std::string StepTimer::report() const {
  const Impl& t = *impl_;
  if (t.wall_us.empty()) return "";
  char line[240];
  std::snprintf(line, sizeof line,
                "%zu steps (%zu recorded): launch to launch %.0f us, GPU %.0f us, host %.0f us "
                "replayed / %.0f us recorded (medians)",
                t.replay_host_us.size() + t.record_host_us.size(), t.record_host_us.size(),
                median(t.wall_us), median(t.gpu_us), median(t.replay_host_us),
                median(t.record_host_us));
  return line;
}

}  // namespace kvrun::cuda

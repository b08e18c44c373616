// cuda_graph.cu — StepGraph (see cuda_graph.h).
#include <stdexcept>

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

}  // namespace kvrun::cuda

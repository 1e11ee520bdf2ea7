// The host runtime: executes IR graphs on host memory with ATen CPU kernels.
//
// Design: compile() walks the graph once and produces an immutable HostExecutable:
//  * only nodes that some requested output depends on are kept (dead code is skipped);
//  * each kept non-parameter node becomes a Kernel closure (kernels.h) with its attributes
//    pre-decoded and constants pre-built;
//  * each value's last use is precomputed, so run() drops intermediates as soon as no later
//    node reads them and peak memory stays near the live set instead of the whole graph.
// run() wraps tensor bindings with at::from_blob (no copies), then evaluates the steps in
// order. An output whose destination has the node's dtype and shape and overlaps neither an
// input binding nor another destination is computed directly into the destination (ATen
// `_out` variants); any other output is computed and then copied (copy_ converts the dtype).
// ATen is called with autograd and Python dispatch keys excluded, so user dispatch modes and
// autograd never see the runtime's internal CPU ops.
#pragma once

#include <memory>
#include <vector>

#include "runtime/host/kernels.h"
#include "runtime/runtime.h"

namespace torch_tpu::runtime::host {

class HostExecutable final : public Executable {
 public:
  HostExecutable(const ir::Graph& graph, const std::vector<int32_t>& outputs);
  void run(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs,
           RngState rng) const override;

 private:
  struct Param {
    int32_t node;
    int64_t binding;  // >= 0: inputs[binding]; kRngSeedBinding / kRngOffsetBinding
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  struct Step {
    int32_t node;
    Kernel kernel;
    std::vector<int32_t> release;  // values whose last use is this step
  };

  at::Tensor bind_param(const Param& p, const std::vector<Binding>& inputs, RngState rng) const;

  int32_t num_nodes_ = 0;
  std::vector<at::ScalarType> node_dtype_;          // per node id
  std::vector<std::vector<int64_t>> output_shape_;  // per node id (outputs only)
  std::vector<bool> is_output_;                     // per node id: may be requested by run()
  std::vector<Param> params_;
  std::vector<Step> steps_;
};

class HostRuntime final : public Runtime {
 public:
  const char* name() const override { return "host"; }
  std::unique_ptr<Executable> compile(const ir::Graph& graph,
                                      const std::vector<int32_t>& outputs) override;
};

}  // namespace torch_tpu::runtime::host

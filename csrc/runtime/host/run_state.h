// The state of one run of a HostExecutable: its values and output destinations.
//
// Design: internal to the host executor. It is shared by the in-order run (executor.cpp) and
// the shared run that a waiting thread joins (shared_run.cpp), which live in files of their
// own; nothing outside runtime/host/ includes it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "runtime/host/executor.h"

namespace torch_tpu::runtime::host {

// One run's values and output destinations.
struct HostExecutable::RunState {
  // An output's destination, and whether a kernel may write into it.
  struct Dest {
    at::Tensor tensor;
    bool direct = false;
    // Lent by an output that views this node's value (ViewRoute): the value is read from it
    // once written, so the view is taken of the destination's memory.
    bool lent = false;
  };
  Values values;
  std::vector<Dest> dests;
  std::vector<int32_t> first_dest;  // per node: its first destination, -1 if none
  std::vector<int32_t> next_dest;   // chains several destinations of one node
  bool owned = false;               // the destinations hold their memory's owners (run_and_release)
  // Failure containment (executor.h): per node, 1 when its value depends on a failed step or a
  // lost input; empty until a run has either. The first error and the step that threw it.
  std::vector<uint8_t> tainted;
  std::exception_ptr error;
  int32_t failed_node = -1;
  int32_t failed_step = -1;

  // Writes node's value into its destinations (executor.cpp).
  void write_outputs(int32_t node);
};

}  // namespace torch_tpu::runtime::host

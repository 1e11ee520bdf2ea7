// A compiled program for one ATen call signature (strict/debug) — what the cache stores.
//
// It carries the verified IR graph, the runtime executable, and the plan that maps the
// program's results back onto PyTorch: which nodes become new tensors, which are written into
// argument tensors (in-place ops, out=), and what the ATen call returns.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "runtime/runtime.h"

namespace torch_tpu::compiler {

struct OutputSpec {
  int32_t node = 0;
  int32_t target = -1;     // >= 0: write into the tensor of this binding; -1: a new tensor
  int32_t new_index = -1;  // for target == -1: index into Program::new_tensors
  // For target >= 0 in compiled graphs: the program reads the binding after writing it, so it
  // is bound as a copy (Binding::snapshot). Per-op programs decide per call (exec/dispatch.cpp).
  bool snapshot = true;
};

struct NewTensorSpec {
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  // Allocated channels-last (4-d only): a compiled forward's activations saved for its
  // backward, which the host runtime computes channels-last (torch_tpu/compile/backend.py).
  bool channels_last = false;
};

// The new tensor a result node fills: the node's own dtype and shape, or for a complex tensor
// (`complex_dtype` is complex64/complex128) the node is its view_as_real: [..., 2] of the parts.
NewTensorSpec new_tensor_for(const ir::Node& node, std::optional<c10::ScalarType> complex_dtype);
// True when `spec` is what new_tensor_for gives for `node` (one of the two forms).
bool spec_matches_node(const NewTensorSpec& spec, const ir::Node& node);

// A view of a binding's tensor, as traced: the view's sizes, strides and storage offset
// (relative to the binding's), and the binding's sizes and strides it assumes.
struct BindingView {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  std::vector<int64_t> base_sizes, base_strides;
};

// One ATen return: a new tensor, an argument's tensor (by binding), a list of those, or an
// undefined tensor (a backward op's result disabled by its output_mask). Compiled graphs also
// return views of their inputs (a saved `t(weight)`) and of their new tensors (saved q, k, v:
// slices of one projection): torch_tpu/compile/lower_graph.py.
struct ReturnSpec {
  enum class Kind : uint8_t { New, Binding, List, Undefined, View, NewView } kind = Kind::New;
  int32_t index = 0;              // New, NewView: new_tensors index; Binding, View: binding index
  std::vector<ReturnSpec> items;  // List
  BindingView view;               // View, NewView
};

struct Program {
  ir::Graph graph;
  std::unique_ptr<runtime::Executable> executable;
  std::vector<OutputSpec> outputs;
  std::vector<NewTensorSpec> new_tensors;
  std::vector<ReturnSpec> returns;
  // Compiled graphs only: values written into the CPU 0-d tensors the graph mutates (an
  // optimizer's step counts), which depend on scalar bindings alone: a host run computes them
  // once the program is enqueued (exec/compiled.cpp). target: the binding.
  std::vector<OutputSpec> host_outputs;
  uint64_t rng_counters = 0;  // Philox counters consumed per run (0: no randomness)
  // Small enough that handing it to a stream worker costs more than running it: strict mode
  // runs such a program on the calling thread when its stream is idle (same order, same result).
  bool run_inline_when_idle = false;
  // Whether the program holds a contraction (dot_general, convolution): fused mode's slow start
  // cuts only graphs that hold one (exec/fused.cpp).
  bool contracts = false;
  bool baked_scalars = false;
  // Per binding index: whether a parameter reads it (out= targets are written, not read).
  std::vector<uint8_t> reads_binding;
};

}  // namespace torch_tpu::compiler

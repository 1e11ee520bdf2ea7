// What the dispatcher learns about one ATen call on tpu tensors, and the lowering hook.
//
// Design (see docs/architecture.md, "The per-op path"): the boxed kernel walks the call's
// arguments once, writing the program-cache key and the runtime bindings in the same pass.
// On a cache hit it runs the cached program; on a miss it asks the lowering hook (installed by
// the Python extension; lowerings are written in Python and run only on misses) to build and
// compile the program.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "runtime/runtime.h"
#include "runtime/select.h"

namespace torch_tpu::exec {

// How an argument of an op's schema is treated (computed once per op).
enum class ArgKind : uint8_t {
  Tensor,             // Tensor / Tensor? / Tensor[] / Tensor?[]: bindings
  RuntimeScalar,      // Scalar / float: a runtime input (unless the op bakes scalars)
  RuntimeScalarList,  // Scalar[]: one runtime input per element (a _foreach_ op's step sizes)
  Generator,          // Generator?
  Baked,              // anything else: part of the key, passed to the lowering as a value
};

// How an op's new results take their memory format, as PyTorch lays them out (its fake tensors
// for the device; docs/architecture.md, "The per-op path"): ops that allocate
// `empty_like(input, input.suggest_memory_format())` (batch norm, dropout, pooling, relu)
// follow their first 4-d or 5-d tensor argument; convolutions (input or weight channels-last)
// follow any, as on CPU and CUDA; layer norm, grid sampling, max unpooling and channel shuffle
// give contiguous results. Ops on volumes (names ending in 3d) take channels-last-3d only:
// their unbatched 4-d operands are [C, D, H, W], not images; of those, adaptive average
// pooling and transposed convolutions return contiguous volumes. `_foreach_` ops: the k-th
// result follows the k-th tensor of the first list, as each per-tensor op does.
enum class OutputLayout : uint8_t { kFirstInput, kAnyInput, kContiguous, kPerListElement };

struct OpInfo {
  std::string qualname;  // "aten::add"
  std::string overload;  // "Tensor" or ""
  std::vector<ArgKind> kinds;
  bool bake_scalars = false;  // set when a lowering needed concrete scalar values
  // The same, learned from a call with complex tensors (their lowerings often decompose):
  // scalars are baked only in calls with complex tensors, so a complex test run does not make
  // every later real call of the op key on its scalars (an optimizer's step sizes).
  bool bake_scalars_complex = false;
  bool is_view = false;       // returns an alias: must be registered as a metadata kernel
  bool has_device_arg = false;
  // Memory format of the op's new 4-d and 5-d results (see result_format in dispatch.cpp).
  OutputLayout layout = OutputLayout::kFirstInput;
  int8_t layout_min_rank = 4;  // 5 for ops on volumes
  int8_t transposed_arg = -1;  // convolutions: the schema index of `bool transposed`
  // fill_ reads its 0-d value before writing (ATen clones it when it aliases the target), so
  // `x.fill_(x[2])` and `x[0:1] = x[0]` are no partial overlap.
  bool value_read_first = false;
  // fill_ and zero_ may write a tensor whose elements share memory (an expanded one), as on CPU;
  // every other op raises CPU's internal-overlap error for such a written tensor.
  bool writes_overlapping = false;
  // fill_, masked_fill, index_fill: the schema index of the Scalar `value`, which CPU converts
  // to self's dtype with an overflow check (check_fill_value in dispatch.cpp); -1 for others.
  int8_t fill_value_arg = -1;
  // The result depends on whether a tensor argument is contiguous: ATen's det and slogdet
  // factorize A^T when A is contiguous, and their backward reads that factorization.
  bool keys_contiguity = false;
};

struct CallState {
  std::vector<int64_t> key;
  uint64_t hash = 0;
  std::vector<runtime::Binding> bindings;
  std::vector<at::Tensor> tensors;  // per binding: its tensor (undefined for scalars)
  std::vector<int32_t> first_binding;  // per schema argument: first binding index or -1
  c10::Device device{c10::DeviceType::PrivateUse1, 0};
  bool device_known = false;
  std::optional<at::Generator> generator;
  bool bake = false;  // this call keys on (and bakes) its scalar values
};

// Builds and compiles the program for a call on a cache miss. Returns null when no lowering
// exists and the CPU fallback is enabled (the caller then runs the op on the CPU). Throws the
// lowering's error otherwise (NotImplementedError naming op and dtypes, shape errors, ...).
using CompileHook = std::shared_ptr<compiler::Program> (*)(const c10::OperatorHandle& op, const OpInfo& info,
                                                           c10::ArrayRef<c10::IValue> args, const CallState& call);
void set_compile_hook(CompileHook hook);

// The runtime chosen by TORCH_TPU_RUNTIME (runtime/select.h).
using runtime::selected_runtime;

// Compiles a deserialized graph into a Program (verifier, runtime compile). Used by the hook.
// `memory`, when given, says which bindings and outputs may share memory (runtime.h).
void finish_program(compiler::Program& program, const std::vector<int32_t>& output_nodes,
                    const runtime::MemoryClasses* memory = nullptr);

// A tensor binding over t's memory (address of element [0,...,0], sizes and strides).
runtime::Binding tensor_binding(const at::Tensor& t);

// The boxed kernel registered as the PrivateUse1 fallback.
void lowered_op_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// A `_foreach_` op whose lists span devices (exec/foreach_devices.cpp): runs it as one lowered
// call per device (and `_foreach_copy_`'s cross-device elements as copy_), replacing the
// arguments on the stack with its results; false (stack untouched) when all are on one device.
bool run_foreach_across_devices(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Makes `qualname.overload` (overload "" or "default": the default one) a PrivateUse1 kernel of
// the lowering path, ranking above a user op's CompositeExplicitAutograd kernel
// (exec/user_ops.cpp). Idempotent; ValueError for a name without a namespace.
void register_lowered_op(const std::string& qualname, const std::string& overload);

// Runs an op through the lowering path even if a kernel is registered for it (used by C++
// kernels that pre-process arguments, e.g. boolean-mask indexing).
void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_tpu::exec

// Running a compiled Program on tpu tensors: the pieces of the per-op path's execute() that
// other callers (compiled FX graphs, exec/compiled.cpp) share with it.
//
// Design: execute() (dispatch.cpp) reserves random-number counters, allocates new outputs and
// launches the program with strict/debug semantics. Compiled graphs need the same three steps
// with a different source of bindings, so the steps live here instead of being copied.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "compiler/program.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

struct OpInfo;  // exec/call.h

// Reserves prog.rng_counters Philox counters from `gen` (the device's default generator when
// absent or undefined) and returns the state to bind; a zero state when the program draws no
// random numbers. Thread safety: the generator's own lock. Throws for an invalid device.
runtime::RngState reserve_rng(const compiler::Program& prog, const std::optional<at::Generator>& gen,
                              c10::DeviceIndex device);

// A new tpu tensor of spec's dtype and shape on `device`, from the caching allocator
// (uninitialised): channels-last when the spec says so, else laid out in `format` where that
// format fits its rank (channels-last for 4-d, channels-last-3d for 5-d), else contiguous.
// Throws torch.OutOfMemoryError when the device is full.
at::Tensor new_device_tensor(const compiler::NewTensorSpec& spec, c10::DeviceIndex device,
                             at::MemoryFormat format = at::MemoryFormat::Contiguous);

// Runs prog with strict/debug semantics on the current stream of `device`: inline in debug
// mode (after waiting for the stream), inline when the program is small and the stream idle,
// else enqueued on the stream's worker. `inputs` is moved from when the work is enqueued;
// `keep` and `news` are the tensors the bindings point into (kept alive by queued work).
// Does not flush pending fused work: callers in fused mode flush first. Throws errors of
// earlier queued work (strict) or of this run (debug / inline). `op` (null: a compiled graph)
// names the program in an error raised when it runs queued.
void launch_program(const std::shared_ptr<compiler::Program>& prog, std::vector<runtime::Binding>& inputs,
                    std::vector<runtime::OutputTarget>&& outputs, const std::vector<at::Tensor>& keep,
                    const std::vector<at::Tensor>& news, runtime::RngState rng, c10::DeviceIndex device,
                    const OpInfo* op = nullptr);

}  // namespace torch_tpu::exec

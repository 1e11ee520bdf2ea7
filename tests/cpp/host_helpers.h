// Helpers shared by the C++ tests that compile hand-built IR programs on the host runtime's
// executor directly (fused or unfused), bind ATen CPU tensors and run into fresh output tensors.
#pragma once

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "graph_helpers.h"
#include "runtime/host/executor.h"

namespace torch_tpu::testing {

// A tensor binding over t's memory (t must outlive the run).
inline runtime::Binding tensor_binding(const at::Tensor& t, bool snapshot = false) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Tensor;
  b.dtype = t.scalar_type();
  b.data = t.data_ptr();
  b.sizes.assign(t.sizes().begin(), t.sizes().end());
  b.strides.assign(t.strides().begin(), t.strides().end());
  b.snapshot = snapshot;
  return b;
}

// Gives the calling thread one OpenMP thread, as a stream worker has: libgomp's per-thread
// setting, loaded through libtorch_cpu (this binary does not link it).
inline void use_one_openmp_thread() {
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  ASSERT_NE(set_threads, nullptr);
  set_threads(1);
}

// p verified and compiled by the host executor, with or without fused clusters.
inline runtime::host::HostExecutable compile_host(const Program& p, const std::vector<int32_t>& outputs, bool fuse) {
  ir::verify(p.g);
  runtime::host::HostOptions o;
  o.fuse = fuse;
  return runtime::host::HostExecutable(p.g, outputs, o);
}

// One target per output over a fresh tensor of the node's shape and dtype, filled with 7 (so
// an output the run never writes shows); the tensors are appended to *results.
inline std::vector<runtime::OutputTarget> fresh_targets(const Program& p, const std::vector<int32_t>& outputs,
                                                        std::vector<at::Tensor>* results) {
  std::vector<runtime::OutputTarget> targets;
  for (int32_t o : outputs) {
    const ir::Node& n = p.g.node(o);
    results->push_back(at::full(n.shape, 7, static_cast<at::ScalarType>(n.dtype)));
    targets.push_back({o, tensor_binding(results->back())});
  }
  return targets;
}

}  // namespace torch_tpu::testing

#include "runtime/select.h"

#include <atomic>
#include <string>

#include "common/check.h"
#include "common/config.h"
#include "runtime/pjrt/pjrt_runtime.h"

namespace torch_tpu::runtime {

namespace {
std::atomic<Runtime& (*)()> g_jax{nullptr};
}  // namespace

void set_jax_runtime(Runtime& (*factory)()) { g_jax.store(factory, std::memory_order_release); }

Runtime& selected_runtime() {
  static Runtime* rt = [] {
    std::string name = config::get("TORCH_TPU_RUNTIME");
    TPU_CHECK_VALUE(name == "host" || name == "pjrt" || name == "auto" || name == "jax",
                    "unknown TORCH_TPU_RUNTIME '", name, "' (expected 'host', 'pjrt', 'auto' or 'jax')");
    if (name == "jax") {
      Runtime& (*jax)() = g_jax.load(std::memory_order_acquire);
      TPU_CHECK_VALUE(jax != nullptr, "TORCH_TPU_RUNTIME=jax: the JAX runtime is part of the Python extension only");
      return &jax();
    }
    if (name != "host") {
      if (Runtime* pjrt = ::torch_tpu::pjrt::pjrt_runtime(/*required=*/name == "pjrt")) return pjrt;
    }
    return &host_runtime();
  }();
  return *rt;
}

}  // namespace torch_tpu::runtime

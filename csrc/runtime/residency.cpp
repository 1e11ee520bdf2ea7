#include "runtime/residency.h"

namespace torch_tpu::runtime {

static std::atomic<Residency*> g_residency{nullptr};

Residency* residency() { return g_residency.load(std::memory_order_acquire); }

void install_residency(Residency* r) { g_residency.store(r, std::memory_order_release); }

}  // namespace torch_tpu::runtime

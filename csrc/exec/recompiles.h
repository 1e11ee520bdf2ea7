// Recompile explainer for the eager modes: why a per-op program cache miss compiled again.
//
// A miss of the per-op cache (exec/dispatch.cpp) for an op already compiled for other input
// shapes, dtypes or strides is a recompile. It is explained only on the miss path (a hit never
// comes here): the op's previous signature is compared with this call's, and the first input
// whose size, dtype or stride changed is named, with the user's source line when a Python frame
// is known. Events are counted by reason (bounded) and kept in a short ring of recent ones;
// TORCH_TPU_LOG=recompiles prints each as it happens, and a warning is raised once the count
// passes TORCH_TPU_RECOMPILE_WARN. torch_tpu.metrics()["recompiles"] merges these with the
// compiled-mode ones (torch_tpu/compile/recompiles.py).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/call.h"

namespace torch_tpu::exec {

// Called on every per-op cache miss (before compiling); records a recompile when info was
// compiled before for another signature.
void note_eager_miss(const OpInfo& info, const CallState& st);

struct RecompileEvent {
  std::string kind;    // "eager_op"
  std::string what;    // the op, "aten::mm.default"
  std::string reason;  // "input 0 size [2, 30, 128] -> [2, 40, 128]"
  std::string source;  // "file.py:12", or empty
};

struct RecompileStats {
  uint64_t count = 0;
  std::vector<std::pair<std::string, uint64_t>> by_op;  // op -> recompiles
  std::vector<RecompileEvent> recent;                   // oldest first, at most kRecentEvents
};
RecompileStats recompile_stats();
void reset_recompile_stats();

// Settings read at first use (TORCH_TPU_LOG contains "recompiles"; TORCH_TPU_RECOMPILE_WARN);
// the Python API can override them.
void set_recompile_log(bool on);
bool recompile_log();
void set_recompile_warn(int64_t count);
int64_t recompile_warn();

}  // namespace torch_tpu::exec

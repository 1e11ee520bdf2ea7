// Execution modes: how many ops are gathered before a program is compiled and run.
//
// debug: one op, synchronous, verifier on, errors at the call site.
// strict: one op, asynchronous (per-device stream queue); the default.
// fused: ops recorded into pending graphs (DeferAndFuse), run fused at sync points (fused.h).
// The mode is process-wide; changing it synchronizes all devices so no work straddles modes.
#pragma once

#include <string>

namespace torch_tpu::exec {

enum class Mode : int { Debug = 0, Strict = 1, Fused = 2 };

Mode mode();
void set_mode(Mode m);
const char* mode_name(Mode m);
// Accepts "debug", "strict", "fused" (case-insensitive). Throws c10::ValueError otherwise.
Mode parse_mode(const std::string& name);

// CPU fallback for ops with no lowering (TORCH_TPU_FALLBACK=cpu).
bool cpu_fallback_enabled();
void set_cpu_fallback(bool enabled);

}  // namespace torch_tpu::exec

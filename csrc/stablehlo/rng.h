// rng_uniform / rng_normal in StableHLO: Philox4x32-10 spelled out in integer ops.
//
// Design: the runtime's random numbers must not depend on the backend, so instead of
// stablehlo.rng_bit_generator (whose algorithm and stream layout the plugin picks) the emitter
// writes the same Philox4x32-10 that builder.py's reference and the host runtime run: 64-bit
// counters offset+i split into two u32 words, 32x32->64 multiplies done in ui64, ten rounds with
// the key schedule. The bit-to-float recipes are docs/ir.md's, exact in every dtype.
#pragma once

#include "ir/graph.h"
#include "stablehlo/text.h"

namespace torch_tpu::stablehlo {

// The value of an rng_uniform or rng_normal node (`node.numel() > 0`), given its seed and offset
// operands (0-d i64).
Val emit_rng(Body& b, const ir::Node& node, const Val& seed, const Val& offset);

}  // namespace torch_tpu::stablehlo

// A Program's description as bytes: what the disk tier of the program cache stores.
//
// Design: a Program minus its runtime executable is fully described by its IR graph and the
// plan that maps results back onto PyTorch (outputs, new tensors, returns, rng counters, the
// baked-scalars flag); finish_program() rebuilds the executable from that cheaply.
// run_inline_when_idle and contracts are recomputed by finish_program and are not stored.
//
// Format (host byte order, which the disk cache's directory version pins implicitly: entries
// are private to one user on one machine): a 4-byte tag "TPP1", then the graph (node count;
// per node kind u8, dtype i8, shape, operands, iattrs, fattrs, each a u32 count then values),
// outputs (node, target, new index, snapshot flag u8), new tensors (dtype, shape, channels-last flag u8), returns
// (recursive, lists nest at most kMaxReturnDepth deep; a view return then has its sizes, strides, offset, base sizes
// and base strides), host outputs (node, target), the rng counter count (u64) and the baked flag (u8). Bump
// kProgramFormatVersion on any change.
//
// Deserialization trusts nothing (entries are authenticated by the disk tier, but a key can
// leak and a bug can write nonsense): every count is checked against the bytes left (so no
// input can make it allocate more than its own size), every enum and index is range-checked
// (operands refer to earlier nodes), shapes are non-negative with a bounded element count, and
// the payload must be consumed exactly. Failures throw c10::Error naming what was wrong. The
// graph is not type-checked here: callers run ir::verify() before compiling it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "compiler/program.h"

namespace torch_tpu::compiler {

inline constexpr uint32_t kProgramFormatVersion = 3;

// Serializes everything but the executable and run_inline_when_idle. Never throws except on
// allocation failure.
std::string serialize_program(const Program& program);

// Rebuilds a Program without an executable (call finish_program with output_nodes() next).
// Throws c10::Error on malformed input; never reads out of bounds.
Program deserialize_program(std::string_view bytes);

// The output node ids in the order finish_program expects (one per OutputSpec).
std::vector<int32_t> output_nodes(const Program& program);

}  // namespace torch_tpu::compiler

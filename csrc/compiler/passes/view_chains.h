// Graph pass: collapsing chains of view nodes (target-independent, IR only; compiler/passes/).
//
// Design: lowerings reshape their operands to the shapes their IR wants, and fused mode
// composes ops by reading each op's result through the view it was stored as (flatten, then
// reshape to the reader's shape), so consecutive reshapes (and transposes of transposes) are
// common, and many of them return the shape they started from. A runtime that executes each
// node as a step pays for every link, and a reshape of a non-contiguous value (a transpose's
// result on the host) even copies. The pass rewrites each reshape or transpose to read the
// start of its chain, and forwards the readers of one that changes nothing (the same shape, or
// the identity permutation) to its operand. Node ids are kept: a node left without readers
// stays in place for the runtime's liveness to drop, so callers' node ids (outputs, memory
// classes, stores) still name the same values. Nodes in `keep` (outputs) are never forwarded.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace torch_tpu::compiler::passes {

// The graph with view chains collapsed (see above); keep[i] marks nodes that must stay as
// they are (a node id beyond keep's size is not kept).
ir::Graph collapse_view_chains(const ir::Graph& graph, const std::vector<bool>& keep);

}  // namespace torch_tpu::compiler::passes

// Conversion of builder.py's wire format into an ir::Graph.
//
// Design: GraphBuilder.serialize() yields a list of tuples
// (op_id, operand_ids, scalar_type_code, shape, iattrs, fattrs), one per node in topological
// order. This is the only place that reads that format, shared by the IR test bindings and
// the lowering bridge. It checks only what the Graph cannot represent (op ids, dtype codes,
// tuple layout) and raises ValueError for those; types and attributes are ir::verify()'s job.
#pragma once

#include <pybind11/pybind11.h>

#include "ir/graph.h"

namespace torch_tpu::python {

ir::Graph graph_from_python(const pybind11::list& nodes);

}  // namespace torch_tpu::python

// The IR graph: an append-only list of typed nodes in topological order.
//
// Design: node i defines SSA value %i; operands name earlier nodes by id, so a Graph built by
// appending is always topologically ordered and cheap to copy, serialize and walk. Graphs are
// built once (by deserializing builder.py's wire format, or in tests) and then only read.
// The structural hash is maintained incrementally as nodes are appended: each node's hash
// combines its kind, dtype, shape, operand ids and attributes (float attributes by bit
// pattern), and the graph hash chains the node hashes in order. Two graphs hash equal iff
// (barring collisions) they are node-for-node identical, which is what compile caches key on;
// per-node hashes are kept so hash-consing (CSE) can look nodes up without rehashing.
// Nothing here is verified: call ir::verify() before trusting types or attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/dtype.h"
#include "ir/ops.h"

namespace torch_tpu::ir {

struct Node {
  OpKind kind = OpKind::kParameter;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int32_t> operands;
  std::vector<int64_t> iattrs;
  std::vector<double> fattrs;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  bool operator==(const Node&) const = default;  // note: fattrs compare by value (NaN != NaN)
};

// A pow whose exponent was a Python number (kPowScalarExponent, ops.h).
inline bool pow_has_scalar_exponent(const Node& n) {
  return n.kind == OpKind::kPow && !n.iattrs.empty() && n.iattrs[0] == kPowScalarExponent;
}

// The structural hash of one node (what Graph::add folds into the graph hash).
uint64_t hash_node(const Node& node);

class Graph {
 public:
  // Appends `node` and returns its id. Operands are not checked here (see verify()).
  int32_t add(Node node);

  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  const Node& node(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  uint64_t node_hash(int32_t id) const { return node_hashes_.at(static_cast<size_t>(id)); }
  uint64_t hash() const { return hash_; }

  void reserve(size_t n) {
    nodes_.reserve(n);
    node_hashes_.reserve(n);
  }

 private:
  std::vector<Node> nodes_;
  std::vector<uint64_t> node_hashes_;
  uint64_t hash_ = 0x6a09e667f3bcc908ULL;  // arbitrary non-zero seed: the empty graph's hash
};

}  // namespace torch_tpu::ir

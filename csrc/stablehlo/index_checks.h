// Index checks: PyTorch's out-of-range indices raise on every XLA backend too.
//
// Design: XLA clamps a gather's out-of-range index and drops a scatter's out-of-range update, so
// a bad token id read a neighbouring row and training went on silently. With
// EmitOptions::index_checks the emitter checks, per gather and scatter, the index value against
// [0, size) inside the program (a min and a max reduction: cheap next to the gather itself) and
// returns the first failure as one more result; the PJRT runtime reads it when the program ends
// and raises IndexError naming the op, like the host runtime. A failing program must not write
// anything a later read could take for a good value: its scatters drop every update, and its
// in-place results (arguments donated to them, views scattered into buffers) are selected back
// to their old values, so an in-place target keeps its last good value exactly as when the host
// runtime raises before writing.
//
// Most gathers that lowerings make index with values that are in range by construction (iotas,
// argmax, sort permutations and arithmetic on them): IndexBounds proves those, and they are not
// checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "stablehlo/text.h"

namespace torch_tpu::stablehlo {

// One checked gather or scatter, in program order: what a failure names.
struct IndexCheck {
  std::string op;              // "gather" or "scatter"
  int32_t node = -1;           // its IR node
  int64_t size = 0;            // the size of the indexed dimension
  bool runtime_error = false;  // torch.gather/scatter raise RuntimeError, not IndexError (docs/ir.md)
};

// Bounds [lo, hi] of every element of an integer value, where the graph proves them.
class IndexBounds {
 public:
  explicit IndexBounds(const ir::Graph& graph) : graph_(graph), memo_(static_cast<size_t>(graph.size())) {}
  // Bounds of node `id`'s elements, or nullopt when they depend on data (parameters) or on ops
  // this analysis does not follow.
  std::optional<std::pair<int64_t, int64_t>> of(int32_t id, int depth = 0);
  // True if every element of `id` lies in [0, size).
  bool in_range(int32_t id, int64_t size) {
    auto b = of(id);
    return b && b->first >= 0 && b->second < size;
  }

 private:
  struct Entry {
    bool done = false;
    std::optional<std::pair<int64_t, int64_t>> bounds;
  };
  const ir::Graph& graph_;
  std::vector<Entry> memo_;
};

// One index check: whether some element of `index` (i64) lies outside [0, size) (0-d i1), and the
// index to report (0-d i64: the smallest if negative, else the largest).
std::pair<Val, Val> emit_index_check(Body& b, const Val& index, int64_t size);

// The check result (2-element i64 array [k + 1, index] of the first failing check k, or [0, 0]):
// `failed` and `reported` hold each check's emit_index_check values, in check order.
Val emit_check_result(Body& b, const std::vector<Val>& failed, const std::vector<Val>& reported);

}  // namespace torch_tpu::stablehlo

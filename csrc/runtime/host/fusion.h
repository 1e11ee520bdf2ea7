// Fused elementwise clusters: several same-shape elementwise IR nodes run as one pass over tiles.
//
// Design: a Cluster is a set of >= 2 fusible nodes (is_fusible) that all produce the cluster's
// shape. At run time it walks the output in row-major tiles of at most kMaxTile elements; per
// tile it loads each external operand once into a float tile buffer, evaluates the members in
// node order on tile buffers, and stores only the members that are read outside the cluster or
// requested as outputs. Intermediates never touch full-size memory, so a chain of N ops costs
// one pass over memory instead of N.
//  * Every value lives in the buffers as float32: f32 is exact; bf16 and f16 values are rounded
//    to their dtype after every node that produces them (so results equal ATen's, which also
//    computes these dtypes in float and rounds per op); bool values are 0.0 / 1.0. Integer and
//    f64 values may only be read by a `convert` member, which loads them with static_cast<float>
//    (what ATen's conversion does). Other dtypes are left to the per-node kernels.
//  * Operands: members (tile buffers), constants (splat, built at compile time like the
//    constant kernel), and external values (a parameter, a kernel step's result or another
//    cluster's stored member). A broadcast_in_dim member reads its external operand with stride
//    0 along broadcast dimensions. External operands and destinations may be arbitrarily
//    strided: dims are coalesced at run time; a contiguous run is a converting copy, the rest a
//    strided gather (and scatter for strided destinations).
//  * Members are evaluated by simple loops over float buffers in fixed-width groups of 8, which
//    GCC vectorizes at -O2; the loop function is cloned for AVX2 (chosen at load time by the
//    ifunc resolver). Transcendentals use the 8-wide 1-ulp SLEEF functions that libtorch_cpu
//    exports (looked up with dlsym), else std:: per element; both may differ from ATen's
//    kernels in the last float bit. Arithmetic, compare, select and convert are bit-exact.
//    Tiles are split across ATen's intra-op thread pool like ATen's own elementwise kernels.
// Which nodes form a cluster, and where it runs, is the executor's business (executor.h);
// a Cluster only knows its members and what to store.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::runtime::host {

// Elements per tile (a multiple of 8): with ~10 live buffers a tile set stays in L1/L2.
// Clusters with many buffers use smaller tiles.
inline constexpr int64_t kMaxTile = 1024;
// Members per cluster: bounds the buffer count (a cluster that is full is closed).
inline constexpr size_t kMaxClusterNodes = 64;

// Whether node `id` may be a cluster member: an elementwise op (unary, binary, compare, select,
// convert) or broadcast_in_dim whose dtypes the tile engine computes exactly (see above), with
// operands of the node's own shape. Constants are never members (they are splat operands).
bool is_fusible(const ir::Graph& g, int32_t id);

class Cluster {
 public:
  explicit Cluster(std::vector<int64_t> shape) : shape_(std::move(shape)) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int32_t>& members() const { return members_; }
  // Members whose values leave the cluster, in node order (valid after finalize()).
  const std::vector<int32_t>& stores() const { return store_nodes_; }
  int64_t tile() const { return tile_; }

  // Appends member `id` (node order; is_fusible and of this shape).
  void add(int32_t id) { members_.push_back(id); }
  // Builds the tile program. `stored(id)` says whether member id must be written out.
  template <typename Pred>
  void finalize(const ir::Graph& g, Pred stored) {
    std::vector<bool> s;
    for (int32_t m : members_) s.push_back(stored(m));
    build(g, s);
  }

  // One pass. values[] holds every external operand; outs[j] (may be null) is the destination
  // of stores()[j] (its dtype and shape, any strides, overlapping nothing that is read). Sets
  // values[stores()[j]] to *outs[j] or to a fresh contiguous tensor. Thread-safe.
  void run(std::vector<at::Tensor>& values, const std::vector<at::Tensor*>& outs) const;

  // "shape [..] f32, tile 1024: %3 add, %4 tanh, ...; inputs %0 %1; stores %5".
  std::string describe() const;

  // Tile program (public for the implementation's helpers; not an interface).
  struct Input {
    int32_t node;                // external value read
    int16_t slot;                // tile buffer it is loaded into
    std::vector<int64_t> shape;  // the external node's shape
    std::vector<int64_t> dims;   // broadcast_in_dim: output dim of each operand dim; else empty
    bool broadcast = false;
  };
  struct Instr {
    uint8_t op;            // Op (fusion.cpp)
    uint8_t round;         // rounding after the op: 0 none, 1 bf16, 2 f16
    int16_t dst, a, b, c;  // tile buffer slots (-1: unused)
  };
  struct Store {
    int32_t node;
    int16_t slot;
    at::ScalarType dtype;
  };

 private:
  void build(const ir::Graph& g, const std::vector<bool>& stored);

  std::vector<int64_t> shape_;
  std::vector<int32_t> members_;
  std::vector<int32_t> store_nodes_;
  std::vector<std::string> member_names_;  // "%3 add" for describe()
  at::ScalarType dtype_ = at::kFloat;      // dtype of the last member (describe() only)
  int64_t numel_ = 0;
  int64_t tile_ = 0;
  int16_t num_slots_ = 0;
  std::vector<Input> inputs_;
  std::vector<std::pair<int16_t, float>> splats_;  // slot, value: constants
  std::vector<Instr> program_;
  std::vector<Store> stores_;
};

}  // namespace torch_tpu::runtime::host

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
//    strided gather (and scatter for strided destinations). A contiguous float32 operand is
//    not copied at all: its tiles are read where they lie (input buffers are never written).
//  * Members are evaluated by simple loops over float buffers in fixed-width groups of 8, which
//    GCC vectorizes at -O2; the loop function is cloned for AVX2 (chosen at load time by the
//    ifunc resolver), and where ATen runs its AVX512 kernels an avx512f version takes groups
//    of 16 (same bits: the ops are IEEE-exact). A tile-invariant operand (a constant, a
//    one-element input, arithmetic on those) is read from its buffer's first lanes by every
//    group instead of being streamed (Instr::fixed). Exp, log, sin, cos, tan, tanh, asin,
//    acos, atan and erf call the MKL vector math functions that libtorch_cpu exports (where
//    PyTorch is built with MKL), which are what ATen's own kernels call: same bits. The other
//    transcendentals use the 1-ulp SLEEF functions it exports (16 lanes at a time where ATen
//    runs its AVX512 kernels, else 8: both widths give the same bits), else std:: per element;
//    these may differ from ATen's kernels in the last float bit. Arithmetic, compare, select
//    and convert are bit-exact.
//    Tiles are split across ATen's intra-op thread pool like ATen's own elementwise kernels.
//  * Row clusters (reductions with their prologue and epilogue): a cluster may also hold f32
//    sum/max/min reductions over its shape's trailing dims (a "row" of M elements), the
//    elementwise nodes computed on the reduced values (the lead shape), and broadcasts of those
//    values back over the rows. Tiles then hold whole rows (k * M elements, M <= kMaxRow), and a
//    per-row value (a reduction's result, arithmetic on such results, a per-row input) is held
//    compactly: its buffer holds the tile's k row values, so the per-row arithmetic (layer
//    norm's variance, eps and rsqrt; a loss's log) runs k times, not k * M, and the broadcast
//    back fills each row from it. Softmax, layer/rms norm or a loss's mean run in one pass
//    with the rows in cache. Per-row values read from outside are loaded one per row; stored
//    ones are written once per row. A sum adds each row in row_sums' order (32 lanes, then
//    pairwise), which the reduce kernel also uses for every sum a row cluster could hold, so
//    a sum's bits never depend on cluster boundaries; that order differs from ATen's
//    (vectorized cascade) sum: results agree with it within float32 rounding of the summation,
//    not bit for bit. Max and min are exact.
//  * Total sums: an f32 sum over every dim of a plain cluster's member, longer than a row
//    (kMaxRow), ends the cluster: each tile adds its values into the sum of its block of
//    kSumBlock elements (tiles are powers of two that divide a block), so the member is never
//    stored and the sum does not read it back from memory. total_sum() defines the order
//    (blocks in row_sum_one's order, then the blocks' sums the same way); the reduce kernel
//    uses it too, so fused and strict modes agree bit for bit.
//  * Column sums: an f32 sum keeping a range of dims (column_sums.h: batch norm's sums over N,
//    H and W; a bias gradient's over the batch) of a plain cluster's member ends the cluster
//    like a total sum. When the walk visits the member as [rows, kept] (kept dims trailing in
//    a row-major walk, or channels kept in a channels-last walk) each tile adds its rows into
//    lane accumulators (ColumnLanes) of its block of kColumnBlock rows, and the member is not
//    stored for the sum; any other walk (an NCHW one keeping channels) sums it after the tiles
//    with column_sums(), from its destination if the cluster stores it, else from a scratch
//    tensor. Both add in column_sums' order, as the reduce kernel does.
//  * Layout: a plain cluster (no row reduction, no total sum) of rank 4 or 5 with a full-size
//    operand in channels-last memory (a convolution's result: kernels_contract.cpp) walks its
//    elements in that memory order (N, spatial..., C), and its fresh stores are channels-last
//    too, so a convolution -> batch norm -> ReLU -> convolution chain streams memory in order
//    and the next convolution needs no conversion. Elementwise values do not depend on the
//    walk order; a per-channel operand becomes a broadcast along the leading (walked) dims.
// Which nodes form a cluster, and where it runs, is the executor's business (executor.h);
// a Cluster only knows its members and what to store (and, through add_row_member(), which
// nodes may join it as row members).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/host/column_sums.h"
#include "runtime/host/native_kernels.h"

namespace torch_tpu::runtime::host {

// Elements per tile (a multiple of 8): with ~10 live buffers a tile set stays in L1/L2.
// Clusters with many buffers use smaller tiles.
inline constexpr int64_t kMaxTile = 1024;
// Members per cluster: bounds the buffer count (a cluster that is full is closed; its tiles
// shrink with the buffers it streams). An optimizer's `_foreach_` ops over several parameters
// of one shape interleave their chains in one cluster: 64 members cut TinyGPT's ten [64]
// parameters' AdamW chains into five clusters, each storing the open chains' intermediates
// (108 us per step); one cluster of 420 members takes 29 us.
inline constexpr size_t kMaxClusterNodes = 512;
// Longest row a reduction in a row cluster may reduce (elements): a tile holds whole rows.
inline constexpr int64_t kMaxRow = 8192;
// Elements per block of a total sum (total_sum): a tile of a cluster ending in one divides it.
inline constexpr int64_t kSumBlock = 1024;
static_assert(kSumBlock % kMaxTile == 0, "a total sum's tiles (powers of two up to kMaxTile) divide its blocks");

// Whether clusters compute 16 lanes at a time (the tile loops, SLEEF's 16-wide functions and
// native kernels): where ATen runs its AVX512 kernels, so ATEN_CPU_CAPABILITY=avx2 selects 8
// lanes for all of them, as it does for ATen.
bool avx512_lanes();

// Whether node `id` may be a cluster member: an elementwise op (unary, binary, compare, select,
// convert) or broadcast_in_dim whose dtypes the tile engine computes exactly (see above), with
// operands of the node's own shape. Constants are never members (they are splat operands).
bool is_fusible(const ir::Graph& g, int32_t id);

// For a reduce node a row cluster may hold (f32 sum/max/min over the trailing dims of its
// operand, 1 <= row length <= kMaxRow): the number of leading (kept) dims; else -1.
int row_reduce_lead_rank(const ir::Graph& g, int32_t id);

// out[r] = the sum of x[r * m], ..., x[r * m + m - 1] for r < rows, in the one order every f32
// row sum of the host runtime uses: a row cluster's sum and the reduce kernel of a sum that
// row_reduce_lead_rank admits but that runs outside a cluster. A row's result depends only on
// its m values (not on tiles, threads or which program computes it), so strict mode (one op
// per program) and fused mode (clusters cut wherever the graph says) give the same bits.
void row_sums(const float* x, int64_t rows, int64_t m, float* out);

// The sum of x[0], ..., x[n - 1] in the order every f32 sum over all dims longer than a row
// uses (a cluster's total sum and the reduce kernel's): up to kMaxRow elements as one row
// (row_sum_one), else the sums of blocks of kSumBlock elements, each in row_sum_one's order,
// summed the same way. Blocks may run on any threads: the result does not depend on them.
float total_sum(const float* x, int64_t n);
// Whether node `id` is an f32 sum over every dim of an f32 value longer than kMaxRow.
bool is_total_sum(const ir::Graph& g, int32_t id);

// The clusters' float32 function of unary op `kind` over x[0, n) into d (d may be x). The
// unfused kernel (kernels_elementwise.cpp) runs float32 transcendentals and sqrt through it, so
// a value's bits do not depend on whether its op joined a cluster, or where in a tensor it lies:
// sqrt is correctly rounded here where ATen calls MKL's vsSqrt (not on every CPU); asinh and
// acosh are SLEEF's here, std:: in ATen; tanh is vector_tanh.h's; and ATen's SLEEF kernels
// (sigmoid, expm1, sinh, ...) compute an array's last elements with std:: functions, where a
// cluster's lanes all call SLEEF. All within an ulp of ATen's.
void cluster_unary_f32(ir::OpKind kind, float* d, const float* x, int64_t n);
// The same for binary op `kind` (pow and atan2: SLEEF's in every lane, where ATen's kernels take
// std:: for an array's last elements) over x[0, n) and y[0, n), or, when `y_uniform`, over x and
// the single value y[0] (a broadcast scalar, not materialized): a pow whose exponent was a
// Python number (`scalar_exponent`, ir::kPowScalarExponent) then takes the recipes a cluster
// takes for it (x^2 as x*x, ...; tile_math.cpp, pow_as).
void cluster_binary_f32(ir::OpKind kind, float* d, const float* x, const float* y, int64_t n, bool y_uniform = false,
                        bool scalar_exponent = false);

class Cluster {
 public:
  explicit Cluster(std::vector<int64_t> shape) : shape_(std::move(shape)) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int32_t>& members() const { return members_; }
  // Members whose values leave the cluster, in node order (valid after finalize()).
  const std::vector<int32_t>& stores() const { return store_nodes_; }
  int64_t tile() const { return tile_; }
  // The size a run passes to split_parts (kernel_threads.h): elements x half the instruction
  // count, since each element costs several operations (valid after finalize()).
  int64_t split_work() const { return numel_ * std::max<int64_t>(1, static_cast<int64_t>(program_.size()) / 2); }

  // Leading dims kept by the cluster's reductions (-1: no reduction, a plain cluster).
  int lead_rank() const { return lead_rank_; }

  // Appends member `id` (node order; is_fusible and of this shape).
  void add(int32_t id) { members_.push_back(id); }
  // Appends `id` as a row member if it is one for this cluster (see the header comment): a
  // row reduce of a value of this shape (whose lead rank matches earlier reductions), an
  // is_fusible node of the lead shape reading a reduced member, or a broadcast of a reduced
  // member back to this shape. `member(v)`: whether node v is a member. Node order is kept
  // by the caller (ids increase).
  template <typename Pred>
  bool add_row_member(const ir::Graph& g, int32_t id, Pred member) {
    if (!accepts_row_member(g, id, [&](int32_t v) { return member(v); })) return false;
    if (int r = row_reduce_lead_rank(g, id); r >= 0) lead_rank_ = r;
    members_.push_back(id);
    return true;
  }
  // Starts an empty cluster of the operand's shape with `id`, a row reduce (row_reduce_lead_rank
  // >= 0) of a value computed outside it (a parameter, a kernel's result): softmax's max or
  // layer norm's mean then run in the pass that uses them. False if `id` is not such a reduce.
  bool start_row(const ir::Graph& g, int32_t id) {
    const int r = row_reduce_lead_rank(g, id);
    if (r < 0 || !members_.empty() || g.node(g.node(id).operands[0]).shape != shape_) return false;
    lead_rank_ = r;
    members_.push_back(id);
    return true;
  }
  // Appends `id`, a total sum (is_total_sum) or a column sum (column_sum_kept), if it sums a
  // member of this plain cluster: it must be the last member (the caller closes the cluster).
  // `member(v)`: whether node v is a member.
  template <typename Pred>
  bool add_closing_sum(const ir::Graph& g, int32_t id, Pred member) {
    const int32_t x = g.node(id).operands.at(0);
    if (lead_rank_ >= 0 || total_sum_ >= 0 || column_sum_ >= 0 || members_.size() >= kMaxClusterNodes ||
        g.node(x).shape != shape_ || !member(x)) {
      return false;
    }
    if (is_total_sum(g, id)) {
      total_sum_ = id;
    } else if (auto kept = column_sum_kept(g, id)) {
      column_sum_ = id;
      column_kept_ = *kept;
    } else {
      return false;
    }
    members_.push_back(id);
    return true;
  }
  // Whether `other` (an open plain cluster of this cluster's lead shape, none of its members
  // an output) may be merged into this one as row members: its members then run here.
  bool can_absorb(const Cluster& other) const;
  // Whether a cluster of `shape` may run 0-d values (Python scalars converted for it, say),
  // held broadcast like reduced values: not a 0-d one, and not an empty one (it never runs, so
  // the 0-d values would never be computed).
  static bool can_hold_scalars(const std::vector<int64_t>& shape) {
    return !shape.empty() && c10::multiply_integers(shape) > 0;
  }
  // Whether `other` (an open cluster) holds only 0-d values that may run here instead.
  bool can_absorb_scalars(const Cluster& other) const {
    return other.shape_.empty() && can_hold_scalars(shape_) &&
           members_.size() + other.members_.size() < kMaxClusterNodes;
  }
  void absorb(const Cluster& other) { members_.insert(members_.end(), other.members_.begin(), other.members_.end()); }
  // Inserts other's members before this cluster's last member (the node that reads them).
  void absorb_before_last(const Cluster& other) {
    members_.insert(members_.end() - 1, other.members_.begin(), other.members_.end());
  }
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

  // The body of this cluster's native tile kernel (native_kernels.h) for vectors of `lanes`
  // floats, its name written NATIVE_TILE_FN; "" when no two arithmetic instructions in a row
  // could share registers (nothing to gain). Defined in native_codegen.cpp.
  std::string native_source(int lanes) const;

  // Tile program (public for the implementation's helpers; not an interface).
  struct Input {
    int32_t node;                // external value read
    int16_t slot;                // tile buffer it is loaded into
    std::vector<int64_t> shape;  // the external node's shape
    std::vector<int64_t> dims;   // broadcast_in_dim: output dim of each operand dim; else empty
    bool broadcast = false;
    // One element: the same in every tile (filled once, before the invariant instructions),
    // even where its access is not stride 0 (in a cluster of one element).
    bool one_element = false;
    bool compact = false;  // a per-row value of a row cluster: one element per row in its slot
  };
  struct Instr {
    uint8_t op;            // Op (tile_ops.h)
    uint8_t round;         // rounding after the op: 0 none, 1 bf16, 2 f16
    int16_t dst, a, b, c;  // tile buffer slots (-1: unused)
    // Reads only tile-invariant buffers (constants, one-element inputs, other invariant
    // results): the same for every tile, so it runs once before the tiles, into a slot no
    // other value reuses. A Python scalar's convert and broadcast cost a pass each otherwise.
    bool invariant = false;
    bool pow_scalar = false;  // pow whose exponent is tile-invariant: ATen's recipes (tile_math.cpp, pow_as)
    // Bit k: operand k (a, b, c) of a per-tile instruction is tile-invariant, so it reads the
    // buffer's first lanes for every group (one value in all lanes) instead of streaming it.
    uint8_t fixed = 0;
    bool rows = false;        // row clusters: computes one value per row (a reduction, or arithmetic on them)
    bool expand = false;      // a broadcast of a per-row value back over its row
  };
  struct Store {
    int32_t node;
    int16_t slot;
    at::ScalarType dtype;
    std::vector<int64_t> shape;  // the member's shape (the lead shape for reduced values)
    bool reduced = false;        // written once per row (0-d values: once)
    // Computed by a tile instruction (not loaded, not invariant): a contiguous float32
    // destination can then be that instruction's buffer (see run()).
    bool per_tile = false;
    bool total = false;   // the total sum: written once, after every tile
    bool column = false;  // the column sum: written once, after every tile
  };

 private:
  std::optional<at::MemoryFormat> walk_format(const std::vector<at::Tensor>& values) const;
  template <typename Pred>
  bool accepts_row_member(const ir::Graph& g, int32_t id, Pred member) const;
  void build(const ir::Graph& g, const std::vector<bool>& stored);
  // A value held broadcast in the buffers: a reduced (lead-shape) value, or any 0-d value.
  bool reduced_shape(const std::vector<int64_t>& s) const {
    return s.size() < shape_.size() && (s.empty() || static_cast<int>(s.size()) == lead_rank_);
  }

  std::vector<int64_t> shape_;
  std::vector<int32_t> members_;
  std::vector<int32_t> store_nodes_;
  std::vector<std::string> member_names_;  // "%3 add" for describe()
  at::ScalarType dtype_ = at::kFloat;      // dtype of the last member (describe() only)
  int64_t numel_ = 0;
  int64_t tile_ = 0;
  int64_t row_ = 1;          // elements per row (row clusters; tiles hold whole rows)
  int64_t slot_stride_ = 0;  // floats between tile buffers (tile_ rounded up to 8)
  int lead_rank_ = -1;
  int32_t total_sum_ = -1;   // the total sum member (add_closing_sum), or -1
  int16_t total_slot_ = -1;  // the slot of the value it sums
  int32_t column_sum_ = -1;  // the column sum member (add_closing_sum), or -1
  int16_t column_slot_ = -1;               // the slot of the value it sums
  int32_t column_operand_ = -1;            // the member it sums
  int64_t column_count_ = 0;               // its result's elements (the kept positions)
  bool column_operand_stored_ = false;     // that member is stored too: summed from there
  std::pair<int, int> column_kept_{0, 0};  // its kept dims [k0, k1)
  int16_t num_slots_ = 0;
  std::vector<Input> inputs_;
  std::vector<std::pair<int16_t, float>> splats_;  // slot, value: constants
  std::vector<Instr> program_;
  std::vector<Store> stores_;

  // The native tier (native_kernels.h): runs counted until the cluster is hot, then its kernel.
  // Copying a cluster (while fusion builds it) starts the count afresh.
  struct NativeState {
    std::atomic<int64_t> runs{0};
    std::atomic<NativeKernel*> kernel{nullptr};
    NativeState() = default;
    NativeState(const NativeState&) {}
    NativeState& operator=(const NativeState&) { return *this; }
  };
  mutable NativeState native_;
  // Counts a run; the loaded native kernel, or null (interpret this run).
  NativeTileFn native_fn() const;
};

template <typename Pred>
bool Cluster::accepts_row_member(const ir::Graph& g, int32_t id, Pred member) const {
  const ir::Node& n = g.node(id);
  if (n.operands.empty()) return false;
  if (int r = row_reduce_lead_rank(g, id); r >= 0) {
    return g.node(n.operands[0]).shape == shape_ && (lead_rank_ < 0 || lead_rank_ == r) && member(n.operands[0]);
  }
  if (n.kind == ir::OpKind::kBroadcastInDim) {
    // Back over the rows (a 0-d member: over everything): the value's dims stay where they were.
    const int32_t o = n.operands[0];
    const auto& os = g.node(o).shape;
    if (n.shape != shape_ || !member(o) || !reduced_shape(os)) return false;
    for (size_t k = 0; k < os.size(); ++k) {
      if (n.iattrs.at(k) != static_cast<int64_t>(k)) return false;
    }
    return true;
  }
  // Arithmetic on reduced values (or on 0-d members, in any cluster).
  const bool on_rows = lead_rank_ >= 0 && static_cast<int>(n.shape.size()) == lead_rank_;
  if (!(on_rows || n.shape.empty()) || !reduced_shape(n.shape) || !is_fusible(g, id)) return false;
  for (size_t k = 0; k < n.shape.size(); ++k) {
    if (n.shape[k] != shape_[k]) return false;
  }
  return std::any_of(n.operands.begin(), n.operands.end(), [&](int32_t o) { return member(o); });
}

}  // namespace torch_tpu::runtime::host

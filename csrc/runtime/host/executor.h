// The host runtime: executes IR graphs on host memory with ATen CPU kernels.
//
// Design: compile() walks the graph once and produces an immutable HostExecutable:
//  * only nodes that some requested output depends on are kept (dead code is skipped);
//  * each kept non-parameter node becomes a Kernel closure (kernels.h) with its attributes
//    pre-decoded and constants pre-built;
//  * each value's last reading step is precomputed, so run() drops intermediates as soon as
//    no later step reads them and peak memory stays near the live set, not the whole graph;
//  * same-shape chains of elementwise nodes become fused clusters (tile_cluster.h): one step that
//    makes a single pass over tiles. Live nodes are walked in order with one open cluster per
//    shape; a fusible node joins the open cluster of its shape (opening one if needed). A
//    cluster runs at the position where it is closed, and is closed
//      - before any step (kernel or another cluster) that reads one of its values, since
//        that value must then exist in full-size memory;
//      - before any kernel step that is itself an output, and when an output node joins
//        another cluster: every read and write recorded before an output then happens before
//        it, so writes into output memory keep their program order relative to earlier reads
//        and writes (fused graphs compose many ops whose stores overwrite earlier loads).
//        When the caller says which parameters and outputs may share memory
//        (MemoryClasses, runtime.h: fused and compiled graphs do), only the clusters that read
//        a parameter or output value of the output's class (directly, or through a view
//        kernel's value: reshape, transpose, ...), or hold an output of it, are closed: an
//        optimizer's per-parameter chains then stay open across the other parameters' writes
//        and each runs as one cluster instead of one per `_foreach_*` op;
//      - when it is full (kMaxClusterNodes members), and at the end of the graph.
//    Before a kernel step closes a plain cluster it reads, the next few fusible nodes of the
//    cluster's shape whose operands are all computed by then (and that are no outputs) join
//    the cluster first (a kernel reducing the cluster's value, then a product of the cluster's
//    values, which otherwise started a cluster after the kernel).
//    A 0-d elementwise chain whose only readers are broadcasts into clusters (an optimizer's
//    bias corrections and step sizes, per parameter; a learning rate's conversion) is a
//    *recomputed scalar*: it joins every cluster that broadcasts it, ahead of the broadcast, as
//    tile-invariant instructions (computed once per run of that cluster), and is never a step
//    or a stored value. Computed once instead, one 0-d cluster held every parameter's scalars
//    of a `_foreach_` optimizer, was absorbed by the first cluster that read one and stored all
//    of them for the others (an allocation each), and its size closed that cluster mid-chain.
//    Chains are bounded (kMaxRecomputedScalars in step_partition.cpp); an output, or a value a kernel
//    reads, is computed once as before.
//    A closed cluster of one node is an ordinary kernel step. Members store only values read
//    by a later step or requested as outputs. Consequence for callers: a tensor input is read
//    whenever its reading step runs, which may be after an output that precedes it in node
//    order; an input that an earlier-placed output overwrites while a later node still reads
//    it must be bound with `snapshot` (copied at bind time). Fusion is off with
//    TORCH_TPU_HOST_FUSION=0 (HostOptions::fuse).
//  * kernel steps that read no parameter (constants, iotas, a causal mask built from them) are
//    folded: computed once at compile time and bound at each run like parameters (results
//    up to kMaxFoldedBytes; a larger one stays a step rather than hold memory for good).
// Failure containment: a step that throws (an out-of-range gather index, out of memory) does
// not stop the run. Its nodes, and every node computed from them, are tainted; the steps that
// read no tainted value still run, so independent work and its outputs complete, and steps
// that would read a tainted value write nothing (their destinations keep their old contents).
// Lost input bindings (Binding::lost) taint their parameters the same way. The first error is
// rethrown at the end, and last_run_fates() says per output whether it was written, untouched
// or lost (the failed step's own outputs, possibly half written). In a fused cluster that reads
// a tainted value, taint follows the members' operands: the cluster runs with zeros in place of
// the tainted inputs and stores only its untainted members (an optimizer's update of one
// parameter, fused with another's that lost its gradient, is still written).
// run() wraps tensor bindings with at::from_blob (no copies; `snapshot` bindings are cloned),
// then evaluates the steps in order. An output whose destination has the node's dtype and
// shape and overlaps neither an input binding the program reads (an op's unread `out=`
// argument does not count) nor another destination is computed directly
// into the destination (ATen `_out` variants, or a cluster's stores); any other output is
// computed and then copied (copy_ converts the dtype). An output that is a reshape / transpose
// chain of a value some step computes (compiled graphs return reshaped activations and
// transposed weight gradients) lends that step its destination, viewed back to the step's
// shape (ViewRoute), so the step computes straight into it and the view needs no copy.
// One more overlap is allowed: a scatter whose operand is the destination itself
// (`cache.index_put_(...)`, `index_copy_`), when only the scatter reads that parameter; the
// scatter then writes just the indexed elements in place (plan_in_place_scatters).
// ATen is called with autograd and Python dispatch keys excluded, so user dispatch modes and
// autograd never see the runtime's internal CPU ops.
// Shared runs: a program of kMinSharedSteps or more steps is offered to threads blocked
// waiting for the stream (kernel_threads.h, "Waiting threads"). The worker and a waiting
// thread then each claim the earliest ready step (its operands' steps finished), within a
// lookahead window; values are released by reader counts. A step writing an output that
// overlaps memory other steps read or write (computed aside, see above) waits for all earlier
// steps, so reads and writes of bindings keep program order; later readers of such memory are
// snapshots by the contract above. With nobody waiting the worker runs the steps in order, as
// before.
// Where the code is: the constructor (host_plan.cpp) reads as the list of planning passes it
// runs: the target-independent ones from compiler/passes/ (view-chain collapse, liveness,
// constant values), the host's own rewrites (kernels.h, concat_reshapes.h), the partition into
// kernel steps and clusters (step_partition.cpp), constant folding and the run-time tables.
// Running is executor.cpp; shared runs are shared_run.cpp.
#pragma once

#include <c10/util/ArrayRef.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/passes/liveness.h"
#include "runtime/host/concat_reshapes.h"
#include "runtime/host/tile_cluster.h"
#include "runtime/host/kernels.h"
#include "runtime/runtime.h"

namespace torch_tpu::runtime::host {

struct HostOptions {
  bool fuse = true;  // build fused elementwise clusters
  // Which parameters and outputs may share memory (runtime.h); null: any may. Read only by the
  // constructor: an output then closes only the open clusters that touch its memory.
  const MemoryClasses* memory = nullptr;
  // Verify the graph after each IR pass (compiler/passes/verify_pass.h).
  bool verify = false;
  // The default: fuse unless TORCH_TPU_HOST_FUSION=0, verify under TORCH_TPU_VERIFY=1 (read at
  // every call).
  static HostOptions from_env();
};

class HostExecutable final : public Executable {
 public:
  HostExecutable(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                 HostOptions options = HostOptions::from_env());
  void run(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs,
           RngState rng) const override;
  // Each lent memory is released when the last value viewing it is (a parameter's after its
  // last reading step, a destination's once written and no longer read).
  void run_and_release(std::vector<Binding>& inputs, std::vector<OutputTarget>& outputs, RngState rng) const override;
  std::string describe() const override;
  ExecutableStats stats() const override;
  bool reports_fates() const override { return true; }

 private:
  struct Param {
    int32_t node;
    int64_t binding;  // >= 0: inputs[binding]; kRngSeedBinding / kRngOffsetBinding
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  // Failure containment of a cluster step that reads a tainted value (see the header comment):
  // which members depend on which nodes, and the values it reads from outside.
  struct ClusterDeps {
    std::vector<std::pair<int32_t, std::vector<int32_t>>> member_operands;  // in member order
    struct Input {
      int32_t node;
      std::vector<int64_t> shape;
      at::ScalarType dtype;
    };
    std::vector<Input> inputs;
  };
  struct Step {
    int32_t node;                            // kernel steps: the node computed
    Kernel kernel;                           // empty for cluster steps
    std::shared_ptr<const Cluster> cluster;  // cluster steps
    std::vector<int32_t> release;            // values whose last use is this step
    std::shared_ptr<const ClusterDeps> deps;  // cluster steps
  };

  // How an output that views a step's value reaches it: the output's destination, undone
  // view by view (reshape back to the operand's shape, or the inverse permutation), is the
  // step's value in the same memory. Used for a run only when the destination is written
  // directly, overlaps no input, and the source has no destination of its own.
  struct ViewRoute {
    int32_t source = -1;  // the node whose step computes the viewed value
    struct Undo {
      bool reshape;               // false: permute
      std::vector<int64_t> dims;  // the shape to view as, or the permutation
    };
    std::vector<Undo> undo;  // from the output back to the source
    // The destination seen as the source's value, or an undefined tensor where a reshape
    // cannot view it (the chain's layouts do not compose to the source's).
    at::Tensor source_view(const at::Tensor& dest) const;
  };

  // What the host's graph rewrites (kernels.h, concat_reshapes.h) tell the kernels of the nodes
  // they rewrote.
  struct KernelForms {
    ConcatOperandShapes concat_shapes;       // absorb_concat_reshapes
    std::unordered_set<int32_t> unflipped;   // absorb_weight_flips
    ProductForms products;                   // absorb_bias_adds, product_layouts
  };
  // The partition of the live nodes into kernel steps and clusters (step_partition.cpp), as the
  // later planning passes read it.
  struct Partition {
    std::vector<int32_t> step_of;                    // per node: its step (-1: none)
    std::vector<int32_t> cluster_of;                 // per node: index into clusters (-1: none)
    std::vector<std::shared_ptr<Cluster>> clusters;  // every cluster opened, closed or absorbed
    std::vector<bool> recomputed;                    // per node: a recomputed scalar (see above)
  };

  struct RunState;
  class SharedRun;
  // Programs shorter than this always run their steps in order on the calling thread.
  static constexpr int32_t kMinSharedSteps = 8;

  // The largest constant-folded value (fold_constants).
  static constexpr size_t kMaxFoldedBytes = size_t{64} << 10;

  // Planning, in the order the constructor runs them (host_plan.cpp unless noted).
  // The host's graph rewrites, after the target-independent view-chain collapse; node ids kept.
  // `verify`: the collapse's output is verified (HostOptions::verify).
  ir::Graph rewrite(const ir::Graph& input_graph, KernelForms& forms, bool verify) const;
  // Fills steps_ (kernels and clusters), params_, reads_binding_, node_dtype_ and node_names_
  // (step_partition.cpp).
  Partition partition(const ir::Graph& graph, const compiler::passes::Liveness& liveness, const KernelForms& forms,
                      const HostOptions& options);
  // Runs the steps that depend on no parameter once, moving their results into folded_;
  // step_of (per node: its step) is renumbered to the steps left.
  void fold_constants(const ir::Graph& graph, std::vector<int32_t>& step_of);
  // view_route_of_ and view_routes_ (ViewRoute).
  void plan_view_routes(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                        const std::vector<int32_t>& step_of);
  // store_cluster_ and reader_cluster_ (inplace_ok).
  void plan_in_place(const ir::Graph& graph, const compiler::passes::Liveness& liveness, const Partition& part);
  // scatter_binding_ (scatter_in_place_ok).
  void plan_in_place_scatters(const ir::Graph& graph, const compiler::passes::Liveness& liveness,
                              const std::vector<int32_t>& outputs, const Partition& part);
  // Each step's releases, and the shared runs' tables (deps_, reads_, orphans_, ...).
  void schedule(const ir::Graph& graph, const compiler::passes::Liveness& liveness, const Partition& part);

  // Runs the steps with a thread waiting for the stream (SharedRun, shared_run.cpp); steps in
  // `barriers` wait for every earlier step.
  void run_shared(RunState& st, c10::ArrayRef<int32_t> barriers) const;
  // run() and run_and_release(): lent_* are the same vectors as inputs/outputs when their owners
  // are taken over (null for run()).
  void run_impl(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs, RngState rng,
                std::vector<Binding>* lent_inputs, std::vector<OutputTarget>* lent_outputs) const;
  // owned: a Tensor binding with an owner is wrapped holding a reference to it.
  at::Tensor bind_param(const Param& p, const std::vector<Binding>& inputs, RngState rng, bool owned) const;
  // Runs one step and writes its outputs; records the node in last_failed_node if it throws.
  void run_step(RunState& st, const Step& s) const;
  // Failure containment (runtime.h, OutputFate), once st.tainted is allocated: runs step i
  // unless it reads a tainted value (then its nodes are tainted and nothing is written); a step
  // that throws goes to fail_step (under error_mu, when several threads run steps). Never throws.
  void run_contained(RunState& st, int32_t i, std::mutex* error_mu = nullptr) const;
  // In a catch block for step i: keeps the first error in `st` and taints the step's nodes.
  void fail_step(RunState& st, int32_t i) const;
  void taint_step(RunState& st, int32_t i) const;
  // A cluster step some of whose inputs are tainted: taints the members that depend on them and
  // runs the others, with zeros in place of the tainted inputs, writing only untainted stores.
  void run_cluster_contained(RunState& st, int32_t i) const;
  // After a run that failed or had lost inputs: each output's fate, into last_run_fates().
  void report_fates(const RunState& st, const std::vector<OutputTarget>& outputs) const;
  // Whether output `o` may be written directly although it overlaps input binding `in`.
  bool inplace_ok(const OutputTarget& o, const Binding& in, int64_t binding) const;
  // Whether output `o` may be written directly although it overlaps input binding `in`: the
  // binding is the operand of the scatter that computes `o`, and is `o`'s destination exactly.
  bool scatter_in_place_ok(const OutputTarget& o, const Binding& in, int64_t binding) const;

  int32_t num_nodes_ = 0;
  std::vector<at::ScalarType> node_dtype_;          // per node id
  std::vector<std::vector<int64_t>> output_shape_;  // per node id (outputs only)
  std::vector<bool> is_output_;                     // per node id: may be requested by run()
  std::vector<Param> params_;
  std::vector<std::pair<int32_t, at::Tensor>> folded_;  // (node, value) bound at the start of a run
  std::vector<bool> reads_binding_;  // per binding index: some live parameter reads it
  std::vector<Step> steps_;
  // In-place writes (inplace_ok): per node, the plain cluster that stores it; per binding, the
  // plain cluster whose elementwise members are the only readers of it (-1: none).
  std::vector<int32_t> store_cluster_;
  std::vector<int32_t> reader_cluster_;
  // In-place scatters (scatter_in_place_ok): per output node, the binding whose parameter only
  // the scatter computing the output reads, as its operand (-1: none).
  std::vector<int64_t> scatter_binding_;
  std::vector<std::string> node_names_;  // per live node: "%3 add" (describe())
  // Shared runs (SharedRun), as ranges per step i: [x_begin_[i], x_begin_[i + 1]) of x_.
  std::vector<int32_t> dep_begin_, deps_;        // the earlier steps whose values step i reads
  std::vector<int32_t> read_begin_, reads_;      // the values step i reads from other steps or parameters
  std::vector<int32_t> orphan_begin_, orphans_;  // values step i defines that no other step reads
  std::vector<int32_t> value_readers_;           // per node: how many steps read its value
  std::vector<int32_t> step_of_node_;            // per node: the step computing it (-1: a parameter or folded)
  std::vector<uint8_t> helper_may_run_;          // per step: small enough for the waiting thread
  std::vector<int32_t> view_route_of_;           // per node: index into view_routes_ (-1: none)
  std::vector<ViewRoute> view_routes_;
};

class HostRuntime final : public Runtime {
 public:
  const char* name() const override { return "host"; }
  std::unique_ptr<Executable> compile(const ir::Graph& graph,
                                      const std::vector<int32_t>& outputs) override;
  std::unique_ptr<Executable> compile_with_memory(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                                  const MemoryClasses& memory) override;
};

}  // namespace torch_tpu::runtime::host

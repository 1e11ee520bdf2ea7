// IR -> StableHLO: the text a PJRT plugin (or JAX's CPU backend, the test oracle) compiles.
//
// Design: the IR is StableHLO-shaped, so translation is node by node with no analysis: each live
// node becomes one or a few StableHLO (or CHLO) operations in the body of `func.func @main`.
// The output is MLIR text in the *generic* operation syntax ("stablehlo.add"(%a, %b) : (...) ->
// ...), which every StableHLO version's parser accepts and which needs no per-op printer.
//
// Function signature:
//   * arguments: one per distinct parameter binding >= 0, in increasing binding order (the k-th
//     argument is the k-th smallest binding; lowerings number bindings 0..n-1, so normally
//     argument k is binding k). Scalar bindings are 0-d tensors of the parameter's dtype. If the
//     graph uses random numbers, two 0-d i64 arguments follow: the RNG seed (binding -1) and the
//     RNG offset (binding -2), always both and in that order.
//   * results: the values `outputs` names, in that order (repeats allowed).
//
// Semantics are docs/ir.md's exactly; docs/stablehlo.md lists how each op maps and where the
// translation is more than a rename (convert, trunc, argmax, sort, gather/scatter, scan, rng,
// half-precision accumulation). Values with zero elements are emitted as empty constants, so no
// StableHLO op ever sees a degenerate window or an empty Philox stream. Where an op/dtype pair
// has no faithful translation, emission throws c10::NotImplementedError naming both: nothing is
// emitted that would compute something else.
//
// Elementwise ops that StableHLO lacks but CHLO has (asin, sinh, erf, erf_inv, lgamma, digamma,
// ...) are emitted as chlo ops: JAX emits the same ops, and XLA-based PJRT plugins legalize them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "stablehlo/index_checks.h"

namespace torch_tpu::stablehlo {

struct EmitOptions {
  std::string module_name = "torch_tpu";  // the MLIR module's symbol (@name); [A-Za-z0-9_] only
  bool verify = true;                     // run ir::verify() first (throws ir::VerifyError)
  // Only parameters some output depends on become arguments (and the RNG pair only if a live
  // node reads it). Runtimes set it: a parameter nothing reads (an out= target) may be bound to
  // memory whose shape no longer matches (it was resized), and need not be transferred.
  bool live_arguments_only = false;
  // Tensor arguments (bindings >= 0) and results of any rank are passed as 1-D arrays of their
  // elements and reshaped inside the function (free in XLA). The PJRT runtime sets it: a device
  // buffer then stands for a run of bytes, whatever view of them the next program reads.
  bool flat_tensors = false;
  // Per argument (in @main's order; shorter means -1 for the rest): the result it may share its
  // buffer with (`tf.aliasing_output`), or -1. A donated argument then becomes that result with
  // no copy (in-place writes). Types must match (with flat_tensors: dtype and element count).
  std::vector<int32_t> argument_aliases;
  // Per argument (needs flat_tensors; shorter means row-major for the rest): the order of its
  // dims in memory, outermost first, or empty for row-major. The flat argument is reshaped to
  // that order and transposed back, so a dense permuted view (x.t()) is read where it lies.
  std::vector<std::vector<int64_t>> argument_layouts;
  // Per argument (needs flat_tensors; shorter or empty `strides` means none): the argument is a
  // flat array of `elements` from which the parameter's value is gathered as the view with
  // `strides` (in elements) starting at an element offset that is passed at run time: one more
  // 0-d i64 argument per view, after all the others (RNG included), in argument order. A slice
  // of a resident buffer is read where it lies, and one executable serves every offset (rows of
  // a tensor in a loop). Takes precedence over argument_layouts.
  struct StridedView {
    int64_t elements = 0;
    std::vector<int64_t> strides;
    auto operator<=>(const StridedView&) const = default;
  };
  std::vector<StridedView> argument_views;
  // Per result (needs flat_tensors; shorter or empty `strides` means none): the result is written
  // into a view with gaps of a flat array of `elements` (t[:, ::2] = ..., cache[:, pos] = k): two
  // more arguments, after the argument_views offsets and in result order, carry that array and
  // the view's element offset, and the result is the whole array with the view's elements
  // replaced (one scatter). `alias`: the array argument aliases the result (it is donated).
  struct ResultView {
    int64_t elements = 0;
    std::vector<int64_t> strides;
    bool alias = false;
    auto operator<=>(const ResultView&) const = default;
  };
  std::vector<ResultView> result_views;
  // Per result (needs flat_tensors; shorter means row-major): the order of its dims in the
  // memory it is written to, outermost first, or empty. The value is transposed to that order
  // before it is flattened, so a dense permuted destination receives its bytes as they lie.
  std::vector<std::vector<int64_t>> result_layouts;
  // Gathers and scatters whose index is not provably in range check it (index_checks.h): one
  // more result after `outputs`, a 2-element i64 array [k + 1, index] naming the first failing
  // check k of Module::index_checks ([0, 0]: none failed). A failing program drops every
  // scatter update and returns each result an argument aliases (and each result view's array)
  // as it was, so in-place targets keep their values. No extra result when nothing is checked.
  bool index_checks = false;
};

// One argument of the emitted function: the binding it reads (>= 0, or ir::kRngSeedBinding /
// ir::kRngOffsetBinding) and its type, which is the parameter node's.
// The binding an argument_views offset argument reports in Module::arguments: this minus the
// index of the argument it belongs to.
constexpr int64_t kViewOffsetBinding = -1000;
// The binding both result_views arguments (array, offset) of result r report: this minus r.
constexpr int64_t kResultViewBinding = -2000;

struct Argument {
  int64_t binding = 0;
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;
};

struct Module {
  std::string text;                 // MLIR text
  std::vector<Argument> arguments;  // @main's arguments, in order
  std::vector<IndexCheck> index_checks;  // non-empty: the check result follows the outputs
};

// The module computing `outputs` of `graph`, with its argument list. Throws
// c10::NotImplementedError for an op or dtype without a faithful translation, c10::ValueError for
// bad outputs or parameters.
Module emit_module(const ir::Graph& graph, const std::vector<int32_t>& outputs, const EmitOptions& options = {});

// emit_module(...).text.
std::string emit_stablehlo(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                           const EmitOptions& options = {});

}  // namespace torch_tpu::stablehlo

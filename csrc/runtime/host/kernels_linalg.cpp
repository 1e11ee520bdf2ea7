// Host kernels for the linear-algebra ops (cholesky, triangular_solve): LAPACK through ATen's
// CPU kernels on the operands' host memory, with the IR's definitions of what StableHLO leaves
// open (docs/ir.md): only the named triangle is read, the other triangle of a factor is zero,
// and a matrix that is not positive-definite gets NaN from its first failing column on.
#include <limits>

#include "runtime/host/kernels.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

// LAPACK's potrf and trsm reference only the named triangle (and trsm not the diagonal when it
// is unit), so the operands go in as they are (tests/ir/test_host_vs_reference.py fills the
// other triangle with garbage).
at::Tensor cholesky_factor(const at::Tensor& a, bool lower) {
  auto [factor, info] = at::linalg_cholesky_ex(a, /*upper=*/!lower, /*check_errors=*/false);
  if (!info.ne(0).any().item<bool>()) return factor;
  // info = k > 0: the leading minor of order k is not positive-definite; columns (rows of an
  // upper factor) k - 1 onward are NaN.
  const at::Tensor from = (info - 1).unsqueeze(-1);
  const at::Tensor bad = info.gt(0).unsqueeze(-1).logical_and(at::arange(a.size(-1), info.options()).ge(from));
  return factor.masked_fill(lower ? bad.unsqueeze(-2) : bad.unsqueeze(-1), std::numeric_limits<double>::quiet_NaN());
}

at::Tensor solve_triangular(const at::Tensor& a, const at::Tensor& b, bool left, bool lower, bool unit,
                            bool transpose) {
  return at::linalg_solve_triangular(transpose ? a.mT() : a, b, /*upper=*/transpose == lower, left, unit);
}

}  // namespace

Kernel make_linalg_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  switch (n.kind) {
    case OpKind::kCholesky: {
      const int32_t a = n.operands.at(0);
      const bool lower = n.iattrs.at(0) != 0;
      return [a, lower](const Values& v, at::Tensor*) { return cholesky_factor(v[a], lower); };
    }
    case OpKind::kTriangularSolve: {
      const int32_t a = n.operands.at(0), b = n.operands.at(1);
      const bool left = n.iattrs.at(0) != 0, lower = n.iattrs.at(1) != 0, unit = n.iattrs.at(2) != 0,
                 transpose = n.iattrs.at(3) != 0;
      return [=](const Values& v, at::Tensor*) { return solve_triangular(v[a], v[b], left, lower, unit, transpose); };
    }
    default:
      return {};
  }
}

}  // namespace torch_tpu::runtime::host

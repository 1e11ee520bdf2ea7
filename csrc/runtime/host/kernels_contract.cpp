// Contractions: dot_general as one batched matmul after permute+reshape (the reference's
// recipe), convolution through at::convolution after materializing lhs dilation and
// asymmetric/negative padding, which ATen's convolution cannot express.
#include <algorithm>

#include "common/check.h"
#include "runtime/host/kernels.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

Kernel dot_general_kernel(const ir::Graph& g, const ir::Node& n) {
  const int32_t l = n.operands[0], r = n.operands[1];
  const ir::Node &ln = g.node(l), &rn = g.node(r);
  const auto& a = n.iattrs;
  size_t nb = a[0], nc = a[1 + 2 * nb];
  std::vector<int64_t> lb = attr_slice(n, 1, nb), rb = attr_slice(n, 1 + nb, nb),
                       lc = attr_slice(n, 2 + 2 * nb, nc), rc = attr_slice(n, 2 + 2 * nb + nc, nc);
  auto free_dims = [](const ir::Node& x, const std::vector<int64_t>& b,
                      const std::vector<int64_t>& c) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (std::find(b.begin(), b.end(), d) == b.end() &&
          std::find(c.begin(), c.end(), d) == c.end()) {
        f.push_back(d);
      }
    }
    return f;
  };
  std::vector<int64_t> lf = free_dims(ln, lb, lc), rf = free_dims(rn, rb, rc);
  auto prod = [](const ir::Node& x, const std::vector<int64_t>& dims) {
    int64_t p = 1;
    for (int64_t d : dims) p *= x.shape[d];
    return p;
  };
  const int64_t B = prod(ln, lb), M = prod(ln, lf), K = prod(ln, lc), N = prod(rn, rf);
  // lhs -> [batch, free, contract], rhs -> [batch, contract, free].
  std::vector<int64_t> lperm = lb, rperm = rb;
  lperm.insert(lperm.end(), lf.begin(), lf.end());
  lperm.insert(lperm.end(), lc.begin(), lc.end());
  rperm.insert(rperm.end(), rc.begin(), rc.end());
  rperm.insert(rperm.end(), rf.begin(), rf.end());
  const std::vector<int64_t> shape = n.shape;
  const at::ScalarType dtype = to_aten(n.dtype);
  const bool integer = !ir::is_float(n.dtype);
  return [=](const Values& v, at::Tensor* out) {
    at::Tensor lhs = v[l].permute(lperm).reshape({B, M, K});
    at::Tensor rhs = v[r].permute(rperm).reshape({B, K, N});
    if (integer) {
      // Exact: int64 products and sums wrap mod 2^64, so narrowing afterwards equals
      // arithmetic in the narrow type.
      return at::bmm(lhs.to(at::kLong), rhs.to(at::kLong)).to(dtype).reshape(shape);
    }
    if (B == 1) {
      // Plain matrix product: mm (strided operands go straight to BLAS) beats a batch of one.
      at::Tensor a2 = lhs.view({M, K}), b2 = rhs.view({K, N});
      if (out && out->is_contiguous()) {
        at::Tensor out2 = out->view({M, N});
        at::mm_out(out2, a2, b2);
        return *out;
      }
      return at::mm(a2, b2).reshape(shape);
    }
    if (out && out->is_contiguous()) {
      at::Tensor out3 = out->view({B, M, N});  // shares out's storage
      at::bmm_out(out3, lhs, rhs);
      return *out;
    }
    return at::bmm(lhs, rhs).reshape(shape);
  };
}

Kernel convolution_kernel(const ir::Graph& g, const ir::Node& n) {
  const int32_t l = n.operands[0], r = n.operands[1];
  const ir::Node& ln = g.node(l);
  const size_t k = n.iattrs.at(0);
  std::vector<int64_t> strides = attr_slice(n, 1, k), lo = attr_slice(n, 1 + k, k),
                       hi = attr_slice(n, 1 + 2 * k, k), ldil = attr_slice(n, 1 + 3 * k, k),
                       rdil = attr_slice(n, 1 + 4 * k, k);
  const int64_t groups = n.iattrs.back();
  // lhs dilation: a zero tensor of the dilated size, with the input at stride ldil.
  bool dilate = false;
  std::vector<int64_t> dilated = ln.shape;
  for (size_t d = 0; d < k; ++d) {
    int64_t s = ln.shape[2 + d];
    if (ldil[d] > 1 && s > 1) {
      dilate = true;
      dilated[2 + d] = s + (s - 1) * (ldil[d] - 1);
    }
  }
  // Symmetric non-negative padding goes to ATen; anything else is applied explicitly.
  bool symmetric = lo == hi;
  for (int64_t p : lo) symmetric &= p >= 0;
  std::vector<int64_t> pads, conv_pad(k, 0);
  bool explicit_pad = false;
  if (symmetric) {
    conv_pad = lo;
  } else {
    for (size_t d = k; d-- > 0;) {
      pads.push_back(lo[d]);
      pads.push_back(hi[d]);
    }
    explicit_pad = true;
  }
  const std::vector<int64_t> out_pad(k, 0);
  const at::ScalarType dtype = to_aten(n.dtype);
  const bool upcast = dtype == at::kHalf || dtype == at::kBFloat16;  // as the reference does
  return [=](const Values& v, at::Tensor*) {
    at::Tensor t = v[l], w = v[r];
    if (dilate) {
      at::Tensor z = at::zeros(dilated, t.options());
      at::Tensor view = z;
      for (size_t d = 0; d < k; ++d) {
        if (dilated[2 + d] != t.size(2 + d)) view = view.slice(2 + d, 0, c10::nullopt, ldil[d]);
      }
      view.copy_(t);
      t = z;
    }
    if (explicit_pad) t = at::constant_pad_nd(t, pads, 0);
    if (upcast) {
      t = t.to(at::kFloat);
      w = w.to(at::kFloat);
    }
    at::Tensor y = at::convolution(t, w, std::nullopt, strides, conv_pad, rdil,
                                   /*transposed=*/false, out_pad, groups);
    return upcast ? y.to(dtype) : y;
  };
}

}  // namespace

Kernel make_contract_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind == OpKind::kDotGeneral) return dot_general_kernel(g, n);
  if (n.kind == OpKind::kConvolution) return convolution_kernel(g, n);
  return {};
}

}  // namespace torch_tpu::runtime::host

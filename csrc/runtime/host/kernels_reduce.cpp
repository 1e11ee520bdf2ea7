// Reductions (reduce, reduce_window, scan) and sort, mapped onto ATen's CPU reductions with the
// exact calls builder.py's reference makes (sum with dtype=input dtype, prod dim by dim, ...),
// except float32 sums over trailing dims that a row cluster could hold, over every dim, and
// over the dims around a kept range (column_sums.h): those add in the clusters' order
// (tile_cluster.h, row_sums, total_sum and column_sums), so a sum gives the same bits fused or not.
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "common/check.h"
#include "runtime/host/column_sums.h"
#include "runtime/host/tile_cluster.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"
#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

// Identity of a reduction kind in dtype (what empty reductions and window padding hold).
at::Scalar identity(ir::ReduceKind kind, at::ScalarType dtype) {
  switch (kind) {
    case ir::ReduceKind::kSum:
    case ir::ReduceKind::kOr:
      return dtype == at::kBool ? at::Scalar(false) : at::Scalar(int64_t{0});
    case ir::ReduceKind::kProd:
    case ir::ReduceKind::kAnd:
      return dtype == at::kBool ? at::Scalar(true) : at::Scalar(int64_t{1});
    default:
      break;
  }
  bool is_max = kind == ir::ReduceKind::kMax;
  if (at::isFloatingType(dtype)) {
    return is_max ? -std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::infinity();
  }
  if (dtype == at::kBool) return at::Scalar(!is_max);
  at::Scalar result;
  AT_DISPATCH_INTEGRAL_TYPES(dtype, "identity", [&] {
    result = at::Scalar(static_cast<int64_t>(is_max ? std::numeric_limits<scalar_t>::lowest()
                                                    : std::numeric_limits<scalar_t>::max()));
  });
  return result;
}

// A float32 sum kernel outside a cluster (the sums whose order tile_cluster.h fixes): `sum(x, out)`
// writes the result of the operand `x` (at its full shape: a 0-d constant is read expanded)
// into contiguous float memory, the destination itself when it is contiguous.
template <typename Sum>
Kernel fixed_order_sum_kernel(const ir::Node& n, const ir::Node& xn, int32_t x, Sum sum) {
  return [x, shape = n.shape, in_shape = xn.shape, sum](const Values& v, at::Tensor* out) {
    at::Tensor t = v[x];
    if (!t.sizes().equals(in_shape)) t = t.expand(in_shape);
    const bool direct = out != nullptr && out->is_contiguous();
    at::Tensor r = direct ? *out : at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    sum(t, r.data_ptr<float>());
    if (out != nullptr && !direct) return out->copy_(r);
    return r;
  };
}

// total_sum over a strided t of m elements: its blocks of kSumBlock elements read through
// read_logical, each summed as total_sum sums it, so the bits are those of total_sum over t
// made contiguous.
float strided_total_sum(const at::Tensor& t, int64_t m) {
  const int64_t blocks = (m + kSumBlock - 1) / kSumBlock;
  std::vector<float> sums(static_cast<size_t>(blocks));
  parallel_units(m, blocks, kSumBlock, [&](int64_t b0, int64_t b1) {
    std::vector<float> buf(static_cast<size_t>(kSumBlock));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t len = std::min(kSumBlock, m - b * kSumBlock);
      read_logical(t, b * kSumBlock, len, buf.data());
      row_sums(buf.data(), 1, len, &sums[static_cast<size_t>(b)]);
    }
  });
  return total_sum(sums.data(), blocks);
}

// A float32 sum over the trailing dims (row_reduce_lead_rank admits it), or over every dim of
// more elements than a row holds (is_total_sum), running outside a cluster, e.g. in strict mode
// or over a value no cluster holds: each row is summed by row_sums, the function a row
// cluster's sum uses (a total sum by total_sum, as a cluster ending in it does), in the rows'
// logical (row-major) order whatever the operand's strides (a strided operand is read in
// pieces, read_logical). Rows split across ATen's intra-op threads (a total sum's blocks:
// total_sum); a result does not depend on the split.
Kernel row_sum_kernel(const ir::Node& n, const ir::Node& xn, int32_t x) {
  const int64_t rows = c10::multiply_integers(n.shape);
  const int64_t m = rows == 0 ? 0 : c10::multiply_integers(xn.shape) / rows;
  return fixed_order_sum_kernel(n, xn, x, [rows, m](const at::Tensor& t, float* pr) {
    if (rows == 0) return;
    const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(m, 1));
    if (!t.is_contiguous()) {
      if (m > kMaxRow) {
        pr[0] = strided_total_sum(t, m);
        return;
      }
      at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
        const int64_t chunk = std::max<int64_t>(1, kSumBlock * 16 / std::max<int64_t>(m, 1));  // rows per read
        std::vector<float> buf(static_cast<size_t>(std::min(chunk, r1 - r0) * m));
        for (int64_t r = r0; r < r1; r += chunk) {
          const int64_t k = std::min(chunk, r1 - r);
          read_logical(t, r * m, k * m, buf.data());
          row_sums(buf.data(), k, m, pr + r);
        }
      });
      return;
    }
    const float* px = t.const_data_ptr<float>();
    if (m > kMaxRow) {  // one row: a total sum
      pr[0] = total_sum(px, m);
    } else {
      at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { row_sums(px + r0 * m, r1 - r0, m, pr + r0); });
    }
  });
}

// A float32 sum keeping a contiguous range of dims (column_sum_kept), e.g. batch norm's
// per-channel sums: added in column_sums' order, as a cluster ending in it adds (tile_cluster.h).
Kernel column_sum_kernel(const ir::Node& n, const ir::Node& xn, int32_t x, int k0, int k1) {
  return fixed_order_sum_kernel(n, xn, x, [k0, k1](const at::Tensor& t, float* out) { column_sums(t, k0, k1, out); });
}

Kernel reduce_kernel(const ir::Graph& g, int32_t id, const ir::Node& n, const ir::Node& xn, int32_t x) {
  auto kind = static_cast<ir::ReduceKind>(n.iattrs.at(0));
  std::vector<int64_t> dims(n.iattrs.begin() + 1, n.iattrs.end());
  const at::ScalarType dtype = to_aten(xn.dtype);
  if (dims.empty()) return [x](const Values& v, at::Tensor*) { return v[x]; };
  if (kind == ir::ReduceKind::kArgmax || kind == ir::ReduceKind::kArgmin) {
    int64_t dim = dims[0];
    // ATen has no bool argmax; as u8 the order (false < true) and first-index ties are the same.
    bool as_u8 = dtype == at::kBool;
    auto in = [x, as_u8](const Values& v) { return as_u8 ? v[x].to(at::kByte) : v[x]; };
    if (kind == ir::ReduceKind::kArgmax) {
      return [in, dim](const Values& v, at::Tensor* out) {
        return out ? at::argmax_out(*out, in(v), dim) : at::argmax(in(v), dim);
      };
    }
    return [in, dim](const Values& v, at::Tensor* out) {
      return out ? at::argmin_out(*out, in(v), dim) : at::argmin(in(v), dim);
    };
  }
  bool empty = false;
  for (int64_t d : dims) empty |= xn.shape[d] == 0;
  if (empty) {  // known at compile time: the result is the identity everywhere
    at::Tensor fill = at::full(n.shape, identity(kind, dtype), at::TensorOptions().dtype(dtype));
    return [fill](const Values&, at::Tensor*) { return fill; };
  }
  if ((kind == ir::ReduceKind::kSum && row_reduce_lead_rank(g, id) >= 0) || is_total_sum(g, id)) {
    return row_sum_kernel(n, xn, x);
  }
  if (auto kept = column_sum_kept(g, id)) return column_sum_kernel(n, xn, x, kept->first, kept->second);
  switch (kind) {
    case ir::ReduceKind::kSum:  // ATen accumulates f16/bf16 in f32 and rounds once
      return [x, dims, dtype](const Values& v, at::Tensor* out) {
        return out ? at::sum_out(*out, v[x], dims, false, dtype)
                   : at::sum(v[x], dims, false, dtype);
      };
    case ir::ReduceKind::kProd:
      return [x, dims, dtype](const Values& v, at::Tensor*) {
        at::Tensor t = v[x];
        for (auto it = dims.rbegin(); it != dims.rend(); ++it) t = at::prod(t, *it, false, dtype);
        return t;
      };
    case ir::ReduceKind::kMax:
      return [x, dims](const Values& v, at::Tensor* out) {
        return out ? at::amax_out(*out, v[x], dims) : at::amax(v[x], dims);
      };
    case ir::ReduceKind::kMin:
      return [x, dims](const Values& v, at::Tensor* out) {
        return out ? at::amin_out(*out, v[x], dims) : at::amin(v[x], dims);
      };
    // On bool, all/any are whether the min/max of the bytes is nonzero: ATen's bool all/any
    // along a row of 32 took 96 us on [8, 4, 32, 32] (SDPA's masked-row test, every forward),
    // amin on the bytes 25 us. An empty dims list keeps ATen's (no reduction).
    case ir::ReduceKind::kAnd:
      return [x, dims](const Values& v, at::Tensor*) {
        const at::Tensor& t = v[x];
        if (t.scalar_type() == at::kBool && !dims.empty()) return at::amin(t.view(at::kByte), dims).ne(0);
        return at::all(t, dims);
      };
    case ir::ReduceKind::kOr:
      return [x, dims](const Values& v, at::Tensor*) {
        const at::Tensor& t = v[x];
        if (t.scalar_type() == at::kBool && !dims.empty()) return at::amax(t.view(at::kByte), dims).ne(0);
        return at::any(t, dims);
      };
    default:
      return {};
  }
}

// reduce_window: pad with the identity, unfold every dim into (position, window) pairs
// (dilation = stride of the window dim), then reduce all window dims at once.
Kernel reduce_window_kernel(const ir::Node& n, const ir::Node& xn, int32_t x) {
  const size_t r = xn.shape.size();
  if (r == 0) return [x](const Values& v, at::Tensor*) { return v[x]; };
  auto wkind = static_cast<ir::WindowKind>(n.iattrs.at(0));
  auto kind = wkind == ir::WindowKind::kSum   ? ir::ReduceKind::kSum
              : wkind == ir::WindowKind::kMax ? ir::ReduceKind::kMax
                                              : ir::ReduceKind::kMin;
  const at::ScalarType dtype = to_aten(xn.dtype);
  std::vector<int64_t> window = attr_slice(n, 1, r), strides = attr_slice(n, 1 + r, r),
                       lo = attr_slice(n, 1 + 2 * r, r), hi = attr_slice(n, 1 + 3 * r, r),
                       dil = attr_slice(n, 1 + 4 * r, r), shape = n.shape;
  if (c10::multiply_integers(shape) == 0) {
    return [shape, dtype](const Values&, at::Tensor*) { return at::empty(shape, dtype); };
  }
  std::vector<int64_t> pads;  // constant_pad_nd order: last dim first
  bool padded = false;
  for (size_t d = r; d-- > 0;) {
    pads.push_back(lo[d]);
    pads.push_back(hi[d]);
    padded |= lo[d] || hi[d];
  }
  std::vector<int64_t> wdims;
  for (size_t d = r; d < 2 * r; ++d) wdims.push_back(static_cast<int64_t>(d));
  at::Scalar fill = identity(kind, dtype);
  return [=](const Values& v, at::Tensor* out) {
    at::Tensor t = padded ? at::constant_pad_nd(v[x], pads, fill) : v[x];
    for (size_t d = 0; d < r; ++d) {
      t = t.unfold(d, (window[d] - 1) * dil[d] + 1, strides[d]);
      if (dil[d] > 1) t = t.slice(-1, 0, c10::nullopt, dil[d]);
    }
    if (kind == ir::ReduceKind::kSum) {
      return out ? at::sum_out(*out, t, wdims, false, dtype) : at::sum(t, wdims, false, dtype);
    }
    if (kind == ir::ReduceKind::kMax)
      return out ? at::amax_out(*out, t, wdims) : at::amax(t, wdims);
    return out ? at::amin_out(*out, t, wdims) : at::amin(t, wdims);
  };
}

Kernel scan_kernel(const ir::Node& n, const ir::Node& xn, int32_t x) {
  if (xn.shape.empty()) return [x](const Values& v, at::Tensor*) { return v[x]; };
  auto kind = static_cast<ir::ScanKind>(n.iattrs.at(0));
  int64_t dim = n.iattrs.at(1);
  bool reverse = n.iattrs.at(2) != 0;
  const at::ScalarType dtype = to_aten(xn.dtype);
  return [=](const Values& v, at::Tensor*) {
    at::Tensor t = reverse ? at::flip(v[x], dim) : v[x];
    switch (kind) {
      case ir::ScanKind::kSum:
        t = at::cumsum(t, dim, dtype);
        break;
      case ir::ScanKind::kProd:
        t = at::cumprod(t, dim, dtype);
        break;
      case ir::ScanKind::kMax:
        t = std::get<0>(at::cummax(t, dim));
        break;
      case ir::ScanKind::kMin:
        t = std::get<0>(at::cummin(t, dim));
        break;
    }
    return reverse ? at::flip(t, dim) : t;
  };
}

}  // namespace

Kernel make_reduce_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.operands.empty()) return {};
  const int32_t x = n.operands[0];
  const ir::Node& xn = g.node(x);
  switch (n.kind) {
    case OpKind::kReduce:
      return reduce_kernel(g, id, n, xn, x);
    case OpKind::kReduceWindow:
      return reduce_window_kernel(n, xn, x);
    case OpKind::kScan:
      return scan_kernel(n, xn, x);
    case OpKind::kSort: {
      if (xn.shape.empty()) {
        at::Tensor zero = at::zeros({}, at::kLong);
        return [zero](const Values&, at::Tensor*) { return zero; };
      }
      int64_t dim = n.iattrs.at(0);
      bool descending = n.iattrs.at(1) != 0;
      // torch.sort puts NaN last ascending (first descending): NaN is the largest value.
      return [x, dim, descending](const Values& v, at::Tensor*) {
        return std::get<1>(at::sort(v[x], /*stable=*/true, dim, descending));
      };
    }
    default:
      return {};
  }
}

}  // namespace torch_tpu::runtime::host

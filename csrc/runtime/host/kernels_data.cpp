// Data-movement IR ops. Pure layout changes (broadcast_in_dim, reshape, transpose, slice,
// dynamic_slice) return ATen views, so they cost no copy; consumers read them strided.
#include <ATen/TensorUtils.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/check.h"
#include "runtime/host/kernels.h"
#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

// Clamped start of a dynamic slice of `size` elements in a dim of `n` (docs/ir.md).
int64_t clamp_start(const at::Tensor& start, int64_t n, int64_t size) {
  return std::clamp<int64_t>(start.item<int64_t>(), 0, n - size);
}

// Smallest and largest of an int64 index of n values along dim 0 (1-d, or a column [n, 1]),
// read in place (no ATen reduction: see strided_copy.h).
std::pair<int64_t, int64_t> index_range(const at::Tensor& index) {
  const int64_t* p = index.const_data_ptr<int64_t>();
  const int64_t n = index.size(0), s = index.stride(0);
  int64_t mn = p[0], mx = p[0];
  for (int64_t i = 1; i < n; ++i) {
    mn = std::min(mn, p[i * s]);
    mx = std::max(mx, p[i * s]);
  }
  return {mn, mx};
}

// gather/scatter index range check: an index outside [0, n) is a user-visible IndexError, or a
// RuntimeError when the node says so (runtime_error: torch.gather and torch.scatter's type).
void check_index(const char* op, const at::Tensor& index, const at::Tensor& x, int64_t axis,
                 bool runtime_error = false) {
  if (index.numel() == 0) return;
  int64_t n = x.dim() == 0 ? 1 : x.size(axis);
  int64_t mn, mx;
  if (index.scalar_type() == at::kLong && (index.dim() == 1 || (index.dim() == 2 && index.size(1) == 1))) {
    std::tie(mn, mx) = index_range(index);  // a column [n, 1] read as its n values
  } else {
    auto [lo, hi] = at::aminmax(index);
    mn = lo.item<int64_t>();
    mx = hi.item<int64_t>();
  }
  int64_t bad = mn < 0 ? mn : mx;
  // No axis in the message: it is the IR op's, which lowerings may have moved from the user's dim.
  if (runtime_error) {
    TPU_CHECK(mn >= 0 && mx < n, op, ": index ", bad, " is out of bounds for a dimension with size ", n);
  }
  TPU_CHECK_INDEX(mn >= 0 && mx < n, op, ": index ", bad, " is out of bounds for a dimension with size ", n);
}

// A view of x's memory with these sizes and strides, `offset` elements past x's first element,
// made directly: the dispatched view ops (permute, view, expand, slice) cost 1-2 us each, and a
// compiled TinyGPT training step runs ~120 of them as steps. The view constructor allocates no
// version counter (runtime values never meet autograd).
at::Tensor view_of(const at::Tensor& x, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset = 0) {
  at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(x.storage()),
                                                          x.unsafeGetTensorImpl()->key_set(), x.dtype());
  v.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, x.storage_offset() + offset);
  return v;
}

// Rows rows[i] (int64, in range) of a 2-d table whose rows are contiguous, their first `width`
// elements each: an embedding lookup, one memcpy per row (into `out` when it is contiguous).
at::Tensor gather_rows(const at::Tensor& table, const at::Tensor& rows, int64_t width, const at::Tensor* out) {
  const int64_t n = rows.size(0);
  at::Tensor result = out && out->is_contiguous() && out->scalar_type() == table.scalar_type()
                          ? *out
                          : at::empty({n, width}, table.options());
  if (n == 0 || width == 0) return result;
  const size_t item = table.element_size(), bytes = static_cast<size_t>(width) * item;
  const auto* src = static_cast<const char*>(table.const_data_ptr());
  auto* dst = static_cast<char*>(result.mutable_data_ptr());
  const int64_t* idx = rows.const_data_ptr<int64_t>();
  const int64_t step = rows.stride(0), row_bytes = table.stride(0) * static_cast<int64_t>(item);
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * bytes, src + idx[i * step] * row_bytes, bytes);
  return result;
}

// [n, 1] (float) of x[i, index[i, 0]] for a float x [n, m] and an int64 index [n, 1] in range.
at::Tensor pick_per_row(const at::Tensor& x, const at::Tensor& index, const at::Tensor* out) {
  const int64_t n = x.size(0);
  at::Tensor result =
      out && out->is_contiguous() && out->scalar_type() == at::kFloat ? *out : at::empty({n, 1}, x.options());
  const float* src = x.const_data_ptr<float>();
  const int64_t* idx = index.const_data_ptr<int64_t>();
  float* dst = result.mutable_data_ptr<float>();
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), is0 = index.stride(0);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * xs0 + idx[i * is0] * xs1];
  return result;
}

// Row i of upd (float [n, width]) added in place to row rows[i] (int64, in range) of `result`
// (float, contiguous), in index order: an embedding's gradient (index_add's sums in its order).
void add_rows_at(const at::Tensor& result, const at::Tensor& rows, const at::Tensor& upd) {
  const int64_t n = rows.size(0), width = result.size(1);
  if (n == 0 || width == 0) return;
  float* dst = result.mutable_data_ptr<float>();
  const float* src = upd.const_data_ptr<float>();
  const int64_t* idx = rows.const_data_ptr<int64_t>();
  const int64_t step = rows.stride(0), us0 = upd.stride(0), us1 = upd.stride(1);
  for (int64_t i = 0; i < n; ++i) {
    float* __restrict d = dst + idx[i * step] * width;
    const float* __restrict s = src + i * us0;
    if (us1 == 1) {
      add_into(d, s, width);
    } else {
      for (int64_t j = 0; j < width; ++j) d[j] += s[j * us1];
    }
  }
}

// Row i of upd ([n, width], any strides) copied over row rows[i] (int64, in range) of `result`
// ([*, width], any strides, upd's dtype), in index order: the last duplicate wins.
void put_rows_at(const at::Tensor& result, const at::Tensor& rows, const at::Tensor& upd) {
  const int64_t n = rows.size(0), width = result.size(1);
  if (n == 0 || width == 0) return;
  auto* dst = static_cast<char*>(result.mutable_data_ptr());
  const auto* src = static_cast<const char*>(upd.const_data_ptr());
  const int64_t* idx = rows.const_data_ptr<int64_t>();
  const auto item = static_cast<int64_t>(result.element_size());
  const int64_t step = rows.stride(0), rs0 = result.stride(0), us0 = upd.stride(0);
  const int64_t dst_stride[1] = {result.stride(1)}, src_stride[1] = {upd.stride(1)}, size[1] = {width};
  for (int64_t i = 0; i < n; ++i) {
    strided_copy(dst + idx[i * step] * rs0 * item, dst_stride, src + i * us0 * item, src_stride, size,
                 static_cast<size_t>(item));
  }
}

// Whether a and b are the same elements at the same addresses, and no two elements share one.
bool same_elements(const at::Tensor& a, const at::Tensor& b) {
  if (a.const_data_ptr() != b.const_data_ptr() || !a.sizes().equals(b.sizes())) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && (a.stride(d) != b.stride(d) || a.stride(d) == 0)) return false;
  }
  return true;
}

// The tensor a scatter of x updates in place. The step's destination `out` (executor.h) when it
// has x's dtype and sizes and either is x's own memory element for element (an in-place
// `index_put_` / `index_copy_` into a cache, planned by plan_in_place_scatters: only the
// indexed elements are then written) or shares no byte with it (x is copied there first, and
// the executor needs no copy afterwards). Otherwise a contiguous copy of x: a destination
// overlapping x any other way is written only after x has been read whole.
at::Tensor scatter_target(const at::Tensor& x, at::Tensor* out) {
  if (out != nullptr && out->defined() && out->scalar_type() == x.scalar_type() && out->sizes().equals(x.sizes())) {
    if (same_elements(*out, x)) return *out;
    const auto [olo, ohi] = byte_extent(out->const_data_ptr(), out->sizes(), out->strides(), out->element_size());
    const auto [xlo, xhi] = byte_extent(x.const_data_ptr(), x.sizes(), x.strides(), x.element_size());
    if (x.numel() > 0 && (ohi < xlo || xhi < olo)) {
      copy_into(*out, x);
      return *out;
    }
  }
  at::Tensor result = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  copy_into(result, x);
  return result;
}

// pad: fill with the value, then copy the (possibly cropped) strided interior region.
struct PadPlan {
  std::vector<int64_t> lo, interior, shape, in_shape;
};

at::Tensor pad(const PadPlan& p, const at::Tensor& x, const at::Tensor& value, at::Tensor* out) {
  at::Tensor result = out ? *out : at::empty(p.shape, x.options());
  result.copy_(value);  // broadcasts the 0-d fill value
  at::Tensor dst = result, src = x;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    // Element j of x lands at lo + j * step; keep the j whose position is inside [0, size).
    int64_t step = p.interior[d] + 1, lo = p.lo[d], n = p.in_shape[d], size = p.shape[d];
    int64_t j0 = lo >= 0 ? 0 : (-lo + step - 1) / step;
    int64_t j1 = size - 1 - lo < 0 ? -1 : std::min(n - 1, (size - 1 - lo) / step);
    if (j1 < j0) return result;  // nothing of x survives the cropping
    src = src.slice(d, j0, j1 + 1);
    dst = dst.slice(d, lo + j0 * step, lo + j1 * step + 1, step);
  }
  dst.copy_(src);
  return result;
}

}  // namespace

Kernel make_data_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  const std::vector<int64_t> shape = n.shape;
  const std::vector<int64_t>& a = n.iattrs;
  if (n.operands.empty()) return {};
  const int32_t x = n.operands[0];
  const ir::Node& xn = g.node(x);
  const size_t r = xn.shape.size();
  switch (n.kind) {
    case OpKind::kBroadcastInDim: {
      std::vector<int64_t> view(shape.size(), 1);
      for (size_t k = 0; k < a.size(); ++k) view[a[k]] = xn.shape[k];
      std::vector<int64_t> dims = a, x_shape = xn.shape;
      return [x, view, shape, dims, x_shape](const Values& v, at::Tensor*) {
        const at::Tensor& t = v[x];
        if (!t.sizes().equals(x_shape)) return t.reshape(view).expand(shape);  // a smaller folded value
        c10::SmallVector<int64_t, 6> strides(shape.size(), 0);
        for (size_t k = 0; k < dims.size(); ++k) {
          if (x_shape[k] != 1) strides[static_cast<size_t>(dims[k])] = t.stride(static_cast<int64_t>(k));
        }
        return view_of(t, shape, strides);
      };
    }
    case OpKind::kReshape:
      return [x, shape](const Values& v, at::Tensor* out) {
        const at::Tensor& t = v[x];
        if (auto strides = at::detail::computeStride(t.sizes(), t.strides(), shape)) return view_of(t, shape, *strides);
        // Not a view of this layout: a copy, straight into the output's memory when it has one.
        if (out && out->is_contiguous() && out->scalar_type() == t.scalar_type()) {
          copy_into(view_of(*out, t.sizes(), row_major_strides(t.sizes())), t);
          return *out;
        }
        return reshaped_copy(t, shape);
      };
    case OpKind::kTranspose: {
      std::vector<int64_t> perm = a;
      return [x, perm](const Values& v, at::Tensor*) {
        const at::Tensor& t = v[x];
        c10::SmallVector<int64_t, 6> sizes, strides;
        for (int64_t p : perm) {
          sizes.push_back(t.size(p));
          strides.push_back(t.stride(p));
        }
        return view_of(t, sizes, strides);
      };
    }
    case OpKind::kSlice: {
      std::vector<int64_t> start = attr_slice(n, 0, r), limit = attr_slice(n, r, r),
                           stride = attr_slice(n, 2 * r, r);
      return [x, start, limit, stride](const Values& v, at::Tensor*) {
        const at::Tensor& t = v[x];
        c10::SmallVector<int64_t, 6> sizes, strides;
        int64_t offset = 0;
        for (size_t d = 0; d < start.size(); ++d) {
          const int64_t s = t.stride(static_cast<int64_t>(d));
          sizes.push_back(std::max<int64_t>(0, (limit[d] - start[d] + stride[d] - 1) / stride[d]));
          strides.push_back(s * stride[d]);
          offset += start[d] * s;
        }
        return view_of(t, sizes, strides, offset);
      };
    }
    case OpKind::kDynamicSlice: {
      std::vector<int32_t> starts(n.operands.begin() + 1, n.operands.end());
      std::vector<int64_t> sizes = a;
      return [x, starts, sizes](const Values& v, at::Tensor*) {
        at::Tensor t = v[x];
        for (size_t d = 0; d < sizes.size(); ++d) {
          t = t.narrow(d, clamp_start(v[starts[d]], t.size(d), sizes[d]), sizes[d]);
        }
        return t;
      };
    }
    case OpKind::kDynamicUpdateSlice: {
      int32_t u = n.operands[1];
      std::vector<int32_t> starts(n.operands.begin() + 2, n.operands.end());
      return [x, u, starts](const Values& v, at::Tensor* out) {
        at::Tensor result = out ? out->copy_(v[x]) : v[x].clone(at::MemoryFormat::Contiguous);
        at::Tensor region = result;
        const at::Tensor& upd = v[u];
        for (size_t d = 0; d < starts.size(); ++d) {
          region =
              region.narrow(d, clamp_start(v[starts[d]], result.size(d), upd.size(d)), upd.size(d));
        }
        region.copy_(upd);
        return result;
      };
    }
    case OpKind::kConcatenate: {
      std::vector<int32_t> xs = n.operands;
      int64_t dim = a.at(0);
      return [xs, dim](const Values& v, at::Tensor* out) {
        std::vector<at::Tensor> ts;
        ts.reserve(xs.size());
        for (int32_t i : xs) ts.push_back(v[i]);
        return out ? at::cat_out(*out, ts, dim) : at::cat(ts, dim);
      };
    }
    case OpKind::kPad: {
      PadPlan plan{attr_slice(n, 0, r), attr_slice(n, 2 * r, r), shape, xn.shape};
      int32_t value = n.operands[1];
      return [x, value, plan](const Values& v, at::Tensor* out) {
        return pad(plan, v[x], v[value], out);
      };
    }
    case OpKind::kReverse: {
      std::vector<int64_t> dims = a;
      if (dims.empty()) return [x](const Values& v, at::Tensor*) { return v[x]; };
      return [x, dims](const Values& v, at::Tensor*) { return at::flip(v[x], dims); };
    }
    case OpKind::kGather: {
      int32_t idx = n.operands[1];
      int64_t axis = a.at(0);
      const bool rt = a.size() > 1 && a[1] == 1;  // out of range: RuntimeError (docs/ir.md)
      return [x, idx, axis, rt](const Values& v, at::Tensor* out) {
        const at::Tensor& index = v[idx];
        // Row lookups (an embedding: one index per row, broadcast along the row) are
        // index_select of whole rows: the same values without reading the index per element.
        // [256, 64] rows of a [128, 64] table: 32 -> ~3 µs.
        if (axis == 0 && index.dim() == 2 && v[x].dim() == 2 && index.stride(1) == 0 && index.size(1) > 0) {
          const at::Tensor rows = view_of(index, {index.size(0)}, {index.stride(0)});
          check_index("gather", rows, v[x], axis, rt);
          const at::Tensor& t = v[x];
          if (rows.scalar_type() == at::kLong && t.stride(1) == 1) {
            return gather_rows(t, rows, index.size(1), out);
          }
          const at::Tensor table = t.narrow(1, 0, index.size(1));
          return out ? at::index_select_out(*out, table, 0, rows) : at::index_select(table, 0, rows);
        }
        check_index("gather", index, v[x], axis, rt);
        // One element per row (cross entropy picking each row's target logit): a loop.
        if (axis == 1 && index.dim() == 2 && index.size(1) == 1 && v[x].dim() == 2 && index.size(0) == v[x].size(0) &&
            index.scalar_type() == at::kLong && v[x].scalar_type() == at::kFloat) {
          return pick_per_row(v[x], index, out);
        }
        return out ? at::gather_out(*out, v[x], axis, index) : at::gather(v[x], axis, index);
      };
    }
    case OpKind::kScatter: {
      int32_t idx = n.operands[1], upd = n.operands[2];
      int64_t axis = a.at(0);
      auto mode = static_cast<ir::ScatterMode>(a.at(1));
      const bool rt = a.size() > 2 && a[2] == 1;  // out of range: RuntimeError (docs/ir.md)
      const char* reduce = mode == ir::ScatterMode::kAdd   ? "sum"
                           : mode == ir::ScatterMode::kMul ? "prod"
                           : mode == ir::ScatterMode::kMax ? "amax"
                                                           : "amin";
      // Indices are checked before anything is written: a failed scatter leaves its
      // destination (possibly its operand's own memory) untouched.
      return [x, idx, upd, axis, mode, reduce, rt](const Values& v, at::Tensor* out) {
        const at::Tensor& index = v[idx];
        // Whole rows (index_put / index_copy of rows, a KV cache write, an embedding's gradient:
        // one index per row, broadcast along the row) move row by row, in index order (the last
        // duplicate wins, or every duplicate adds), without reading the index per element:
        // ATen's scatter_ took ~140 us for 256 rows of 64 floats, a row loop ~10 us.
        const bool rows_only = mode == ir::ScatterMode::kReplace || mode == ir::ScatterMode::kAdd;
        if (rows_only && axis == 0 && index.dim() == 2 && v[x].dim() == 2 && index.stride(1) == 0 &&
            index.size(1) == v[x].size(1) && v[upd].sizes().equals(index.sizes())) {
          const at::Tensor rows = view_of(index, {index.size(0)}, {index.stride(0)});
          check_index("scatter", rows, v[x], axis, rt);
          at::Tensor target = scatter_target(v[x], out);
          if (mode == ir::ScatterMode::kReplace) {
            put_rows_at(target, rows, v[upd]);
            return target;
          }
          if (target.scalar_type() == at::kFloat && v[upd].scalar_type() == at::kFloat && target.is_contiguous()) {
            add_rows_at(target, rows, v[upd]);
            return target;
          }
          return target.index_add_(0, rows, v[upd]);
        }
        check_index("scatter", index, v[x], axis, rt);
        if (mode == ir::ScatterMode::kReplace) return scatter_target(v[x], out).scatter_(axis, index, v[upd]);
        return scatter_target(v[x], out).scatter_reduce_(axis, index, v[upd], reduce, /*include_self=*/true);
      };
    }
    default:
      return {};
  }
}

}  // namespace torch_tpu::runtime::host

#include "exec/view_geometry.h"

#include <c10/util/SmallVector.h>
#include <c10/util/accumulate.h>

#include <algorithm>

namespace torch_tpu::exec::fusion {
namespace {

std::vector<int64_t> sorted_sizes(const BoxLayout& box) {
  std::vector<int64_t> s;
  for (const auto& d : box.real) s.push_back(d.size);
  return s;
}

}  // namespace

bool dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, std::vector<int64_t>& perm) {
  perm.resize(sizes.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  // Size-1 dims may carry any stride: they sort last (is_contiguous ignores them).
  auto key = [&](int64_t d) { return sizes[static_cast<size_t>(d)] == 1 ? 0 : strides[static_cast<size_t>(d)]; };
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return key(a) > key(b); });
  c10::SmallVector<int64_t, 6> s, st;  // recorded per op: no heap allocation at usual ranks
  for (int64_t d : perm) {
    s.push_back(sizes[static_cast<size_t>(d)]);
    st.push_back(strides[static_cast<size_t>(d)]);
  }
  return is_contiguous(s, st);
}

bool box_layout(int64_t n, int64_t rel, c10::IntArrayRef sizes, c10::IntArrayRef strides, BoxLayout& box) {
  if (rel < 0 || n == 0) return false;
  int64_t last = rel;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;
    if (sizes[d] == 1) continue;
    if (strides[d] == 0) {
      box.broadcast = true;
      continue;
    }
    if (strides[d] < 0) return false;
    box.real.push_back({sizes[d], strides[d], d});
    last += (sizes[d] - 1) * strides[d];
  }
  if (last >= n) return false;
  auto& real = box.real;
  std::stable_sort(real.begin(), real.end(), [](const auto& a, const auto& b) { return a.stride > b.stride; });
  for (size_t k = 0; k + 1 < real.size(); ++k) {
    if (real[k].stride == real[k + 1].stride || real[k].stride % real[k + 1].stride != 0) return false;
  }
  const size_t m = real.size();
  if (m == 0) {  // one element
    box.len = n;
    box.base = {n};
    box.start = {rel};
    box.limit = {rel + 1};
    return true;
  }
  const int64_t s0 = real[0].stride;
  box.len = (last / s0 + 1) * s0;  // whole rows of the outermost dimension
  if (box.len > n) return false;
  box.base = {box.len / s0};
  for (size_t k = 1; k < m; ++k) box.base.push_back(real[k - 1].stride / real[k].stride);
  box.base.push_back(real[m - 1].stride);
  box.start.assign(m + 1, 0);
  box.limit.assign(m + 1, 0);
  int64_t rem = rel;
  for (size_t k = 0; k < m; ++k) {
    box.start[k] = rem / real[k].stride;
    rem %= real[k].stride;
    box.limit[k] = box.start[k] + real[k].size;
    if (box.limit[k] > box.base[k]) return false;
  }
  box.start[m] = rem;
  box.limit[m] = rem + 1;
  return true;
}

std::vector<int64_t> view_order(const BoxLayout& box) {
  std::vector<int64_t> perm(box.real.size());
  for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return box.real[static_cast<size_t>(a)].pos < box.real[static_cast<size_t>(b)].pos;
  });
  return perm;
}

bool express_view(int64_t w_offset, c10::IntArrayRef w_sizes, ir::DType dtype, int64_t r_offset,
                  c10::IntArrayRef r_sizes, c10::IntArrayRef r_strides, std::vector<ir::Node>& out) {
  const int64_t n = c10::multiply_integers(w_sizes);
  BoxLayout box;
  if (!box_layout(n, r_offset - w_offset, r_sizes, r_strides, box)) return false;
  Chain c{dtype, std::vector<int64_t>(w_sizes.begin(), w_sizes.end()), out};
  c.reshape({n});
  c.slice({0}, {box.len});
  c.reshape(box.base);
  c.slice(box.start, box.limit);
  c.reshape(sorted_sizes(box));
  c.transpose(view_order(box));
  std::vector<int64_t> with_ones(r_sizes.begin(), r_sizes.end());
  for (size_t d = 0; d < r_sizes.size(); ++d) {
    if (r_sizes[d] > 1 && r_strides[d] == 0) with_ones[d] = 1;
  }
  c.reshape(with_ones);
  if (box.broadcast) {
    std::vector<int64_t> dims(r_sizes.size());
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
    out.push_back(view_node(ir::OpKind::kBroadcastInDim, dtype, std::vector<int64_t>(r_sizes.begin(), r_sizes.end()),
                            std::move(dims)));
  }
  return true;
}

bool can_update(int64_t w_offset, c10::IntArrayRef w_sizes, int64_t v_offset, c10::IntArrayRef v_sizes,
                c10::IntArrayRef v_strides) {
  BoxLayout box;
  return box_layout(c10::multiply_integers(w_sizes), v_offset - w_offset, v_sizes, v_strides, box) && !box.broadcast;
}

}  // namespace torch_tpu::exec::fusion

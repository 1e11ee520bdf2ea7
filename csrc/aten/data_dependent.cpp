// Ops that read tensor values on the host: output shapes that depend on them (each
// synchronizes once to learn the size, then runs lowered ops with static shapes: nonzero ->
// count + nonzero_static), and errors that do (torch.cholesky's not-positive-definite check).
#include <ATen/Functions.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "aten/kernels.h"
#include "common/check.h"
#include "device/stream.h"
#include "exec/call.h"

namespace torch_tpu::aten {

at::Tensor nonzero(const at::Tensor& self) {
  device::FlushCauseScope cause(device::FlushCause::kDataDependent);
  int64_t n = at::count_nonzero(self).item<int64_t>();
  return at::nonzero_static(self, n, -1);
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_select: expected BoolTensor for mask");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor flat_mask = mask.expand(shape).reshape({-1});
  at::Tensor flat = self.expand(shape).reshape({-1});
  return at::index_select(flat, 0, torch_tpu::aten::nonzero(flat_mask).reshape({-1}));
}

namespace {

// Runs of equal neighbours among the elements of a 1-d tensor or the rows of a 2-d one (NaN
// equals nothing, -0.0 equals 0.0, as ATen's unique): the first element (row) of each run,
// each one's run, and the run lengths. One sync learns the number of runs; everything else
// has static shapes.
struct Runs {
  at::Tensor values, run_of, counts;
};

Runs consecutive_runs(const at::Tensor& v) {
  const int64_t n = v.size(0);
  at::Tensor starts = at::ones({n}, v.options().dtype(c10::kBool));
  if (n > 1) {
    at::Tensor differs = at::ne(v.slice(0, 1), v.slice(0, 0, n - 1));
    if (v.dim() == 2) differs = differs.any(1);
    starts = at::cat({starts.slice(0, 0, 1), differs});
  }
  int64_t runs = 0;
  {
    device::FlushCauseScope cause(device::FlushCause::kDataDependent);
    runs = starts.sum().item<int64_t>();
  }
  at::Tensor first = at::nonzero_static(starts, runs, -1).reshape({-1});  // where each run starts
  Runs r;
  r.values = v.index_select(0, first);
  r.run_of = at::cumsum(starts, 0, c10::kLong).sub_(1);
  r.counts = at::cat({first.slice(0, 1), at::full({1}, n, first.options())}).sub_(first);
  return r;
}

at::Tensor no_output(const at::Tensor& self) { return at::empty({0}, self.options().dtype(c10::kLong)); }

// unique's results for a tensor without elements (the inverse keeps the input's shape).
std::tuple<at::Tensor, at::Tensor, at::Tensor> no_elements(const at::Tensor& self, bool return_inverse) {
  return {at::empty({0}, self.options()),
          return_inverse ? at::empty(self.sizes(), self.options().dtype(c10::kLong)) : no_output(self),
          no_output(self)};
}

// The slices of `self` along `dim` as the rows of a matrix, and back.
at::Tensor slices_as_rows(const at::Tensor& self, int64_t dim) {
  return self.movedim(dim, 0).reshape({self.size(dim), -1});
}
at::Tensor rows_as_slices(const at::Tensor& rows, const at::Tensor& like, int64_t dim) {
  std::vector<int64_t> shape = like.movedim(dim, 0).sizes().vec();
  shape[0] = rows.size(0);
  return rows.reshape(shape).movedim(0, dim);
}

// unique with dim= refuses other empty dims, as ATen does.
void check_slices(const at::Tensor& self, int64_t dim) {
  for (int64_t d = 0; d < self.dim(); ++d) {
    TORCH_CHECK(d == dim || self.size(d) > 0 || self.size(dim) == 0,
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  }
}

}  // namespace

// torch.unique(dim=): slices along dim in lexicographic order (one stable sort per element of a
// slice, last element first, as a radix sort), then runs of equal neighbouring slices.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool /*sorted*/,
                                                          bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_slices(self, dim);
  if (self.size(dim) == 0) return {self.clone(), no_output(self), no_output(self)};
  const at::Tensor rows = slices_as_rows(self, dim);
  at::Tensor order = at::arange(rows.size(0), self.options().dtype(c10::kLong));
  for (int64_t c = rows.size(1) - 1; c >= 0; --c) {
    const at::Tensor key = rows.select(1, c).index_select(0, order);
    order = order.index_select(0, std::get<1>(at::sort(key, /*stable=*/true, 0, /*descending=*/false)));
  }
  Runs r = consecutive_runs(rows.index_select(0, order));
  at::Tensor inverse = no_output(self);
  if (return_inverse) inverse = at::empty_like(r.run_of).scatter_(0, order, r.run_of);
  return {rows_as_slices(r.values, self, dim), inverse, return_counts ? r.counts : no_output(self)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive(const at::Tensor& self, int64_t dim,
                                                                      bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_slices(self, dim);
  if (self.size(dim) == 0) return {self.clone(), no_output(self), no_output(self)};
  Runs r = consecutive_runs(slices_as_rows(self, dim));
  return {rows_as_slices(r.values, self, dim), return_inverse ? r.run_of : no_output(self),
          return_counts ? r.counts : no_output(self)};
}

// torch.unique: a stable sort, then runs of equal values; sorted=False sorts too, as ATen's CPU
// kernel does. The inverse goes back through the sort's permutation.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool /*sorted*/, bool return_inverse,
                                                       bool return_counts) {
  const at::Tensor flat = self.reshape({-1});
  if (flat.numel() == 0) return no_elements(self, return_inverse);
  auto [sorted_values, order] = at::sort(flat, /*stable=*/true, 0, /*descending=*/false);
  Runs r = consecutive_runs(sorted_values);
  at::Tensor inverse = no_output(self);
  if (return_inverse) inverse = at::empty_like(r.run_of).scatter_(0, order, r.run_of).view(self.sizes());
  return {r.values, inverse, return_counts ? r.counts : no_output(self)};
}

std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  if (dim.has_value() && self.dim() > 1)
    return torch_tpu::aten::unique_dim_consecutive(self, *dim, return_inverse, return_counts);
  const at::Tensor flat = self.reshape({-1});
  if (flat.numel() == 0) return no_elements(self, return_inverse);
  Runs r = consecutive_runs(flat);
  return {r.values, return_inverse ? r.run_of.view(self.sizes()) : no_output(self),
          return_counts ? r.counts : no_output(self)};
}

// repeat_interleave(repeats): index i repeated repeats[i] times. Without output_size one sync
// reads the total (and the smallest count, to refuse negative ones); with it, none, as on CUDA.
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == c10::kLong || repeats.scalar_type() == c10::kInt,
              "repeats has to be Long or Int tensor");
  int64_t total = 0;
  if (output_size.has_value()) {
    total = output_size->expect_int();
  } else if (repeats.numel() > 0) {
    device::FlushCauseScope cause(device::FlushCause::kDataDependent);
    const at::Tensor sum_min = at::stack({repeats.sum().to(c10::kLong), repeats.min().to(c10::kLong)}).cpu();
    TORCH_CHECK(sum_min[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = sum_min[0].item<int64_t>();
  }
  if (repeats.numel() == 0 || total == 0) return at::empty({total}, repeats.options());
  const at::Tensor ends = at::cumsum(repeats, 0, c10::kLong);
  const at::Tensor positions = at::arange(total, repeats.options().dtype(c10::kLong));
  return at::searchsorted(ends, positions, /*out_int32=*/repeats.scalar_type() == c10::kInt, /*right=*/true);
}

// bincount: the length, max(input) + 1 but at least minlength, is read to the host (one sync,
// with the smallest value, to refuse negative inputs); the counts are then one index_add.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK(self.dim() == 1 && c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  const bool weighted = weights.has_value() && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  // CPU's result types: counts are int64, float32 weights sum in float32, any others in float64.
  const c10::ScalarType dtype = !weighted                               ? c10::kLong
                                : weights->scalar_type() == c10::kFloat ? c10::kFloat
                                                                        : c10::kDouble;
  int64_t length = minlength;
  if (self.numel() > 0) {
    device::FlushCauseScope cause(device::FlushCause::kDataDependent);
    const at::Tensor max_min = at::stack({self.max().to(c10::kLong), self.min().to(c10::kLong)}).cpu();
    TORCH_CHECK(max_min[1].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
    length = std::max(length, max_min[0].item<int64_t>() + 1);
  }
  at::Tensor counts = at::zeros({length}, self.options().dtype(dtype));
  if (self.numel() == 0) return counts;
  const at::Tensor added = weighted ? weights->to(dtype) : at::ones({self.numel()}, counts.options());
  return counts.index_add_(0, self.to(c10::kLong), added);
}

// torch.cholesky (deprecated): linalg.cholesky_ex, then one host read of `info` to raise the
// CPU kernel's error for a matrix that is not positive-definite.
at::Tensor cholesky(const at::Tensor& self, bool upper) {
  auto [factor, info] = at::linalg_cholesky_ex(self, upper, /*check_errors=*/false);
  device::FlushCauseScope cause(device::FlushCause::kDataDependent);
  at::_linalg_check_errors(info, "cholesky", self.dim() == 2);
  return factor;
}

// torch.multinomial (and .out): CPU's argument checks and its distribution checks, then the
// lowered sampler. The distribution is checked with three flags computed on the device and read
// on the host in one transfer (a sync, as cholesky's): a negative, NaN or infinite probability,
// or a row summing to 0, raises CPU's RuntimeError instead of returning samples.
void multinomial(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  const at::Tensor& self = (*stack)[stack->size() - nargs].toTensor();
  const int64_t n_sample = (*stack)[stack->size() - nargs + 1].toInt();
  const bool replacement = (*stack)[stack->size() - nargs + 2].toBool();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "multinomial: prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(n_sample > 0, "multinomial: cannot sample n_sample <= 0 samples");
  TORCH_CHECK(replacement || n_sample <= self.size(-1),
              "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (self.numel() == 0) {  // no rows (no categories fails in the lowering): an empty result, as CPU's
    TORCH_CHECK(self.size(-1) > 0, "multinomial: number of categories cannot be zero");
    const std::vector<int64_t> shape{0, n_sample};
    at::Tensor result = nargs == 5 ? stack->back().toTensor() : at::empty(shape, self.options().dtype(at::kLong));
    if (nargs == 5) result.resize_(shape);
    torch::jit::drop(*stack, nargs);
    stack->push_back(result);
    return;
  }
  {
    at::Tensor flags;
    {
      at::Tensor below = at::logical_or(at::lt(self, 0), at::isnan(self)).any();
      at::Tensor infinite = at::isinf(self).any();
      at::Tensor empty_row = at::le(self.sum(-1), 0).any();  // a NaN sum compares false: NaN is `below`
      flags = at::stack({below, infinite, empty_row});
    }
    device::FlushCauseScope cause(device::FlushCause::kDataDependent);
    flags = flags.cpu();
    const bool* f = flags.const_data_ptr<bool>();
    // CPU's messages: its fast path (no replacement, or one sample) checks every element at
    // once; sampling with replacement names the first kind of bad entry it meets.
    if (!replacement || n_sample == 1) {
      TORCH_CHECK(!f[0] && !f[1], "multinomial: probability tensor contains either `inf`, `nan` or element < 0");
    } else {
      TORCH_CHECK(!f[0], "multinomial: invalid multinomial distribution (encountering probability entry < 0)");
      TORCH_CHECK(!f[1], "multinomial: invalid multinomial distribution (encountering probability entry = "
                         "infinity or NaN)");
    }
    TORCH_CHECK(!f[2], "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
  }
  exec::run_lowered(op, stack);
}

bool equal(const at::Tensor& self, const at::Tensor& other) {
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

namespace {

// `x[mask] = v`: index_put with one bool mask over x's leading dims and a single value. The
// lowering makes it a select (lowering/indexing.py, _masked_fill_put), with no host read.
bool is_masked_fill_put(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t nargs,
                        const c10::List<std::optional<at::Tensor>>& list) {
  if (op.schema().name() == "aten::index" || list.size() != 1) return false;
  const std::optional<at::Tensor> mask = list.get(0);
  const c10::IValue& self_iv = stack[stack.size() - nargs];
  const c10::IValue& values_iv = stack[stack.size() - nargs + 2];
  if (!mask.has_value() || !mask->defined() || mask->scalar_type() != c10::kBool || !self_iv.isTensor() ||
      !values_iv.isTensor()) {
    return false;
  }
  const at::Tensor& self = self_iv.toTensor();
  const at::Tensor& values = values_iv.toTensor();
  return mask->dim() <= self.dim() && self.sizes().slice(0, mask->dim()).equals(mask->sizes()) && values.numel() == 1 &&
         values.dim() <= self.dim() - mask->dim();
}

// CPU's check (expandTensors) that a mask's dims match the indexed tensor's, starting at dim
// `first`; dims past the tensor's rank are left to the lowering's "too many indices".
void check_mask_shape(const at::Tensor& self, const at::Tensor& mask, int64_t first) {
  for (int64_t j = 0; j < mask.dim() && first + j < self.dim(); ++j) {
    TORCH_CHECK_INDEX(mask.size(j) == self.size(first + j), "The shape of the mask ", mask.sizes(), " at index ", j,
                      " does not match the shape of the indexed tensor ", self.sizes(), " at index ", first + j);
  }
}

// CPU turns a plain (not accumulating) put of one value through one mask into masked_fill_
// (canDispatchToMaskedFill), which converts the value to self's dtype; any other index_put
// requires the dtypes to match (the lowering's check). Converting here keeps that difference
// once the mask has become integer indices.
void put_mask_value_as_masked_fill(torch::jit::Stack& stack, size_t nargs,
                                   const c10::List<std::optional<at::Tensor>>& list) {
  const c10::IValue& accumulate = stack[stack.size() - nargs + 3];
  c10::IValue& values_iv = stack[stack.size() - nargs + 2];
  const c10::IValue& self_iv = stack[stack.size() - nargs];
  if ((accumulate.isBool() && accumulate.toBool()) || !values_iv.isTensor() || !self_iv.isTensor()) return;
  int defined = 0;
  bool mask = false;
  for (size_t i = 0; i < list.size(); ++i) {
    std::optional<at::Tensor> t = list.get(i);
    if (!t.has_value() || !t->defined()) continue;
    ++defined;
    mask = t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte;
  }
  const at::Tensor& values = values_iv.toTensor();
  const at::Tensor& self = self_iv.toTensor();
  if (defined == 1 && mask && values.numel() == 1 && values.scalar_type() != self.scalar_type()) {
    values_iv = c10::IValue(values.to(self.scalar_type()));
  }
}

}  // namespace

// index.Tensor / index_put_ with boolean masks: replace each k-dim mask by the k index tensors
// of its nonzero positions (the sync), then lower the integer-indexed op as usual; a mask
// filled with one value needs no positions (is_masked_fill_put).
void index_with_masks(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  c10::IValue& list_iv = (*stack)[stack->size() - nargs + 1];
  auto list = list_iv.toOptionalTensorList();
  // Index tensors may live on the CPU (as CUDA allows: `t[torch.tensor([2, 0])]`, nn.init.sparse_):
  // they are copied to the indexed tensor's device.
  const at::Tensor self = (*stack)[stack->size() - nargs].toTensor();
  const at::Device device = self.device();
  bool on_cpu = false;
  for (size_t i = 0; i < list.size(); ++i) {
    std::optional<at::Tensor> t = list.get(i);
    on_cpu = on_cpu || (t.has_value() && t->defined() && t->device().is_cpu());
  }
  if (on_cpu) {
    c10::List<std::optional<at::Tensor>> moved;
    for (size_t i = 0; i < list.size(); ++i) {
      std::optional<at::Tensor> t = list.get(i);
      moved.push_back(t.has_value() && t->defined() && t->device().is_cpu() ? std::optional(t->to(device)) : t);
    }
    list_iv = c10::IValue(moved);
    list = list_iv.toOptionalTensorList();
  }
  const bool is_put = op.schema().name() != "aten::index";
  if (is_put) put_mask_value_as_masked_fill(*stack, nargs, list);
  if (is_masked_fill_put(op, *stack, nargs, list)) {
    exec::run_lowered(op, stack);
    return;
  }
  bool has_mask = false;
  for (size_t i = 0; i < list.size(); ++i) {
    std::optional<at::Tensor> t = list.get(i);
    if (t.has_value() && t->defined() && (t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte)) has_mask = true;
  }
  if (has_mask) {
    c10::List<std::optional<at::Tensor>> converted;
    for (size_t i = 0; i < list.size(); ++i) {
      std::optional<at::Tensor> t = list.get(i);
      if (t.has_value() && t->defined() && (t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte)) {
        check_mask_shape(self, *t, static_cast<int64_t>(converted.size()));
        at::Tensor mask = t->scalar_type() == c10::kByte ? t->to(c10::kBool) : *t;
        at::Tensor idx = torch_tpu::aten::nonzero(mask);  // [n, k]
        for (int64_t d = 0; d < mask.dim(); ++d) converted.push_back(idx.select(1, d));
        if (mask.dim() == 0) converted.push_back(idx.reshape({-1}));  // a 0-d mask adds a dim
      } else {
        converted.push_back(t);
      }
    }
    list_iv = c10::IValue(converted);
  }
  exec::run_lowered(op, stack);
}

}  // namespace torch_tpu::aten

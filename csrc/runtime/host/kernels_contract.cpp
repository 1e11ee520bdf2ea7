// Contractions: dot_general as one batched matmul after permute+reshape (the reference's
// recipe); convolution through ATen's convolution kernels.
//
// Convolution: the IR has one op (a cross-correlation with lhs/rhs dilation and edge padding),
// so the lowering expresses a convolution's two gradients as convolutions too
// (torch_tpu/lowering/nn_conv.py). Run literally, both are slow on CPU: the input gradient of a
// strided convolution convolves a zero-dilated grad_output (stride^2 times the work, plus the
// zero fill), and the weight gradient is a convolution whose "kernel" is the whole grad_output
// image over transposed operands (copied to be contiguous first). The kernel recognizes both
// shapes from the node's attributes alone and runs ATen's own kernels for them:
// * lhs dilation with unit window strides = a transposed convolution: at::convolution with
//   transposed=true on the kernel un-flipped (the flip and channel swap are the lowering's);
// * a "kernel" larger than the output = a weight gradient: at::convolution_backward asking for
//   the weight only, on the operands transposed back (views of the original tensors).
// Each rewrite is exact (same sums; only the accumulation order differs) and applies only when
// its padding/output-size identities hold; anything else takes the literal path, which
// materializes lhs dilation and asymmetric/negative padding that at::convolution cannot express.
//
// Layout: oneDNN runs a 2-d convolution on channels-last (NHWC) memory without the reorders to
// and from its blocked layout that NCHW operands take (batch 8, 16-64 channels, two threads:
// 1.2-1.7x faster). The literal form runs channels-last when its input already is, or when its
// input is a program parameter and its result has no destination (it stays inside the
// program) or a channels-last one (a compiled forward's saved activation). Fused clusters
// (tile_cluster.h) keep that layout through batch norm and ReLU to the next convolution, so only
// the first one converts. A result bound to an NCHW program output keeps the NCHW path
// (strict mode: one op per program), and so does an NCHW input computed inside the program:
// its producer mixed NCHW values (a backward pass reading saved activations), and converting
// it there made a SmallResNet training step 4-5% slower.
#include <dlfcn.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "common/check.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"
#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

// MKL's batched float GEMM, which libtorch_cpu exports where PyTorch is built with MKL (null
// elsewhere): one call for a group of products, each read in place through its own pointer and
// leading dimension. CBLAS layout and transpose arguments are C enums (int-sized).
using SgemmBatch = void (*)(int layout, const int* transa, const int* transb, const int* m, const int* n, const int* k,
                            const float* alpha, const float** a, const int* lda, const float** b, const int* ldb,
                            const float* beta, float** c, const int* ldc, int group_count, const int* group_size);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

SgemmBatch sgemm_batch() {
  static const auto fn = reinterpret_cast<SgemmBatch>(dlsym(RTLD_DEFAULT, "cblas_sgemm_batch"));
  return fn;
}

// How BLAS reads a [rows, cols] matrix with strides (sr, sc) in place: row-major with leading
// dimension ld (no transpose), or its transpose stored row-major; false when neither stride
// is a unit one (or a leading dimension would not fit an int).
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int* trans, int* ld) {
  auto fits = [](int64_t v) { return v <= std::numeric_limits<int>::max(); };
  if ((sc == 1 || cols == 1) && (rows == 1 || sr >= std::max<int64_t>(cols, 1)) && fits(sr) && fits(cols)) {
    *trans = kCblasNoTrans;
    *ld = static_cast<int>(rows == 1 ? std::max<int64_t>(cols, 1) : sr);
    return true;
  }
  if ((sr == 1 || rows == 1) && (cols == 1 || sc >= std::max<int64_t>(rows, 1)) && fits(sc) && fits(rows)) {
    *trans = kCblasTrans;
    *ld = static_cast<int>(cols == 1 ? std::max<int64_t>(rows, 1) : sc);
    return true;
  }
  return false;
}

// Batched float products whose operands are views [batch..., M, K] and [batch..., K, N] (any
// batch strides, a unit stride in one dim of each matrix), into res [B, M, N] (contiguous):
// one MKL call per block of the batch, reading the operands where they lie. Attention's
// q @ k^T and p @ v over [batch, heads, seq, dim] views of a projection are such products;
// reshaped to [B, M, K] they were copied first (their batch dims do not merge) and then each
// multiplied by its own gemm call. TinyGPT attention, CPU time per product: [8, 4, 32, 32]
// 46 -> 19 µs, [8, 4, 32, 16] 27 -> 15 µs. False (nothing done) where MKL or a usable layout
// is missing.
// res [batch..., M, N] may be any layout whose rows are unit-stride (a product written in the
// layout its transposing reader wants, product_layouts in kernels.h).
bool batched_sgemm_in_place(const at::Tensor& res, const at::Tensor& lhs, const at::Tensor& rhs) {
  const SgemmBatch gemm = sgemm_batch();
  const int64_t r = lhs.dim();
  if (gemm == nullptr || r < 3 || res.dim() != r || lhs.scalar_type() != at::kFloat ||
      rhs.scalar_type() != at::kFloat || res.scalar_type() != at::kFloat) {
    return false;
  }
  const int64_t M = lhs.size(r - 2), K = lhs.size(r - 1), N = rhs.size(r - 1);
  const int64_t ldc64 = M == 1 ? N : res.stride(r - 2);
  int ta, tb, lda, ldb;
  if (M == 0 || N == 0 || K == 0 || !blas_layout(M, K, lhs.stride(r - 2), lhs.stride(r - 1), &ta, &lda) ||
      !blas_layout(K, N, rhs.stride(r - 2), rhs.stride(r - 1), &tb, &ldb) || (res.stride(r - 1) != 1 && N > 1) ||
      ldc64 < N || std::max({M, N, K, ldc64}) > std::numeric_limits<int>::max()) {
    return false;
  }
  const int64_t B = res.numel() / (M * N);
  if (B == 0) return true;  // nothing to compute
  const float* a0 = lhs.const_data_ptr<float>();
  const float* b0 = rhs.const_data_ptr<float>();
  float* c0 = res.mutable_data_ptr<float>();
  auto block = [&](int64_t lo, int64_t hi) {
    // Pointers per matrix, in per-thread buffers reused across calls (no allocation per product).
    thread_local std::vector<const float*> as, bs;
    thread_local std::vector<float*> cs;
    as.resize(static_cast<size_t>(hi - lo));
    bs.resize(as.size());
    cs.resize(as.size());
    for (int64_t i = lo; i < hi; ++i) {
      int64_t oa = 0, ob = 0, oc = 0;
      for (int64_t d = r - 3, rest = i; d >= 0; --d) {  // batch index i -> its offsets
        const int64_t idx = rest % lhs.size(d);
        rest /= lhs.size(d);
        oa += idx * lhs.stride(d);
        ob += idx * rhs.stride(d);
        oc += idx * res.stride(d);
      }
      as[i - lo] = a0 + oa;
      bs[i - lo] = b0 + ob;
      cs[i - lo] = c0 + oc;
    }
    const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K), ldc = static_cast<int>(ldc64);
    const int count = static_cast<int>(hi - lo);
    const float alpha = 1.f, beta = 0.f;
    gemm(kCblasRowMajor, &ta, &tb, &m, &n, &k, &alpha, as.data(), &lda, bs.data(), &ldb, &beta, cs.data(), &ldc, 1,
         &count);
  };
  const int64_t macs = B * M * N * K / kMultiplyAddsPerElement;
  if (const int parts = split_parts(macs, B); parts > 1) {
    run_split_rows(parts, B, block);
  } else {
    block(0, B);
  }
  return true;
}

// A float matrix in place for BLAS: element (i, j) at data + i * row_stride + j * col_stride,
// one of the strides a unit one (blas_layout's trans and ld).
struct FloatMatrix {
  const float* data;
  int64_t rows, cols, row_stride, col_stride;
  int trans, ld;
  FloatMatrix transposed() const {
    FloatMatrix t{data, cols, rows, col_stride, row_stride, 0, 0};
    blas_layout(t.rows, t.cols, t.row_stride, t.col_stride, &t.trans, &t.ld);
    return t;
  }
};

// x (float) permuted by perm, its first `split` dims merged into rows and the rest into columns,
// as a matrix read in place; false where a group's dims do not merge into one stride (the
// product then reshapes through ATen, which copies) or neither stride is a unit one.
bool float_matrix(const at::Tensor& x, const std::vector<int64_t>& perm, size_t split, FloatMatrix& m) {
  int64_t size[2] = {1, 1}, stride[2] = {1, 1};
  for (int group = 0; group < 2; ++group) {
    const size_t lo = group == 0 ? 0 : split, hi = group == 0 ? split : perm.size();
    bool first = true;
    int64_t expect = 0;
    for (size_t i = hi; i-- > lo;) {  // innermost dim first
      const int64_t sz = x.size(perm[i]), st = x.stride(perm[i]);
      if (sz == 1) continue;
      if (first) {
        stride[group] = st;
        first = false;
      } else if (st != expect) {
        return false;
      }
      expect = st * sz;
      size[group] *= sz;
    }
  }
  m = {x.const_data_ptr<float>(), size[0], size[1], stride[0], stride[1], 0, 0};
  return blas_layout(m.rows, m.cols, m.row_stride, m.col_stride, &m.trans, &m.ld);
}

// c [a.rows, b.cols] (row-major, leading dimension ldc) = a @ b, through MKL without ATen's
// dispatch (in a program's run an ATen mm_out cost ~3x its time in a warm loop). Rows split
// across the kernel threads when large; row_bias (float [N], or null) is added to each block's
// rows right after its product, while they are in cache. False (nothing done) without MKL.
bool float_matmul(float* c, int64_t ldc, const FloatMatrix& a, const FloatMatrix& b, const float* row_bias) {
  const SgemmBatch gemm = sgemm_batch();
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (gemm == nullptr || std::max({M, N, K, ldc}) > std::numeric_limits<int>::max()) return false;
  if (M == 0 || N == 0) return true;
  auto block = [&](int64_t lo, int64_t hi) {
    const float *ap = a.data + lo * a.row_stride, *bp = b.data;
    float* cp = c + lo * ldc;
    const int m = static_cast<int>(hi - lo), n = static_cast<int>(N), k = static_cast<int>(K),
              ldc_int = static_cast<int>(ldc), one = 1;
    const float alpha = 1.f, beta = 0.f;
    if (K == 0) {
      for (int64_t i = 0; i < m; ++i) std::fill_n(cp + i * ldc, N, 0.f);
    } else {
      gemm(kCblasRowMajor, &a.trans, &b.trans, &m, &n, &k, &alpha, &ap, &a.ld, &bp, &b.ld, &beta, &cp, &ldc_int, 1,
           &one);
    }
    if (row_bias != nullptr) {
      for (int64_t i = 0; i < hi - lo; ++i) add_into(cp + i * ldc, row_bias, N);
    }
  };
  const int parts = split_parts(M * N * K / kMultiplyAddsPerElement, M);
  if (parts <= 1) {
    block(0, M);
  } else {
    run_split_rows(parts, M, block);
  }
  return true;
}

// res [B, M, N] (contiguous) = lhs [B, M, K] @ rhs [B, K, N]. A large product is split across
// the kernel threads (kernel_threads.h) by batch, or by rows of a single matrix: each part is an
// ordinary BLAS call on a block of rows (the same dot products; MKL gave equal bits either way
// for the shapes we checked, but nothing promises it).
// Plain matrix products go to mm (strided operands straight to BLAS), which beats a batch of one.
void matmul_into(const at::Tensor& res, const at::Tensor& lhs, const at::Tensor& rhs) {
  const int64_t B = res.size(0), M = res.size(1), N = res.size(2), K = lhs.size(2);
  if (B == 0) return;  // no matrices (rows below would count M of them)
  const int64_t rows = B > 1 ? B : M;
  const int parts = split_parts(B * M * N * K / kMultiplyAddsPerElement, rows);
  auto block = [&](int64_t lo, int64_t hi) {
    if (B == 1) {
      at::Tensor r2 = res.select(0, 0).narrow(0, lo, hi - lo);
      at::mm_out(r2, lhs.select(0, 0).narrow(0, lo, hi - lo), rhs.select(0, 0));
    } else {
      at::Tensor r3 = res.narrow(0, lo, hi - lo);
      at::bmm_out(r3, lhs.narrow(0, lo, hi - lo), rhs.narrow(0, lo, hi - lo));
    }
  };
  if (parts <= 1) return block(0, rows);
  run_split_rows(parts, rows, block);
}

// A result of `shape` whose rows (dim 0) are independent, computed by rows(lo, hi) (rows [lo,
// hi) of it). With enough multiply-adds (kMultiplyAddsPerElement), the rows are split across
// the kernel threads, each block computed by its own call and copied into place: into the
// step's destination `out` when it has the result's dtype and layout (the executor then
// copies nothing), else into a new tensor.
at::Tensor split_rows(const std::vector<int64_t>& shape, const at::TensorOptions& options, int64_t multiply_adds,
                      const std::function<at::Tensor(int64_t, int64_t)>& rows, const at::Tensor* out = nullptr) {
  const int64_t n = shape[0];
  const int parts = split_parts(multiply_adds / kMultiplyAddsPerElement, n);
  if (parts <= 1) return rows(0, n);
  const at::MemoryFormat format = options.memory_format_opt().value_or(at::MemoryFormat::Contiguous);
  const bool into_out = out != nullptr && out->sizes().equals(shape) && out->scalar_type() == options.dtype() &&
                        out->is_contiguous(format);
  at::Tensor y = into_out ? *out : at::empty(shape, options);
  run_split_rows(parts, n, [&](int64_t lo, int64_t hi) { y.narrow(0, lo, hi - lo).copy_(rows(lo, hi)); });
  return y;
}

// form: a bias epilogue and a memory order for the result (kernels.h, ProductForm).
Kernel dot_general_kernel(const ir::Graph& g, const ir::Node& n, const ProductForm& form = {}) {
  const int32_t l = n.operands[0], r = n.operands[1];
  const bool biased = n.operands.size() > 2;
  const int32_t bias = biased ? n.operands[2] : -1;
  std::vector<int64_t> bias_view(n.shape.size(), 1);  // the bias's shape with the result's rank
  for (size_t k = 0; biased && k < form.bias_dims.size(); ++k) {
    bias_view[static_cast<size_t>(form.bias_dims[k])] = g.node(bias).shape[k];
  }
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
  // A float bias along the last dim, which is N (one rhs free dim): added row by row after
  // each block's product.
  const bool row_bias = biased && n.dtype == ir::DType::kF32 && rf.size() == 1 &&
                        form.bias_dims == std::vector<int64_t>{static_cast<int64_t>(shape.size()) - 1};
  const bool integer = !ir::is_float(n.dtype);
  // One free and one contracting dim per side, under batch dims: matrices read in place.
  const bool batched = nb > 0 && lf.size() == 1 && rf.size() == 1 && nc == 1;
  // Strides that lay the result out in form.order (row-major in it); empty: row-major.
  std::vector<int64_t> ordered_strides(form.order.size());
  for (size_t i = form.order.size(), step = 1; i-- > 0;) {
    const auto d = static_cast<size_t>(form.order[i]);
    ordered_strides[d] = static_cast<int64_t>(step);
    step *= static_cast<size_t>(std::max<int64_t>(n.shape[d], 1));
  }
  return [=](const Values& v, at::Tensor* out) {
    if (integer) {
      // Exact: int64 products and sums wrap mod 2^64, so narrowing afterwards equals
      // arithmetic in the narrow type.
      at::Tensor lhs = v[l].permute(lperm).reshape({B, M, K}), rhs = v[r].permute(rperm).reshape({B, K, N});
      return at::bmm(lhs.to(at::kLong), rhs.to(at::kLong)).to(dtype).reshape(shape);
    }
    // A transposed matrix destination (a weight gradient's [out, in] written as the product
    // [in, out] transposed, ViewRoute in executor.h) is one BLAS can write in place too.
    const bool transposed_out = out && B == 1 && out->dim() == 2 && out->stride(0) == 1 && out->stride(1) == M;
    // A batched product writes any destination whose rows are unit-stride (an output it is lent
    // through a transpose, ViewRoute), as batched_sgemm_in_place does its own laid-out result.
    const bool direct = out && out->scalar_type() == v[l].scalar_type() &&
                        (out->is_contiguous() || transposed_out || (batched && out->stride(-1) == 1));
    at::Tensor result = direct                    ? *out
                        : ordered_strides.empty() ? at::empty(shape, v[l].options())
                                                  : at::empty_strided(shape, ordered_strides, v[l].options());
    // Float products without batch dims whose operands are matrices in place: straight to MKL.
    FloatMatrix lm, rm;
    if (nb == 0 && (bias < 0 || row_bias) && dtype == at::kFloat && v[l].scalar_type() == at::kFloat &&
        v[r].scalar_type() == at::kFloat && float_matrix(v[l], lperm, lf.size(), lm) &&
        float_matrix(v[r], rperm, rc.size(), rm)) {
      const at::Tensor b = row_bias ? v[bias].contiguous() : at::Tensor();  // held while the product runs
      float* c = result.mutable_data_ptr<float>();
      if (result.is_contiguous() && float_matmul(c, N, lm, rm, b.defined() ? b.const_data_ptr<float>() : nullptr)) {
        return result;
      }
      // Written transposed: C^T = rhs^T @ lhs^T, row-major [N, M].
      if (transposed_out && bias < 0 && float_matmul(c, M, rm.transposed(), lm.transposed(), nullptr)) {
        return result;
      }
    }
    if (!batched || !batched_sgemm_in_place(result, v[l].permute(lperm), v[r].permute(rperm))) {
      at::Tensor dense = result.is_contiguous() ? result : at::empty(shape, v[l].options());
      matmul_into(dense.view({B, M, N}), v[l].permute(lperm).reshape({B, M, K}),
                  v[r].permute(rperm).reshape({B, K, N}));
      if (!dense.is_same(result)) copy_into(result, dense);
    }
    if (bias >= 0) result.add_(v[bias].reshape(bias_view).expand(shape));
    return result;
  };
}

// Transposed-convolution form of an IR convolution with lhs dilation (see the file comment):
// conv(dilate(x, s), flip_swap(W), lo = d*(k-1) - p, hi = lo + op) == conv_transpose(x, W, s, p,
// op, d). Empty when the identity does not apply (window strides, negative p, ATen's
// output_padding < max(stride, dilation) rule).
struct TransposedForm {
  std::vector<int64_t> stride, padding, output_padding;
};
std::optional<TransposedForm> transposed_form(const std::vector<int64_t>& k, const std::vector<int64_t>& strides,
                                              const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                                              const std::vector<int64_t>& ldil, const std::vector<int64_t>& rdil) {
  TransposedForm f;
  bool any_dilation = false;
  for (size_t d = 0; d < k.size(); ++d) {
    const int64_t p = rdil[d] * (k[d] - 1) - lo[d], op = hi[d] - lo[d];
    if (strides[d] != 1 || p < 0 || op < 0 || op >= std::max(ldil[d], rdil[d])) return std::nullopt;
    any_dilation |= ldil[d] > 1;
    f.stride.push_back(ldil[d]);
    f.padding.push_back(p);
    f.output_padding.push_back(op);
  }
  if (!any_dilation) return std::nullopt;
  return f;
}

// Weight-gradient form of an IR convolution (see the file comment): out [C/g, O, *k] of
// lhs [C/g, g*N, *sp] and rhs [O, N, *sp'] is the weight gradient [O, C/g, *k] (transposed)
// of conv(x [N, C, *sp], w, stride = rhs dilation, padding = lo, dilation = window strides),
// provided that forward convolution's output size is sp'. Taken only when the "kernel" sp'
// has more elements than the output (a forward convolution's kernel rarely does) and there
// is no lhs dilation.
struct WeightGradForm {
  std::vector<int64_t> stride, padding, dilation;
};
std::optional<WeightGradForm> weight_grad_form(const std::vector<int64_t>& sp, const std::vector<int64_t>& kernel,
                                               const std::vector<int64_t>& out, const std::vector<int64_t>& strides,
                                               const std::vector<int64_t>& lo, const std::vector<int64_t>& ldil,
                                               const std::vector<int64_t>& rdil) {
  int64_t kernel_elems = 1, out_elems = 1;
  WeightGradForm f;
  for (size_t d = 0; d < sp.size(); ++d) {
    kernel_elems *= kernel[d];
    out_elems *= out[d];
    const int64_t span = sp[d] + 2 * lo[d] - strides[d] * (out[d] - 1) - 1;
    if (ldil[d] != 1 || lo[d] < 0 || span < 0 || span / rdil[d] + 1 != kernel[d]) return std::nullopt;
    f.stride.push_back(rdil[d]);
    f.padding.push_back(lo[d]);
    f.dilation.push_back(strides[d]);
  }
  if (kernel_elems <= out_elems) return std::nullopt;
  return f;
}

// Multiply-adds of a convolution: each output element reads rhs's [C/g, *kernel] window; lhs
// dilation's zeros are not computed by the rewritten forms, hence the division.
int64_t convolution_macs(const ir::Graph& g, const ir::Node& n) {
  const ir::Node& rn = g.node(n.operands[1]);
  const size_t k = n.iattrs.at(0);
  int64_t macs = c10::multiply_integers(n.shape) * c10::multiply_integers(rn.shape.begin() + 1, rn.shape.end());
  for (int64_t d : attr_slice(n, 1 + 3 * k, k)) macs /= std::max<int64_t>(d, 1);
  return macs;
}

// Multiply-adds of a dot_general: each output element sums over the contracting dims.
int64_t dot_general_macs(const ir::Graph& g, const ir::Node& n) {
  const size_t nb = n.iattrs[0], nc = n.iattrs[1 + 2 * nb];
  const ir::Node& lhs = g.node(n.operands[0]);
  int64_t k = 1;
  for (int64_t d : attr_slice(n, 2 + 2 * nb, nc)) k *= lhs.shape[d];
  return c10::multiply_integers(n.shape) * k;
}

// unflipped: the rhs value is the weight before the lowering's flip (absorb_weight_flips); the
// node shapes are still the flipped ones.
Kernel convolution_kernel(const ir::Graph& g, const ir::Node& n, bool unflipped = false) {
  const int32_t l = n.operands[0], r = n.operands[1];
  const ir::Node &ln = g.node(l), &rn = g.node(r);
  const size_t k = n.iattrs.at(0);
  std::vector<int64_t> strides = attr_slice(n, 1, k), lo = attr_slice(n, 1 + k, k), hi = attr_slice(n, 1 + 2 * k, k),
                       ldil = attr_slice(n, 1 + 3 * k, k), rdil = attr_slice(n, 1 + 4 * k, k);
  const int64_t groups = n.iattrs.back();
  const at::ScalarType dtype = to_aten(n.dtype);
  const bool upcast = dtype == at::kHalf || dtype == at::kBFloat16;  // as the reference does
  auto operands = [=](const Values& v) {
    at::Tensor t = v[l], w = v[r];
    if (upcast) {
      t = t.to(at::kFloat);
      w = w.to(at::kFloat);
    }
    return std::make_pair(t, w);
  };
  auto result = [=](const at::Tensor& y) { return upcast ? y.to(dtype) : y; };
  const std::vector<int64_t> sp(ln.shape.begin() + 2, ln.shape.end()), kernel(rn.shape.begin() + 2, rn.shape.end()),
      out(n.shape.begin() + 2, n.shape.end());
  const std::vector<int64_t> result_shape = n.shape;
  const int64_t macs = convolution_macs(g, n);

  if (auto f = transposed_form(kernel, strides, lo, hi, ldil, rdil)) {
    // Un-flip the kernel: reverse spatially, swap in/out channels within each group.
    const int64_t o = rn.shape[0], c = ln.shape[1];
    std::vector<int64_t> flip_dims, grouped = {groups, o / groups, c / groups}, swapped = {c, o / groups};
    for (size_t d = 0; d < k; ++d) {
      flip_dims.push_back(static_cast<int64_t>(2 + d));
      grouped.push_back(kernel[d]);
      swapped.push_back(kernel[d]);
    }
    return [=](const Values& v, at::Tensor* out) {
      auto [t, w] = operands(v);
      at::Tensor wt = unflipped ? w : at::flip(w, flip_dims).reshape(grouped).transpose(1, 2).reshape(swapped);
      // Images of the batch are independent: split by batch, blocks gathered in the layout
      // oneDNN returns them in (its input's).
      auto images = [&](int64_t lo, int64_t hi) {
        return at::convolution(t.narrow(0, lo, hi - lo), wt, std::nullopt, f->stride, f->padding, rdil,
                               /*transposed=*/true, f->output_padding, groups);
      };
      const auto format = channels_last_format(t).value_or(at::MemoryFormat::Contiguous);
      return result(split_rows(result_shape, t.options().memory_format(format), macs, images, upcast ? nullptr : out));
    };
  }
  if (auto f = weight_grad_form(sp, kernel, out, strides, lo, ldil, rdil)) {
    const int64_t cg = ln.shape[0], nb = rn.shape[1], o = rn.shape[0];
    std::vector<int64_t> split = {cg, groups, nb}, merged = {nb, groups * cg}, perm = {2, 1, 0}, weight = {o, cg};
    for (size_t d = 0; d < k; ++d) {
      split.push_back(sp[d]);
      merged.push_back(sp[d]);
      perm.push_back(static_cast<int64_t>(3 + d));
      weight.push_back(out[d]);
    }
    return [=](const Values& v, at::Tensor*) {
      auto [t, go] = operands(v);
      // The lowering built lhs and rhs as transposes of the forward's input and grad_output:
      // transposing back gives those tensors' own (usually contiguous) memory.
      at::Tensor x = groups == 1 ? t.transpose(0, 1) : t.reshape(split).permute(perm).reshape(merged);
      at::Tensor g_out = go.transpose(0, 1);
      auto grad_of_images = [&](int64_t lo, int64_t hi) {  // the sum over images [lo, hi)
        at::Tensor w = at::empty(weight, x.options());     // only its sizes are read
        return std::get<1>(at::convolution_backward(
            g_out.narrow(0, lo, hi - lo), x.narrow(0, lo, hi - lo), w, std::nullopt, f->stride, f->padding, f->dilation,
            /*transposed=*/false, std::vector<int64_t>(k, 0), groups, {false, true, false}));
      };
      // Split by images, summing the parts' gradients: each part reads only its images (split
      // by output channels, both would reorder the whole input: 1.7x the work, against 1.35x).
      const int64_t images = x.size(0);
      const int parts = split_parts(macs / kMultiplyAddsPerElement, images);
      at::Tensor grad;
      if (parts <= 1) {
        grad = grad_of_images(0, images);
      } else {
        std::vector<at::Tensor> partial(static_cast<size_t>(parts));
        run_split(parts, [&](int part) {
          partial[static_cast<size_t>(part)] = grad_of_images(images * part / parts, images * (part + 1) / parts);
        });
        grad = partial[0];
        for (size_t p = 1; p < partial.size(); ++p) grad.add_(partial[p]);
      }
      return result(grad.transpose(0, 1));
    };
  }

  // Literal form. lhs dilation: a zero tensor of the dilated size, with the input at stride ldil.
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
  const bool may_be_channels_last = k == 2 && !dilate && !explicit_pad && !upcast;
  const bool input_is_parameter = ln.kind == OpKind::kParameter;
  return [=](const Values& v, at::Tensor* out) {
    auto [t, w] = operands(v);
    // Channels-last (see the file comment): when the input already is, or when it is the
    // program's input and the result stays inside the program or goes to channels-last memory.
    const bool channels_last =
        may_be_channels_last &&
        (channels_last_format(t) || (input_is_parameter && (out == nullptr || channels_last_format(*out))));
    if (channels_last) t = t.contiguous(at::MemoryFormat::ChannelsLast);
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
    const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    auto images = [&](int64_t lo, int64_t hi) {
      return at::convolution(t.narrow(0, lo, hi - lo), w, std::nullopt, strides, conv_pad, rdil,  // images lo..hi
                             /*transposed=*/false, out_pad, groups);
    };
    return result(split_rows(result_shape, t.options().memory_format(format), macs, images, upcast ? nullptr : out));
  };
}

}  // namespace

namespace {

// Whether reverse node r is _flip_weight's chain over a weight for convolution n in the
// transposed form, each link read only by the next and no output: the weight's node, or -1.
int32_t flipped_weight(const ir::Graph& g, const ir::Node& n, int32_t r, const std::vector<int32_t>& readers,
                       const std::vector<bool>& keep) {
  auto sole = [&](int32_t id, OpKind kind) {
    return g.node(id).kind == kind && readers[static_cast<size_t>(id)] == 1 &&
           !(static_cast<size_t>(id) < keep.size() && keep[static_cast<size_t>(id)]);
  };
  const size_t k = n.iattrs.at(0);
  const int64_t groups = n.iattrs.back();
  const ir::Node& rn = g.node(r);
  std::vector<int64_t> spatial_dims, swap_perm = {0, 2, 1};
  for (size_t d = 0; d < k; ++d) {
    spatial_dims.push_back(static_cast<int64_t>(2 + d));
    swap_perm.push_back(static_cast<int64_t>(3 + d));
  }
  if (!sole(r, OpKind::kReverse) || rn.iattrs != spatial_dims || rn.rank() != static_cast<int64_t>(k) + 2 ||
      groups <= 0 || rn.shape[0] % groups != 0) {
    return -1;
  }
  const std::vector<int64_t> kernel(rn.shape.begin() + 2, rn.shape.end());
  if (!transposed_form(kernel, attr_slice(n, 1, k), attr_slice(n, 1 + k, k), attr_slice(n, 1 + 2 * k, k),
                       attr_slice(n, 1 + 3 * k, k), attr_slice(n, 1 + 4 * k, k))) {
    return -1;
  }
  const int64_t cg = rn.shape[0] / groups, ci = rn.shape[1];
  auto with_kernel = [&](std::vector<int64_t> lead) {
    lead.insert(lead.end(), kernel.begin(), kernel.end());
    return lead;
  };
  const int32_t a = rn.operands[0];
  if (!sole(a, OpKind::kReshape)) return -1;
  const int32_t b = g.node(a).operands[0];
  if (!sole(b, OpKind::kTranspose) || g.node(b).iattrs != swap_perm) return -1;
  const int32_t c = g.node(b).operands[0];
  if (!sole(c, OpKind::kReshape) || g.node(c).shape != with_kernel({groups, ci, cg})) return -1;
  const int32_t w = g.node(c).operands[0];
  const ir::Node& wn = g.node(w);
  if (wn.shape != with_kernel({groups * ci, cg}) || wn.dtype != rn.dtype) return -1;
  return w;
}

}  // namespace

ir::Graph absorb_weight_flips(const ir::Graph& graph, const std::vector<bool>& keep,
                              std::unordered_set<int32_t>& rewritten) {
  const std::vector<int32_t> readers = reader_counts(graph);
  std::vector<int32_t> weight_of(static_cast<size_t>(graph.size()), -1);  // per reverse node
  for (int32_t i = 0; i < graph.size(); ++i) {
    const ir::Node& n = graph.node(i);
    if (n.kind != OpKind::kConvolution) continue;
    const int32_t r = n.operands[1];
    const int32_t w = flipped_weight(graph, n, r, readers, keep);
    if (w < 0) continue;
    weight_of[static_cast<size_t>(r)] = w;
    rewritten.insert(r);
    rewritten.insert(i);
  }
  if (rewritten.empty()) return graph;
  ir::Graph out;
  out.reserve(static_cast<size_t>(graph.size()));
  for (int32_t i = 0; i < graph.size(); ++i) {
    ir::Node node = graph.node(i);
    if (weight_of[static_cast<size_t>(i)] >= 0) node.operands = {weight_of[static_cast<size_t>(i)]};
    out.add(std::move(node));
  }
  return out;
}

Kernel make_unflipped_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind == OpKind::kConvolution) return convolution_kernel(g, n, /*unflipped=*/true);
  const int32_t w = n.operands.at(0);
  return [w](const Values& v, at::Tensor*) { return v[w]; };  // the reverse: the weight itself
}

ir::Graph absorb_bias_adds(const ir::Graph& graph, const std::vector<bool>& keep, ProductForms& forms) {
  const std::vector<int32_t> readers = reader_counts(graph);
  std::vector<std::pair<int32_t, int32_t>> rewrite;  // (add node, its product operand), in node order
  for (int32_t i = 0; i < graph.size(); ++i) {
    const ir::Node& n = graph.node(i);
    if (n.kind != OpKind::kAdd || !ir::is_float(n.dtype)) continue;
    for (size_t side = 0; side < 2; ++side) {
      const int32_t d = n.operands[side], e = n.operands[1 - side];
      const ir::Node &dn = graph.node(d), &en = graph.node(e);
      const bool product = dn.kind == OpKind::kDotGeneral && dn.operands.size() == 2 && readers[d] == 1 && !keep[d] &&
                           dn.dtype == n.dtype && graph.node(dn.operands[0]).dtype == n.dtype;
      const bool bias = en.kind == OpKind::kBroadcastInDim && graph.node(en.operands[0]).dtype == n.dtype &&
                        std::is_sorted(en.iattrs.begin(), en.iattrs.end(), std::less_equal<>());  // increasing
      if (product && bias) {
        rewrite.emplace_back(i, d);
        forms[i].bias_dims = en.iattrs;
        break;
      }
    }
  }
  if (rewrite.empty()) return graph;
  ir::Graph out;
  out.reserve(static_cast<size_t>(graph.size()));
  auto next = rewrite.begin();
  for (int32_t i = 0; i < graph.size(); ++i) {
    if (next == rewrite.end() || next->first != i) {
      out.add(graph.node(i));
      continue;
    }
    const ir::Node& add = graph.node(i);
    const int32_t d = next++->second;
    ir::Node node = graph.node(d);  // the product, at the add's place, reading the bias too
    node.operands.push_back(graph.node(add.operands[add.operands[0] == d ? 1 : 0]).operands[0]);
    out.add(std::move(node));
  }
  return out;
}

Kernel make_product_kernel(const ir::Graph& g, int32_t id, const ProductForm& form) {
  return dot_general_kernel(g, g.node(id), form);
}

void product_layouts(const ir::Graph& graph, const std::vector<bool>& keep, ProductForms& forms) {
  const std::vector<int32_t> readers = reader_counts(graph);
  for (int32_t i = 0; i < graph.size(); ++i) {
    const ir::Node& t = graph.node(i);
    if (t.kind != OpKind::kTranspose) continue;
    const int32_t p = t.operands[0];
    const ir::Node& n = graph.node(p);
    if (n.kind != OpKind::kDotGeneral || n.operands.size() != 2 || n.dtype != ir::DType::kF32 || readers[p] != 1 ||
        keep[p]) {
      continue;
    }
    const size_t nb = n.iattrs[0], nc = n.iattrs[1 + 2 * nb];
    const size_t rank = n.shape.size();
    // Batched matrix products (one free dim per side) whose rows stay unit-stride in the order.
    const bool batched = nb > 0 && nc == 1 && rank == nb + 2 && graph.node(n.operands[0]).shape.size() == nb + 2 &&
                         graph.node(n.operands[1]).shape.size() == nb + 2;
    if (batched && t.iattrs.back() == static_cast<int64_t>(rank) - 1) forms[p].order = t.iattrs;
  }
}

Kernel make_contract_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind == OpKind::kDotGeneral) return dot_general_kernel(g, n);
  if (n.kind == OpKind::kConvolution) return convolution_kernel(g, n);
  return {};
}

int64_t contraction_macs(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind == OpKind::kDotGeneral) return dot_general_macs(g, n);
  if (n.kind == OpKind::kConvolution) return convolution_macs(g, n);
  return 0;
}

}  // namespace torch_tpu::runtime::host

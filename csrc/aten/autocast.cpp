// torch.autocast("tpu"): the AutocastPrivateUse1 dispatch key.
//
// Policy: the same as CPU autocast (torch.autocast("cpu")), so that code moved from the CPU
// behaves the same: matmul-like ops and convolutions run in the autocast dtype, numerically
// sensitive ops (losses, prod, cdist, ...) in float32, ops mixing dtypes (cat, stack,
// index_copy) at the widest dtype, and everything else (sum, softmax, elementwise, ...) in
// its input dtype (fallthrough).
#include <ATen/autocast_mode.h>
#include <ATen/Operators.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using namespace at::autocast;
  // lower_precision_fp (CPU's list)
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv1d, padding, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, padding, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, padding, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linalg_vecdot, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_convolution, deprecated, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_tbc, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose2d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose3d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(prelu, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)

  // fp32 (the part of CPU's list that applies to real dtypes)
  KERNEL_PRIVATEUSEONE(avg_pool3d, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy, fp32)
  KERNEL_PRIVATEUSEONE(grid_sampler, fp32)
  KERNEL_PRIVATEUSEONE(prod, fp32)
  KERNEL_PRIVATEUSEONE(prod, dim_int, fp32)
  KERNEL_PRIVATEUSEONE(quantile, fp32)
  KERNEL_PRIVATEUSEONE(nanquantile, fp32)
  KERNEL_PRIVATEUSEONE(cdist, fp32)
  KERNEL_PRIVATEUSEONE(grid_sampler_2d, fp32)
  KERNEL_PRIVATEUSEONE(grid_sampler_3d, fp32)
  KERNEL_PRIVATEUSEONE(trace, fp32)
  KERNEL_PRIVATEUSEONE(cholesky, fp32)
  KERNEL_PRIVATEUSEONE(cholesky_inverse, fp32)
  KERNEL_PRIVATEUSEONE(cholesky_solve, fp32)
  KERNEL_PRIVATEUSEONE(inverse, fp32)
  KERNEL_PRIVATEUSEONE(pinverse, fp32)
  KERNEL_PRIVATEUSEONE(max_pool3d, fp32)
  KERNEL_PRIVATEUSEONE(max_unpool2d, fp32)
  KERNEL_PRIVATEUSEONE(max_unpool3d, fp32)
  KERNEL_PRIVATEUSEONE(adaptive_avg_pool3d, fp32)
  KERNEL_PRIVATEUSEONE(reflection_pad1d, fp32)
  KERNEL_PRIVATEUSEONE(reflection_pad2d, fp32)
  KERNEL_PRIVATEUSEONE(replication_pad1d, fp32)
  KERNEL_PRIVATEUSEONE(replication_pad2d, fp32)
  KERNEL_PRIVATEUSEONE(replication_pad3d, fp32)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(cosine_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss2d, fp32)
  KERNEL_PRIVATEUSEONE(hinge_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(poisson_nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(cross_entropy_loss, fp32)
  KERNEL_PRIVATEUSEONE(l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(huber_loss, fp32)
  KERNEL_PRIVATEUSEONE(margin_ranking_loss, fp32)
  KERNEL_PRIVATEUSEONE(soft_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(triplet_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(multi_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(kl_div, fp32)
  KERNEL_PRIVATEUSEONE(multilabel_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)

  // promote
  KERNEL_PRIVATEUSEONE(stack, promote)
  KERNEL_PRIVATEUSEONE(cat, promote)
  KERNEL_PRIVATEUSEONE(index_copy, promote)
}

}  // namespace
}  // namespace torch_tpu::aten

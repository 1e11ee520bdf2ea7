"""OpInfo samples of the nn/linalg ops run through the lowering table (ReferenceMode) vs plain CPU,
plus an end-to-end CNN training step (forward + backward) under ReferenceMode.

Samples that need an op owned by another family which is not lowered yet are skipped (counted),
never a sample whose missing op is one of the nn/linalg lowerings: those must pass.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db

import torch_tpu.lowering  # noqa: F401
from torch_tpu.lowering.registry import LOWERINGS
from torch_tpu.lowering.testing import ReferenceMode

MY_MODULES = {f"torch_tpu.lowering.{m}" for m in ("linalg", "nn", "nn_conv", "nn_pool", "nn_norm", "nn_loss")}
MY_OPS = {k for k, fn in LOWERINGS.items() if fn.__module__ in MY_MODULES}

OPINFO_NAMES = [
    "mm", "bmm", "addmm", "addmm.decomposed", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul",
    "nn.functional.linear",
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",
    "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d",
    "nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
    "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d",
    "nn.functional.batch_norm", "nn.functional.layer_norm", "nn.functional.group_norm",
    "nn.functional.rms_norm", "nn.functional.instance_norm",
    "nn.functional.embedding", "softmax", "log_softmax",
    "nn.functional.nll_loss", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.smooth_l1_loss", "nn.functional.huber_loss", "nn.functional.binary_cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.soft_margin_loss", "nn.functional.kl_div",
    "nn.functional.scaled_dot_product_attention", "nn.functional.interpolate",
    "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle", "nn.functional.unfold", "nn.functional.fold",
]
OPINFOS = [o for o in op_db if (o.name + ("." + o.variant_test_name if o.variant_test_name else "")) in OPINFO_NAMES]
MAX_SAMPLES = 4


def _missing_op(err: Exception) -> str | None:
    msg = str(err)
    if "is not implemented for the tpu device" in msg:
        return msg.split("'")[1]
    return None


def _close(got, exp, atol: float, rtol: float) -> None:
    if isinstance(exp, torch.Tensor):
        torch.testing.assert_close(got, exp, atol=atol, rtol=rtol, equal_nan=True)
    elif isinstance(exp, (tuple, list)):
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            _close(g, e, atol, rtol)


# float32 only here (float64 is covered op by op in the other test_nn*/test_linalg files), to
# keep this file within its time budget.
@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
@pytest.mark.parametrize("info", OPINFOS, ids=lambda o: o.name + ("." + o.variant_test_name if o.variant_test_name else ""))
def test_opinfo_samples(info, dtype: torch.dtype) -> None:
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip("dtype not supported on CPU")
    tol = 1e-4 if dtype == torch.float32 else 1e-7
    ran, foreign = 0, set()
    for i, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if i >= MAX_SAMPLES:
            break
        # Random ops (dropout inside the sample) cannot match CPU's stream; those samples are skipped.
        if sample.kwargs.get("dropout_p", 0.0) or sample.kwargs.get("training") and "dropout" in info.name:
            continue
        torch.manual_seed(0)
        try:
            expected = info(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue
        s2 = copy.deepcopy(sample)  # batch_norm mutates running stats: run both on fresh copies
        try:
            with ReferenceMode():
                got = info(s2.input, *s2.args, **s2.kwargs)
        except NotImplementedError as e:
            op = _missing_op(e)
            assert op is not None and op not in MY_OPS, f"{info.name}: {e}"
            foreign.add(op)
            continue
        _close(got, expected, tol, tol)
        ran += 1
    if ran == 0:
        pytest.skip(f"no sample ran (ops of other families missing: {sorted(foreign)})")


class _SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 4, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(4 * 2 * 2, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 1)
        return self.fc(x.flatten(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_small_cnn_train_step(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    net = _SmallCNN().to(dtype)
    ref = copy.deepcopy(net)
    x = torch.randn(4, 3, 8, 8, dtype=dtype)
    y = torch.tensor([1, 3, 0, 4])

    loss = F.cross_entropy(net(x), y)
    loss.backward()
    mode = ReferenceMode()
    with mode:
        loss_r = F.cross_entropy(ref(x), y)
        loss_r.backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(loss_r, loss, atol=tol, rtol=tol)
    for (name, p), (_, pr) in zip(net.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(pr.grad, p.grad, atol=tol, rtol=tol, msg=name)
    # Batch-norm running statistics were updated in place through the lowering.
    torch.testing.assert_close(ref.bn.running_mean, net.bn.running_mean, atol=tol, rtol=tol)
    torch.testing.assert_close(ref.bn.running_var, net.bn.running_var, atol=tol, rtol=tol)
    assert ref.bn.num_batches_tracked.item() == 1
    for op in ("aten.convolution.default", "aten.convolution_backward.default", "aten.native_batch_norm.default",
               "aten.native_batch_norm_backward.default", "aten.max_pool2d_with_indices_backward.default",
               "aten.nll_loss_backward.default", "aten._log_softmax_backward_data.default", "aten.addmm.default"):
        assert mode.lowered.get(op, 0) >= 1, op

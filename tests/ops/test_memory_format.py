"""Memory format of results: channels-last inputs give the strides PyTorch gives.

Structured ops (add, sigmoid, max_pool2d, ...) reach the device as `.out` calls whose outputs
PyTorch's meta functions already laid out; the ops lowered as functional calls (convolutions,
batch norm, relu, dropout, adaptive pooling, ...) allocate their results in the dispatcher
(exec/call.h, OutputLayout). Two references: the strides of PyTorch's fake tensors for the
device (what torch.compile traces, and what PyTorch's device-generic kernels give), and CPU's.
They agree except where CPU alone keeps channels-last (max unpooling, pixel and channel
shuffles: contiguous on other devices, and here) and for convolutions, whose fake tensors on a
backend-defined device are contiguous while CPU and CUDA return channels-last results: here
they are channels-last, so that a channels-last model stays channels-last from op to op and
the host runtime's convolutions need no layout conversion.
"""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_map

import torch_tpu

import opinfo_util as U

CL = torch.channels_last

# Where PyTorch on another device (CUDA's kernels, the fake tensors of the tpu device) returns
# contiguous results for channels-last inputs and only CPU's kernels keep channels-last.
CPU_ONLY_CHANNELS_LAST = {
    ("nn.functional.max_unpool2d", ""),
    ("nn.functional.max_unpool2d", "grad"),
    ("nn.functional.pixel_shuffle", ""),
    ("nn.functional.channel_shuffle", ""),
}
# Results whose layout differs from PyTorch's fake tensors for the device, and why.
FAKE_LAYOUT_DIFFERENCES = {
    # Fake tensors of a backend-defined ("overrideable") convolution are contiguous; CPU and
    # CUDA return channels-last results, and so does the tpu backend.
    ("nn.functional.conv2d", ""),
    ("nn.functional.conv_transpose2d", ""),
}
# replication_pad2d is structured: PyTorch's meta function for this device lays out the `.out`
# result channels-last, but the functional wrapper that reaches the device allocates it
# contiguous (negative padding is the OpInfo sample that reaches it with a channels-last input).
PAD = ("nn.functional.pad", "replicate_negative")


FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def _channels_last(t, rank: int):
    """Tensors of `rank` (4: images, 5: volumes) with more than one channel and pixel, converted
    to channels-last (-3d)."""
    if isinstance(t, torch.Tensor) and t.dim() == rank and t.size(1) > 1 and t.shape[2:].numel() > 1:
        return t.contiguous(memory_format=FORMATS[rank])
    return t


SAMPLES_PER_ENTRY = 6


@functools.cache
def _channels_last_samples() -> dict[int, list]:
    """Per rank (4, 5): (op, sample, CPU result) for the first float32 OpInfo samples whose
    first input is a tensor of that rank, turned channels-last (-3d); computed once for every
    test here."""
    out: dict[int, list] = {4: [], 5: []}
    for op in U.ENTRIES:
        if torch.float32 not in U.cpu_dtypes(op):
            continue
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:SAMPLES_PER_ENTRY]
        except Exception:  # noqa: BLE001 - sample generators that need another device
            continue
        for s in samples:
            rank = s.input.dim() if isinstance(s.input, torch.Tensor) else 0
            if rank not in out:
                continue
            sample = s.transform(functools.partial(_channels_last, rank=rank))
            if sample.input.is_contiguous():
                continue
            try:
                torch.manual_seed(0)
                want = op(sample.input, *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001 - a sample CPU rejects is not a layout question
                continue
            out[rank].append((op, sample, want))
    return out


def _fake(args: tuple, kwargs: dict) -> tuple[tuple, dict, FakeTensorMode]:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = functools.partial(tree_map, lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t)
    return fake(args), fake(kwargs), mode


def _layout_differences(mode: str, rank: int) -> tuple[set, set, list[str], int]:
    """(ops whose results of `rank` differ in strides from CPU's, from the fake tensors',
    value mismatches at the OpInfo suite's tolerances, results whose strides were compared)
    in `mode`."""
    compared = 0
    from_cpu: set = set()
    from_fake: set = set()
    wrong_values: list[str] = []
    for op, sample, want in _channels_last_samples()[rank]:
        tsample = U.prepare(op, sample)  # the tpu copy, strides kept
        dev_args = (tsample.input, *tsample.args)
        with torch_tpu.mode(mode), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.manual_seed(0)
                result = op(*dev_args, **tsample.kwargs)
                got = tree_flatten(result)[0]
                torch_tpu.sync()  # errors of the call surface here, not in the comparisons
            except Exception:  # noqa: BLE001 - unsupported here: the OpInfo suite covers it
                continue
        try:
            fake_args, fake_kwargs, fake_mode = _fake(dev_args, tsample.kwargs)
            with fake_mode:
                fake = tree_flatten(op(*fake_args, **fake_kwargs))[0]
        except Exception:  # noqa: BLE001 - ops without a fake implementation
            fake = [None] * len(got)
        for w, dev, f in zip(tree_flatten(want)[0], got, fake):
            if not isinstance(w, torch.Tensor) or not isinstance(dev, torch.Tensor):
                continue
            if w.dim() == rank and w.numel() > 1 and w.shape == dev.shape:
                compared += 1
                if w.stride() != dev.stride():
                    from_cpu.add((op.name, op.variant_test_name))
                if isinstance(f, torch.Tensor) and f.shape == dev.shape and f.stride() != dev.stride():
                    from_fake.add((op.name, op.variant_test_name))
        if U.seeded(op) or U.random_sample(op, sample) or U.skip_reason(op):
            continue  # random or nondeterministic values: strides only
        try:
            U.compare_sample(op, sample, result, want, U.tolerance(op, torch.float32))
        except AssertionError:
            wrong_values.append(f"{U.entry_id(op)} {U.describe(sample)}")
    return from_cpu, from_fake, wrong_values, compared


@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_opinfo_results_of_channels_last_inputs_have_pytorch_strides(mode: str, rank: int):
    from_cpu, from_fake, wrong_values, compared = _layout_differences(mode, rank)
    assert compared >= (100 if rank == 4 else 20), compared  # 153 and 43 results today
    assert not wrong_values, wrong_values
    want_cpu = CPU_ONLY_CHANNELS_LAST | {PAD} if rank == 4 else set()
    want_fake = FAKE_LAYOUT_DIFFERENCES | {PAD} if rank == 4 else set()
    assert from_cpu == want_cpu, (f"new differences from CPU: {sorted(from_cpu - want_cpu)}; "
                                  f"no longer differing: {sorted(want_cpu - from_cpu)}")
    assert from_fake == want_fake, (f"new differences from fake tensors: {sorted(from_fake - want_fake)}; "
                                    f"no longer differing: {sorted(want_fake - from_fake)}")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_convolution_batch_norm_relu_dropout_follow_pytorch_layout_rules(mode: str):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 5)
    w = torch.randn(8, 4, 3, 3)
    cases = {
        # convolution: channels-last when the input or the weight is
        "conv, both channels-last": lambda x, w: F.conv2d(x.contiguous(memory_format=CL),
                                                          w.contiguous(memory_format=CL), padding=1),
        "conv, weight channels-last": lambda x, w: F.conv2d(x, w.contiguous(memory_format=CL), padding=1),
        "conv, input channels-last": lambda x, w: F.conv2d(x.contiguous(memory_format=CL), w, padding=1),
        "conv, contiguous": lambda x, w: F.conv2d(x, w, padding=1),
        "batch norm": lambda x, w: F.batch_norm(x.contiguous(memory_format=CL), None, None, training=True),
        "relu": lambda x, w: torch.relu(x.contiguous(memory_format=CL)),
        "adaptive avg pool": lambda x, w: F.adaptive_avg_pool2d(x.contiguous(memory_format=CL), (3, 2)),
        # [C, H, W] normalized: PyTorch's layer norm returns contiguous results
        "layer norm": lambda x, w: F.layer_norm(x.contiguous(memory_format=CL), x.shape[1:]),
    }
    with torch_tpu.mode(mode):
        for name, f in cases.items():
            want = f(x, w)
            got = f(x.to("tpu"), w.to("tpu"))
            assert got.stride() == want.stride(), name
            torch.testing.assert_close(got.cpu(), want, msg=name)
        # dropout: random values, CPU's layout
        got = F.dropout(x.to("tpu").contiguous(memory_format=CL), 0.5)
        assert got.is_contiguous(memory_format=CL) and not got.is_contiguous()
        kept = got.cpu() != 0
        assert 0 < kept.sum() < kept.numel()
        torch.testing.assert_close(got.cpu()[kept], (x * 2)[kept])


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_channels_last_resnet_training_matches_cpu(mode: str):
    """A channels-last SmallResNet trains as on CPU: the same losses, and the activations and
    gradients keep CPU's channels-last layout (so no step converts layouts)."""
    from torch_tpu.models import SmallResNet

    torch.manual_seed(0)
    cpu_model = SmallResNet(width=8).to(memory_format=CL)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    x = torch.randn(4, 3, 16, 16).contiguous(memory_format=CL)
    y = torch.randint(0, 10, (4,))
    losses = {}
    for name, model, dev in (("cpu", cpu_model, "cpu"), ("tpu", tpu_model, "tpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses[name] = []
        with torch_tpu.mode(mode):
            for _ in range(3):
                stem = model.stem(x.to(dev))
                loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses[name].append(loss.item())
        assert stem.is_contiguous(memory_format=CL), name
    # The losses are float32 values: compare them as such (Python floats would get float64's
    # tolerances, and one float32 ulp of accumulation-order difference would fail).
    torch.testing.assert_close(torch.tensor(losses["tpu"]), torch.tensor(losses["cpu"]))
    for (n, p), q in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        assert p.grad.stride() == q.grad.stride(), n
        torch.testing.assert_close(p.detach().cpu(), q.detach(), msg=n)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_foreach_results_follow_each_input(mode: str):
    """A `_foreach_` op's k-th result takes the layout of the k-th tensor of its first list, as
    each of CPU's per-tensor ops does (a list may mix channels-last and contiguous weights)."""
    torch.manual_seed(0)
    cl, plain, flat = torch.randn(2, 4, 3, 3).contiguous(memory_format=CL), torch.randn(2, 4, 3, 3), torch.randn(5)
    for tensors in ([plain, cl, flat], [cl, plain, flat]):
        want = torch._foreach_mul(tensors, 2.0)
        with torch_tpu.mode(mode):
            got = torch._foreach_mul([t.to("tpu") for t in tensors], 2.0)
        assert [g.stride() for g in got] == [w.stride() for w in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_results_with_size_one_dims_written_through_a_view_of_a_channels_last_destination(mode: str):
    """max_pool2d of a channels-last [1, 2, 3, 6] image with ceil_mode gives [1, 2, 1, 3]: the
    host runtime computes it into a view of the destination whose size-1 height has another
    stride than the destination's. Those are the same elements; the copy between them used
    to fail as a partial overlap (the OpInfo sample that passed in NCHW only)."""
    x = torch.randn(1, 2, 3, 6).contiguous(memory_format=CL).requires_grad_()
    want, want_idx = F.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True)
    want.sum().backward()
    xt = x.detach().to("tpu").requires_grad_()
    with torch_tpu.mode(mode):
        got, got_idx = F.max_pool2d(xt, 3, 2, ceil_mode=True, return_indices=True)
        got.sum().backward()
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)
        assert torch.equal(got_idx.cpu(), want_idx)
        torch.testing.assert_close(xt.grad.cpu(), x.grad)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_out_tensors_resized_by_an_op_take_the_functional_layout(mode: str):
    """An out= tensor of another shape is resized to the layout the functional op gives (CPU's
    rule; `torch.abs` itself is a composite calling abs.out on an empty tensor), while an out=
    tensor of the right shape keeps its strides."""
    x = torch.randn(2, 6, 4, 4).contiguous(memory_format=CL)
    with torch_tpu.mode(mode):
        t = x.to("tpu")
        absolute = torch.abs(t)
        assert absolute.stride() == torch.abs(x).stride() == x.stride()
        resized = torch.empty(0, device="tpu")
        torch.exp(t, out=resized)
        assert resized.stride() == x.stride()
        kept = torch.empty(2, 6, 4, 4, device="tpu")
        torch.exp(t, out=kept)
        assert kept.stride() == (96, 16, 4, 1)
        torch.testing.assert_close(absolute.cpu(), torch.abs(x))
        torch.testing.assert_close(resized.cpu(), torch.exp(x))
        torch.testing.assert_close(kept.cpu(), torch.exp(x))

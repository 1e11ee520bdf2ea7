"""PyTorch's OpInfo database run on "tpu" against CPU, with the CPU fallback off.

Every OpInfo entry (common_methods_invocations.op_db, which already includes
opinfo.definitions: linalg, fft, special, signal, masked, ...) is checked per dtype and mode by
tests/ops/opinfo_util.py (shared with tools/gen_ops_table.py, which writes docs/ops.md):
the first MAX_SAMPLES samples of op.sample_inputs("cpu", dtype) run on CPU and, moved to tpu,
on the device; results must be assert_close with the exact dtype (OpInfo tolerances where the
entry declares them).

Why a plain pytest parametrization over (entry, dtype, mode) rather than
instantiate_device_type_tests: the latter needs a DeviceTypeTestBase for "tpu" and applies the
OpInfo's skips/xfails written for CPU/CUDA test classes (TestCommon & co.), which are neither
ours nor right for this device; it also generates samples on the device under test (so a broken
tpu random/fill would hide every op) and cannot express our own xfail list. Here samples come
from CPU, the only skips are the ones listed in expected_failures.py, and each
(entry, dtype, mode) is one test id that tools/gen_ops_table.py reproduces exactly.

Default run (`make test`):  float32 and complex64 strict and fused for every entry; float32 debug for every
DEBUG_STRIDE-th entry; float32 backward vs CPU for every entry supporting autograd; float64
gradcheck on tpu for GRADCHECK_OPS.
TORCH_TPU_TEST_FULL=1 (`make test-full`): every dtype in ALL_DTYPES in strict mode, float32 debug
for every entry, backward vs CPU in float32 and float64, gradcheck as above.

Known failures are listed in expected_failures.py and run as xfail(strict=True): a fix turns
them into XPASS failures, so the list has to be updated with it
(`python tools/gen_ops_table.py --write-xfails`).
"""

from __future__ import annotations

import pytest
import torch

import torch_tpu

import opinfo_util as U
from expected_failures import EXPECTED_FAILURES

DEBUG_STRIDE = 1 if U.FULL else 2


@pytest.fixture(autouse=True)
def _drain():
    yield
    try:  # an asynchronous error of a failed check must not leak into the next test
        torch_tpu.sync()
    except Exception:  # noqa: BLE001
        pass


def _param(op, dtype: torch.dtype, mode: str):
    dname = U.DTYPE_NAMES[dtype]
    marks = []
    reason = U.skip_reason(op)
    if reason:
        marks.append(pytest.mark.skip(reason=reason))
    elif dtype not in U.cpu_dtypes(op):
        marks.append(pytest.mark.skip(reason=f"{dname} not supported by the op on CPU"))
    elif mode in ("grad", "gradcheck") and not op.supports_autograd:
        marks.append(pytest.mark.skip(reason="op does not support autograd"))
    else:
        xf = EXPECTED_FAILURES.get((op.name, op.variant_test_name, dname, mode))
        if xf is None and mode == "fused":  # fused runs the same lowerings: strict's failures apply
            xf = EXPECTED_FAILURES.get((op.name, op.variant_test_name, dname, "strict"))
        if xf:
            marks.append(pytest.mark.xfail(strict=True, reason=xf))
    return pytest.param(op, dtype, mode, marks=marks, id=f"{mode}-{dname}-{U.entry_id(op)}")


def _params() -> list:
    out = []
    strict_dtypes = U.ALL_DTYPES if U.FULL else (torch.float32, torch.complex64)
    for dtype in strict_dtypes:
        out += [_param(op, dtype, "strict") for op in U.ENTRIES]
        out += [_param(op, dtype, "fused") for op in U.ENTRIES]
    out += [_param(op, torch.float32, "debug") for op in U.ENTRIES[::DEBUG_STRIDE]]
    return out


def _grad_params() -> list:
    dtypes = (torch.float32, torch.float64) if U.FULL else (torch.float32,)
    return [_param(op, dt, "grad") for dt in dtypes for op in U.ENTRIES if op.supports_autograd]


def _gradcheck_params() -> list:
    return [_param(U.BY_ID[name], torch.float64, "gradcheck") for name in U.GRADCHECK_OPS if name in U.BY_ID]


def _run(fn, *args) -> None:
    try:
        fn(*args)
    except U.NoSampleRan as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("op,dtype,mode", _params())
def test_forward(op, dtype: torch.dtype, mode: str) -> None:
    _run(U.check_forward, op, dtype, mode)


@pytest.mark.parametrize("op,dtype,mode", _grad_params())
def test_backward_vs_cpu(op, dtype: torch.dtype, mode: str) -> None:
    _run(U.check_backward, op, dtype)


@pytest.mark.parametrize("op,dtype,mode", _gradcheck_params())
def test_gradcheck(op, dtype: torch.dtype, mode: str) -> None:
    _run(U.check_gradcheck, op)


def test_expected_failures_name_real_entries() -> None:
    """Every key of the xfail list names an OpInfo entry, a known dtype and mode."""
    entries = {(o.name, o.variant_test_name) for o in U.ENTRIES}
    for name, variant, dtype, mode in EXPECTED_FAILURES:
        assert (name, variant) in entries, (name, variant)
        assert dtype in U.DTYPE_BY_NAME and mode in U.MODES, (name, variant, dtype, mode)


# Entries OpInfo runs under wrapper_set_seed that are still compared with CPU: deterministic
# (item), random only in samples that random_sample() drops (attention with dropout), random
# projections whose results do not depend on the draw (the low-rank factorizations of a
# low-rank input, compared after output_process_fn_grad), or skipped anyway (empty_strided).
SEEDED_BUT_COMPARED = {"item", "nn.functional.multi_head_attention_forward",
                       "nn.functional.scaled_dot_product_attention", "pca_lowrank", "svd_lowrank", "empty_strided"}


def test_skipped_entries_are_opinfo_random_ops() -> None:
    """SKIPPED_ENTRIES is exactly OpInfo's random ops (wrapper_set_seed) less the ones compared."""
    seeded = {U.entry_id(o) for o in U.ENTRIES if U.seeded(o)}
    assert set(U.SKIPPED_ENTRIES) == seeded - SEEDED_BUT_COMPARED

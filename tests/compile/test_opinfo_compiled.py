"""The OpInfo suite through torch.compile(backend="tpu"), float32.

Each check compiles the entry's callable for its first samples (Dynamo -> AOTAutograd -> one
program; dynamic=False, so each sample is its own graph) and compares the result with CPU,
using the eager harness's sample handling, tolerances and comparison (tests/ops/opinfo_util.py).
A graph must compile whole: a lowering fallback (stats()["fallbacks"]) fails the check unless
the entry is listed in COMPILE_FALLBACKS with the reason.

Entries: the ones that pass in strict mode (no strict xfail, not skipped), except OpInfo's
seeded entries (their callable resets the RNG state around the op, wrapper_set_seed, and
Dynamo fails tracing into torch.tpu.set_rng_state: an AssertionError about no_dispatch;
seeded entries such as scaled_dot_product_attention are covered by the eager suite and the
model tests). Compile time per
entry (Dynamo and AOTAutograd tracing, about a second each) is the cost, so `make test` runs a
fixed representative subset (REPRESENTATIVE: elementwise, reductions, contractions, nn ops,
indexing, shape ops); TORCH_TPU_TEST_FULL=1 runs every such entry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo

import torch_tpu
from torch_tpu.compile import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
import opinfo_util as U  # noqa: E402
from expected_failures import EXPECTED_FAILURES  # noqa: E402

MAX_SAMPLES = 2

REPRESENTATIVE = (
    "add", "mul", "div.no_rounding_mode", "exp", "log", "tanh", "sigmoid", "pow", "clamp", "where", "maximum",
    "sum", "mean", "amax", "var", "cumsum", "softmax", "log_softmax",
    "matmul", "bmm", "addmm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.silu", "nn.functional.max_pool2d",
    "nn.functional.cross_entropy", "nn.functional.batch_norm", "nn.functional.avg_pool2d",
    "index_select", "gather", "scatter_add", "cat", "permute", "reshape", "flip", "tril", "masked_fill", "argmax",
    "sort", "fft.rfft", "fft.ifft", "linalg.solve", "linalg.det", "linalg.qr", "polar", "linalg.svd", "linalg.eigh",
    "linalg.pinv", "linalg.lstsq", "logcumsumexp", "frexp", "nextafter", "ormqr",
    "nn.functional.grid_sample", "grid_sampler_3d", "_upsample_bilinear2d_aa", "nn.functional.pdist",
    "_segment_reduce.lengths", "nn.functional.multilabel_margin_loss",
)

# Entries whose compiled graph runs (part of) its ops eagerly, with the reason.
COMPILE_FALLBACKS: dict[str, str] = {
    "index_put": "a boolean mask with one value per True element: the count is data-dependent "
                 "(x[mask] = v with a single value compiles whole, test_compile.py)",
    "nn.functional.linear_cross_entropy.chunked": "a torch.library custom op implemented in Python: opaque to "
                                                  "the graph, its ATen ops run eagerly",
    "nn.functional.linear_cross_entropy.chunked_none": "a torch.library custom op implemented in Python: opaque "
                                                       "to the graph, its ATen ops run eagerly",
}


def _passes_strict(op) -> bool:
    return (U.skip_reason(op) is None and not U.seeded(op) and torch.float32 in U.cpu_dtypes(op)
            and (op.name, op.variant_test_name, "float32", "strict") not in EXPECTED_FAILURES)


def _entries() -> list:
    ids = [U.entry_id(op) for op in U.ENTRIES] if U.FULL else list(REPRESENTATIVE)
    return [pytest.param(U.BY_ID[i], id=i) for i in ids if i in U.BY_ID and _passes_strict(U.BY_ID[i])]


def test_representative_entries_exist_and_pass_strict():
    missing = [i for i in REPRESENTATIVE if i not in U.BY_ID or not _passes_strict(U.BY_ID[i])]
    assert not missing, f"not OpInfo entries passing strict float32: {missing}"


@pytest.mark.parametrize("op", _entries())
def test_compiled_forward_matches_cpu(op):
    tol = U.tolerance(op, torch.float32)
    ran = 0
    fallbacks = stats()["fallbacks"]
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=False)):
        if i >= MAX_SAMPLES:
            break
        if U.random_sample(op, sample):
            continue
        tsample = U.prepare(op, sample)
        try:
            exp = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001  CPU rejects this sample: nothing to compare
            continue
        exp = sample.output_process_fn_grad(exp)
        torch._dynamo.reset()
        fn = op.op

        def call(inp, args, kwargs):
            return fn(inp, *args, **kwargs)

        with U.noted(f"[compiled, sample {i}: {U.describe(sample)}]"):
            got = torch.compile(call, backend="tpu", dynamic=False)(tsample.input, tsample.args, tsample.kwargs)
            got = tsample.output_process_fn_grad(got)
            U.compare_sample(op, sample, got, exp, tol)
        ran += 1
    torch_tpu.sync()
    torch._dynamo.reset()
    if ran == 0:
        pytest.skip("CPU rejected every sample")
    if U.entry_id(op) not in COMPILE_FALLBACKS:
        assert stats()["fallbacks"] == fallbacks, f"fell back to eager ops: {stats()['fallback_ops']}"

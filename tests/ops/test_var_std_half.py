"""var_mean / std_mean in bfloat16 and float16 (unbiased and biased) vs PyTorch CPU, strict and fused.

The OpInfo sweep checks half dtypes only under TORCH_TPU_TEST_FULL=1; this keeps the cases
that once broke in the normal suite. The regression: for an empty input reduced to 0-d, the
host runtime folded the 0-d mean into the cluster that broadcasts it over the (empty) input;
that cluster never runs, so the mean converted back to the half dtype was uninitialized memory
instead of NaN (float32 was unaffected: its mean needs no convert). CPU computes these in
float32 and rounds once, as the lowering does, so values agree within one rounding.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_tpu

# (shape, keyword arguments): the OpInfo samples that failed (empty to 0-d, empty rows kept),
# plus non-empty full and per-dim reductions.
CASES = [
    ((0,), {}),
    ((0, 5), {"dim": 1, "keepdim": True}),
    ((0, 5), {"dim": 0}),
    ((1,), {}),
    ((7,), {}),
    ((3, 4, 5), {"dim": (0, 2)}),
    ((4, 33), {"dim": 1, "keepdim": True}),
]
# One rounding to the dtype (bf16: 8 significant bits, f16: 11).
TOL = {torch.bfloat16: {"rtol": 8e-3, "atol": 1e-5}, torch.float16: {"rtol": 1e-3, "atol": 1e-5}}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("fn", [torch.var_mean, torch.std_mean], ids=["var_mean", "std_mean"])
@pytest.mark.parametrize("correction", [1, 0])
def test_var_std_mean_half_match_cpu(mode: str, dtype: torch.dtype, fn, correction: int) -> None:
    gen = torch.Generator().manual_seed(0)
    with torch_tpu.mode(mode), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "degrees of freedom is <= 0" for empty and 1-element inputs
        for shape, kwargs in CASES:
            x = (torch.randn(shape, generator=gen) * 3 + 1).to(dtype)
            want = fn(x, correction=correction, **kwargs)
            got = fn(x.to("tpu"), correction=correction, **kwargs)
            for name, g, w in zip(("var/std", "mean"), got, want):
                torch.testing.assert_close(g.cpu(), w, equal_nan=True, check_dtype=True, **TOL[dtype],
                                           msg=lambda m: f"{fn.__name__} {name} {shape} {kwargs}: {m}")

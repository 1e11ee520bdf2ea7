"""Shared helpers for the lowering tests: CPU-vs-reference comparison, OpInfo sweeps, and a
recorder of the ATen ops a call dispatched."""

from __future__ import annotations

import collections

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode

from torch_tpu.lowering.testing import ReferenceMode, run_reference

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool)
# The OpInfo sweeps use a subset (float64/int32 are covered by the direct tests) to stay fast.
SWEEP_DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)
_BY_NAME = collections.defaultdict(list)
for _o in op_db:
    _BY_NAME[_o.name].append(_o)


def close(got, exp, **kw) -> None:
    """assert_close with NaNs equal; tuples/lists compared item by item."""
    if isinstance(exp, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(exp)
        for g, e in zip(got, exp):
            close(g, e, **kw)
        return
    torch.testing.assert_close(got, exp, equal_nan=True, **kw)


def check(op, *args, **kwargs) -> None:
    """run_reference(op, ...) equals op(...) on CPU (inputs cloned so in-place ops compare too)."""
    clone = lambda a: a.clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
    exp = op(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
    got = run_reference(op, *[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
    close(got, exp)


def opinfo_sweep(name: str, variant: str = "", dtypes=SWEEP_DTYPES, compare=None) -> int:
    """Run every CPU sample of OpInfo `name` under ReferenceMode; returns how many compared.

    Samples CPU itself rejects are skipped, as are ones needing an op outside this family that
    is not lowered yet (NotImplementedError naming another op). compare(got, exp, sample)
    overrides the plain comparison (e.g. for ops whose tie order is implementation-defined).
    """
    ops = [o for o in _BY_NAME[name] if o.variant_test_name == variant]
    assert ops, f"no OpInfo {name}.{variant}"
    op = ops[0]
    n = 0
    for dt in dtypes:
        if dt not in op.supported_dtypes("cpu"):
            continue
        for s in op.sample_inputs("cpu", dt):
            try:
                exp = op(s.input, *s.args, **s.kwargs)
            except Exception:
                continue
            try:
                with ReferenceMode():
                    got = op(s.input, *s.args, **s.kwargs)
            except NotImplementedError as e:
                if "mask indices" in str(e) or "is not implemented for the tpu device" in str(e):
                    continue
                raise
            # bfloat16 (8-bit mantissa): reductions in another order differ by an ulp or two,
            # the size of torch.testing's own bfloat16 defaults (atol 1e-5 is far below an ulp).
            tol = dict(atol=1e-2, rtol=1.6e-2) if dt == torch.bfloat16 else {}
            if compare is not None:
                compare(got, exp, s)
            else:
                close(got, exp, **tol)
            n += 1
    assert n > 0, f"no sample of {name} compared"
    return n


class OpsCalled(TorchDispatchMode):
    """Records the ATen overloads dispatched while active: `with OpsCalled() as called: ...`."""

    def __enter__(self) -> set:
        super().__enter__()
        self.called: set = set()
        return self.called

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.called.add(func)
        return func(*args, **(kwargs or {}))

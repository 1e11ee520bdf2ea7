"""Random ops: distribution properties, ranges, dtypes and (seed, offset) determinism.

Random lowerings cannot match CPU's bit stream (they use the IR's counter-based Philox), so
these tests check statistics on large samples instead of values.
"""

from __future__ import annotations

import math

import pytest
import torch

from torch_tpu.ir.builder import GraphBuilder
from torch_tpu.lowering.apply import apply_lowering, normalize_args
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
N = 16384
FLOATS = (torch.float32, torch.float64, torch.bfloat16)


def _stats(t: torch.Tensor) -> tuple[float, float]:
    t = t.double()
    return t.mean().item(), t.std().item()


@pytest.mark.parametrize("dtype", FLOATS)
def test_continuous(dtype):
    x = torch.empty(N, dtype=dtype)
    u = run_reference(aten.uniform.default, x, 2.0, 5.0)
    assert u.dtype == dtype and u.shape == x.shape
    assert u.min() >= 2.0 and u.max() <= 5.0
    m, s = _stats(u)
    assert abs(m - 3.5) < 0.03 and abs(s - 3 / math.sqrt(12)) < 0.03
    m, s = _stats(run_reference(aten.normal_functional.default, x, 1.0, 2.0))
    assert abs(m - 1.0) < 0.05 and abs(s - 2.0) < 0.05
    e = run_reference(aten.exponential.default, x, 2.0)
    assert e.min() >= 0 and abs(_stats(e)[0] - 0.5) < 0.02
    ln = run_reference(aten.log_normal.default, x, 0.5, 0.25)
    m, s = _stats(ln.log())
    assert abs(m - 0.5) < 0.02 and abs(s - 0.25) < 0.02
    c = run_reference(aten.cauchy.default, x, 1.0, 2.0).double()
    assert abs(c.median().item() - 1.0) < 0.1
    assert abs(((c - 1).abs() < 2).double().mean().item() - 0.5) < 0.02  # half the mass within one scale


def test_normal_overloads():
    m, s = _stats(run_reference(aten.normal.float_float, 3.0, 0.5, [N]))
    assert abs(m - 3.0) < 0.02 and abs(s - 0.5) < 0.02
    out = run_reference(aten.normal.Tensor_Tensor, torch.tensor([[0.0], [10.0]]), torch.tensor([1.0, 3.0] * (N // 2)))
    assert out.shape == (2, N)
    assert abs(out[1].mean().item() - 10.0) < 0.1 and abs(out[0].std().item() - math.sqrt(5)) < 0.1  # std alternates 1, 3
    out = run_reference(aten.normal.Tensor_float, torch.full((N,), -2.0), 0.1)
    assert abs(out.mean().item() + 2.0) < 0.01
    out = run_reference(aten.normal.float_Tensor, 4.0, torch.full((N,), 2.0, dtype=torch.float64))
    assert out.dtype == torch.float64 and abs(out.std().item() - 2.0) < 0.05
    y = torch.zeros(N)
    run_reference(aten.normal_.default, y, 5.0, 1.0)
    assert abs(y.mean().item() - 5.0) < 0.03
    y = torch.zeros(N)
    run_reference(aten.uniform_.default, y, -1.0, 1.0)
    assert y.min() >= -1 and y.max() < 1 and abs(y.mean().item()) < 0.02


def test_bernoulli():
    x = torch.empty(N)
    b = run_reference(aten.bernoulli.p, x, 0.3)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.015
    p = torch.tensor([0.0, 1.0, 0.7]).repeat(N // 2)
    b = run_reference(aten.bernoulli.default, p)
    assert b[0::3].sum() == 0 and b[1::3].all() and abs(b[2::3].mean().item() - 0.7) < 0.03
    y = torch.empty(N, dtype=torch.float64)
    run_reference(aten.bernoulli_.float, y, 0.2)
    assert abs(y.mean().item() - 0.2) < 0.015
    b = run_reference(aten.bernoulli.Tensor, torch.empty(N, dtype=torch.bool), torch.tensor(0.5))
    assert b.dtype == torch.bool and abs(b.double().mean().item() - 0.5) < 0.02


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float32, torch.bfloat16])
def test_random_integers(dtype):
    x = torch.empty(N, dtype=dtype)
    hi = 2 if dtype == torch.bool else 7
    r = run_reference(aten.random.to, x, hi)
    assert r.dtype == dtype and set(r.long().unique().tolist()) == set(range(hi))
    lo = 0 if dtype == torch.bool else 3
    r = run_reference(getattr(aten.random, "from"), x, lo, hi)
    assert set(r.long().unique().tolist()) == set(range(lo, hi))
    r = run_reference(aten.random.default, x).double()
    top = {torch.float32: 2 ** 24, torch.bfloat16: 2 ** 8, torch.bool: 1}.get(dtype) or torch.iinfo(dtype).max
    assert r.min() >= 0 and r.max() <= top and r.max() > top * 0.9
    r = run_reference(getattr(aten.random, "from"), x, lo, None).double()
    assert r.min() >= lo and r.max() <= top
    y = torch.zeros(N, dtype=torch.int64)
    run_reference(getattr(aten.random_, "from"), y, -5, 5)
    assert y.min() == -5 and y.max() == 4


def test_geometric():
    g = run_reference(aten.geometric.default, torch.empty(N), 0.25)
    assert g.min() >= 1 and (g == g.round()).all() and abs(g.mean().item() - 4.0) < 0.1


def test_randperm_multinomial():
    for n, dtype in ((10, torch.int64), (1000, torch.int32), (0, torch.int64)):
        p = run_reference(aten.randperm.default, n, dtype=dtype)
        assert p.dtype == dtype and sorted(p.tolist()) == list(range(n))
    p = run_reference(aten.randperm.default, 50)  # default dtype arrives as a ScalarType code
    assert p.dtype == torch.int64 and p.tolist() != list(range(50))
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    s = run_reference(aten.multinomial.default, probs, 3, False)
    assert s.shape == (3,) and len(set(s.tolist())) == 3 and 1 not in s.tolist()
    s = run_reference(aten.multinomial.default, torch.stack([probs, probs.flip(0)]) * 5, N, True)
    assert s.shape == (2, N)
    freq = torch.stack([torch.bincount(r, minlength=4) for r in s]).double() / N
    torch.testing.assert_close(freq, torch.stack([probs, probs.flip(0)]).double(), atol=0.015, rtol=0)
    # without replacement, the first draw follows the probabilities
    first = torch.tensor([run_reference(aten.multinomial.default, probs.repeat(N // 4, 1), 2, False)[:, 0].tolist()])
    freq = torch.bincount(first[0], minlength=4).double() / first.numel()
    torch.testing.assert_close(freq, probs.double(), atol=0.03, rtol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout(dtype):
    x = torch.ones(N, dtype=dtype)
    out, mask = run_reference(aten.native_dropout.default, x, 0.25, True)
    assert out.dtype == dtype and mask.dtype == torch.bool
    assert abs(mask.double().mean().item() - 0.75) < 0.015
    torch.testing.assert_close(out, torch.where(mask, torch.tensor(4 / 3, dtype=dtype), torch.tensor(0, dtype=dtype)))
    out, mask = run_reference(aten.native_dropout.default, x, 0.25, False)
    assert torch.equal(out, x) and mask.all()
    out, mask = run_reference(aten.native_dropout.default, x[:8], 1.0, True)
    assert (out == 0).all() and not mask.any()
    g = torch.randn(8).to(dtype)
    m = torch.tensor([True, False] * 4)
    check = run_reference(aten.native_dropout_backward.default, g, m, 2.0)
    torch.testing.assert_close(check, aten.native_dropout_backward.default(g, m, 2.0))


def _draw(seed: int, offset: int, op=aten.uniform.default, args=(torch.empty(64),)) -> tuple[torch.Tensor, int]:
    b = GraphBuilder(reference=True)
    b.reference_seed, b.reference_offset = seed, offset
    full = normalize_args(op._schema, args, {})  # defaults filled in, as the dispatcher does
    vals = [b.parameter(i, a.dtype, a.shape, a) if isinstance(a, torch.Tensor) else a for i, a in enumerate(full)]
    (r,), _ = apply_lowering(b, op, vals)
    return r.data.clone(), b.rng_counters


def test_determinism():
    a, used = _draw(1, 0)
    assert used == 64
    assert torch.equal(a, _draw(1, 0)[0])  # same (seed, offset): same numbers
    assert not torch.equal(a, _draw(2, 0)[0])  # another seed
    b_, _ = _draw(1, 64)
    assert not torch.equal(a, b_)  # the next offset continues the stream
    assert torch.equal(_draw(1, 32)[0][:32], a[32:])  # counters are offset + element index
    n1, _ = _draw(7, 0, aten.normal_functional.default)
    assert torch.equal(n1, _draw(7, 0, aten.normal_functional.default)[0])

"""Checks on device values under torch.compile(backend="tpu"): linalg.cholesky's error check
(ordered by an effect token) and torch._assert_async.

AOTAutograd orders ``_linalg_check_errors`` (the not-positive-definite check eager
``linalg.cholesky`` runs) behind an effect token. The graph must still compile as one program
(no eager fallback), give CPU's values, and raise CPU's error for a matrix that is not
positive definite.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import torch_tpu  # noqa: F401
from torch_tpu.compile import stats


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def spd(n: int, batch: int = 3) -> torch.Tensor:
    a = torch.randn(batch, n, n)
    return a @ a.mT + n * torch.eye(n)


def factor_sums(a: torch.Tensor) -> torch.Tensor:
    return torch.linalg.cholesky(a).sum(-1) * 2


def test_cholesky_compiles_whole_and_matches_cpu():
    torch.manual_seed(0)
    a = spd(5)
    fallbacks, compiled = stats()["fallbacks"], stats()["graphs_compiled"]
    out = torch.compile(factor_sums, backend="tpu")(a.to("tpu"))
    torch.testing.assert_close(out.cpu(), factor_sums(a))
    assert stats()["fallbacks"] == fallbacks, stats()["fallback_ops"]
    assert stats()["graphs_compiled"] > compiled


def test_not_positive_definite_raises_as_in_eager_mode():
    torch.manual_seed(0)
    a = spd(4)
    a[1, 2, 2] = -100.0  # batch 1 is not positive definite at order 3
    with pytest.raises(torch.linalg.LinAlgError) as cpu_error:
        factor_sums(a)
    fn = torch.compile(factor_sums, backend="tpu")
    with pytest.raises(torch.linalg.LinAlgError) as tpu_error:
        fn(a.to("tpu"))
    assert str(tpu_error.value) == str(cpu_error.value)
    # The same compiled graph still runs a good input afterwards.
    good = spd(4)
    torch.testing.assert_close(fn(good.to("tpu")).cpu(), factor_sums(good))


def test_cholesky_gradient_under_compile():
    torch.manual_seed(0)
    a = spd(4)
    a_cpu, a_tpu = a.clone().requires_grad_(), a.to("tpu").requires_grad_()
    factor_sums(a_cpu).pow(2).sum().backward()
    fallbacks = stats()["fallbacks"]
    torch.compile(factor_sums, backend="tpu")(a_tpu).pow(2).sum().backward()
    torch.testing.assert_close(a_tpu.grad.cpu(), a_cpu.grad)
    assert stats()["fallbacks"] == fallbacks, stats()["fallback_ops"]


def test_multivariate_normal_log_prob_under_compile():
    torch.manual_seed(0)
    cov, loc, x = spd(3, batch=2), torch.randn(2, 3), torch.randn(5, 2, 3)

    def log_prob(loc, cov, x):
        return torch.distributions.MultivariateNormal(loc, covariance_matrix=cov).log_prob(x)

    fallbacks = stats()["fallbacks"]
    out = torch.compile(log_prob, backend="tpu")(loc.to("tpu"), cov.to("tpu"), x.to("tpu"))
    torch.testing.assert_close(out.cpu(), log_prob(loc, cov, x))
    assert stats()["fallbacks"] == fallbacks, stats()["fallback_ops"]


@pytest.mark.filterwarnings("ignore:torch_tpu.compile. recompiling")
def test_dynamic_shapes_keep_the_check():
    torch.manual_seed(0)
    specializations = stats()["specializations"]
    fn = torch.compile(factor_sums, backend="tpu", dynamic=True)
    for n in (3, 4):
        a = spd(n, batch=2)
        torch.testing.assert_close(fn(a.to("tpu")).cpu(), factor_sums(a))
    bad = spd(4, batch=2)
    bad[0, 0, 0] = -1.0
    with pytest.raises(torch.linalg.LinAlgError, match="order 1"):
        fn(bad.to("tpu"))
    assert stats()["specializations"] > specializations  # the symbolic-shape path ran


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
def test_torch_cholesky_and_cholesky_solve_under_compile():
    # torch.cholesky and cholesky_solve have no lowering of their own: torch_tpu decomposes them
    # (the former with a direct error check, not an effect token) into ops the table lowers.
    torch.manual_seed(0)
    a, rhs = spd(4, batch=1), torch.randn(3, 4, 2)  # the factor broadcasts over rhs's batch

    def solve(a, rhs):
        return torch.cholesky_solve(rhs, torch.cholesky(a))

    fallbacks = stats()["fallbacks"]
    fn = torch.compile(solve, backend="tpu")
    torch.testing.assert_close(fn(a.to("tpu"), rhs.to("tpu")).cpu(), solve(a, rhs))
    assert stats()["fallbacks"] == fallbacks, stats()["fallback_ops"]
    bad = a.clone()
    bad[0, 1, 1] = -50.0
    with pytest.raises(torch.linalg.LinAlgError) as cpu_error:
        solve(bad, rhs)
    with pytest.raises(torch.linalg.LinAlgError) as tpu_error:
        fn(bad.to("tpu"), rhs.to("tpu"))
    assert str(tpu_error.value) == str(cpu_error.value)


def _nonnegative_doubled(x: torch.Tensor) -> torch.Tensor:
    torch._assert_async((x >= 0).all(), "values must be non-negative")
    return x * 2


def test_assert_async_is_checked_not_dropped():
    """A failing torch._assert_async in a compiled graph raises its message by the next
    synchronization, as in eager mode (it was dropped before); a passing one costs no fallback.
    (Without a message, AOTAutograd itself removes the assertion as dead code: CPU under
    aot_eager does not raise either.)"""
    fn = torch.compile(_nonnegative_doubled, backend="tpu")
    fallbacks = stats()["fallbacks"]
    assert fn(torch.ones(3, device="tpu")).cpu().tolist() == [2.0, 2.0, 2.0]
    assert stats()["fallbacks"] == fallbacks
    with pytest.raises(RuntimeError, match="values must be non-negative"):
        fn(-torch.ones(3, device="tpu"))
        torch.tpu.synchronize()
    # The failed check leaves the device usable.
    assert fn(torch.arange(3.0, device="tpu")).cpu().tolist() == [0.0, 2.0, 4.0]

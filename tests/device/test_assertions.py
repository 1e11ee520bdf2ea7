"""torch._assert_async and its functional form on tpu values: a failed check raises the
assertion's message (at the call in debug mode; at the stream's next synchronization in strict
and fused modes, as CUDA reports device-side asserts), a passing one changes nothing, and
torch.compile's graphs with such checks run."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

MODES = ["debug", "strict", "fused"]


@pytest.mark.parametrize("mode", MODES)
def test_passing_assert_is_silent(mode: str) -> None:
    torch_tpu.set_mode(mode)
    x = torch.arange(5, device="tpu")
    torch._assert_async(x.sum() > 0)
    torch._assert_async(x.max() == 4, "max is 4")
    tok = torch.ops.aten._make_dep_token(device="tpu")
    out = torch.ops.aten._functional_assert_async.msg(x.min() == 0, "min is 0", tok)
    assert out.device.type == "tpu"
    assert (x * 2).cpu().tolist() == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("mode", MODES)
def test_failed_assert_raises_its_message_by_the_next_sync(mode: str) -> None:
    torch_tpu.set_mode(mode)
    labels = torch.tensor([0, 3, 7], device="tpu")
    with pytest.raises(RuntimeError, match="labels out of range"):
        torch._assert_async((labels < 5).all(), "labels out of range")
        torch.tpu.synchronize()
    # The stream is usable again, and the values it computed are right.
    assert (labels + 1).cpu().tolist() == [1, 4, 8]


@pytest.mark.parametrize("mode", MODES)
def test_failed_assert_without_message(mode: str) -> None:
    torch_tpu.set_mode(mode)
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
        torch._assert_async(torch.zeros((), device="tpu"))
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="Assertion is failed"):
        torch.ops.aten._assert_async.msg(torch.tensor(False, device="tpu"), "")
        torch.tpu.synchronize()


def test_strict_mode_does_not_wait_for_the_value() -> None:
    torch_tpu.set_mode("strict")
    before = torch_tpu.metrics()["host_syncs"]
    x = torch.randn(64, 64, device="tpu")
    torch._assert_async(torch.isfinite(x @ x).all(), "not finite")
    assert torch_tpu.metrics()["host_syncs"] == before
    torch.tpu.synchronize()


@pytest.mark.parametrize("numel", [0, 2])
def test_ambiguous_shapes_raise_at_the_call_as_on_cpu(numel: int) -> None:
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="Boolean value of Tensor with .* ambiguous"):
            torch._assert_async(torch.ones(numel, device=device))


def test_compiled_graph_with_assert_matches_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch._assert_async((x > -100).all(), "too small")
        return x.relu() * 2

    x = torch.randn(8)
    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x))

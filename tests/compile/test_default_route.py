"""torch.compile(model) with no backend: tpu graphs go to the tpu backend, others to Inductor.

Also: Dynamo's device interface for "tpu" is ours (current device, streams), not the
placeholder torch ships for Inductor's Pallas path.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.device_interface import get_interface_for_device

import torch_tpu
from torch_tpu.compile import stats
from torch_tpu.models import MLP


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_default_backend_compiles_tpu_graphs_with_ours():
    torch.manual_seed(0)
    model = MLP().to("tpu").eval()
    x = torch.randn(8, 32).to("tpu")
    before = stats()
    with torch.no_grad():
        got = torch.compile(model)(x)
        want = model(x)
    after = stats()
    assert after["graphs_seen"] == before["graphs_seen"] + 1
    programs = ("graphs_compiled", "graphs_reused", "graphs_loaded")  # another test may have made it
    assert sum(after[k] for k in programs) == sum(before[k] for k in programs) + 1
    assert after["fallbacks"] == before["fallbacks"]
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-5)  # see test_compile._close


def test_default_backend_routes_graphs_that_only_create_tpu_tensors():
    def f(n: torch.Tensor):
        return torch.arange(6, device="tpu", dtype=torch.float32) * 2

    before = stats()["graphs_seen"]
    got = torch.compile(f)(torch.tensor(1))
    assert stats()["graphs_seen"] == before + 1
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), torch.arange(6, dtype=torch.float32) * 2)


def test_cpu_graphs_still_go_to_the_default_compiler():
    before = stats()["graphs_seen"]
    x = torch.randn(5)
    got = torch.compile(lambda t: torch.relu(t) + 1)(x)
    assert stats()["graphs_seen"] == before  # never reached the tpu backend
    torch.testing.assert_close(got, torch.relu(x) + 1)


def test_device_interface_is_ours():
    iface = get_interface_for_device("tpu")
    assert iface.device_count() == torch.tpu.device_count()
    assert iface.current_device() == torch.tpu.current_device()
    assert iface.is_available()
    assert iface.current_stream() == torch.tpu.current_stream()
    with iface.device(0):
        assert iface.current_device() == 0


def test_tpu_device_apis_work_inside_compiled_functions():
    # Dynamo cannot trace into the pybind functions behind them: they run between graphs.
    def f(x):
        torch.tpu.synchronize()
        return x * torch.tpu.current_device() + 1

    x = torch.randn(4).to("tpu")
    got = torch.compile(f, backend="tpu")(x)
    torch.testing.assert_close(got.cpu(), x.cpu() * torch_tpu.device.current_device() + 1)

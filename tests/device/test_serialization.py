"""torch.save / torch.load of tpu tensors and state dicts (OpenReg: test_serialization.py)."""

from __future__ import annotations

import io

import torch


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_save_load_tensor_stays_on_tpu() -> None:
    x = torch.randn(3, 4).to("tpu")
    y = _roundtrip(x)
    assert y.device == torch.device("tpu:0")
    torch.testing.assert_close(y.cpu(), x.cpu())
    assert y.data_ptr() != x.data_ptr()


def test_map_location_cpu_and_tpu() -> None:
    x = torch.arange(6.0).to("tpu")
    y = _roundtrip(x, map_location="cpu")
    assert y.device.type == "cpu"
    torch.testing.assert_close(y, torch.arange(6.0))
    z = _roundtrip(torch.arange(3.0), map_location="tpu")
    assert z.device == torch.device("tpu:0")
    torch.testing.assert_close(z.cpu(), torch.arange(3.0))
    w = _roundtrip(x, map_location=torch.device("tpu:0"))
    assert w.is_tpu


def test_views_keep_sharing_after_load() -> None:
    base = torch.arange(8.0).to("tpu")
    view = base[2:6]
    a, b = _roundtrip([base, view])
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert b.storage_offset() == 2
    b.mul_(-1)
    torch.testing.assert_close(a.cpu(), torch.tensor([0.0, 1.0, -2.0, -3.0, -4.0, -5.0, 6.0, 7.0]))


def test_state_dict_roundtrip() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("tpu")
    sd = model.state_dict()
    for location, dev_type in ((None, "tpu"), ("cpu", "cpu"), ("tpu", "tpu")):
        loaded = _roundtrip(sd, **({} if location is None else {"map_location": location}))
        assert set(loaded) == set(sd)
        for k, v in loaded.items():
            assert v.device.type == dev_type, k
            torch.testing.assert_close(v.cpu(), sd[k].cpu())
    # Load a cpu checkpoint into a tpu model and compare outputs.
    cpu_sd = _roundtrip(sd, map_location="cpu")
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("tpu")
    model2.load_state_dict(cpu_sd)
    assert all(p.is_tpu for p in model2.parameters())
    inp = torch.randn(5, 4)
    torch.testing.assert_close(model2(inp.to("tpu")).cpu(), model(inp.to("tpu")).cpu())


def test_optimizer_state_dict_roundtrip() -> None:
    p = torch.nn.Parameter(torch.ones(3).to("tpu"))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.full((3,), 2.0).to("tpu")
    opt.step()
    sd = _roundtrip(opt.state_dict(), map_location="tpu")
    buf = sd["state"][0]["momentum_buffer"]
    assert buf.is_tpu
    torch.testing.assert_close(buf.cpu(), torch.full((3,), 2.0))


def test_save_to_file(tmp_path) -> None:
    path = tmp_path / "t.pt"
    x = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).to("tpu")
    torch.save({"x": x, "n": 3}, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded["n"] == 3 and loaded["x"].is_tpu and loaded["x"].dtype == torch.int32
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert loaded["x"].device.type == "cpu"

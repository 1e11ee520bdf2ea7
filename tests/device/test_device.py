"""torch.tpu device management, torch.accelerator, generated methods, execution modes
(OpenReg: test_device.py, test_misc.py)."""

from __future__ import annotations

import pytest
import torch

import torch_tpu


# -- torch.tpu: devices ------------------------------------------------------------------------

def test_is_available_and_count() -> None:
    assert torch.tpu.is_available() is True
    assert torch.tpu.device_count() == 1  # TORCH_TPU_NUM_DEVICES defaults to 1
    torch.empty(1, device="tpu")
    assert torch.tpu.is_initialized() and torch.tpu._initialized


@pytest.mark.parametrize("first_use", ["torch.empty(2, device='tpu')", "torch.tpu.set_device(1)",
                                       "torch.tpu.current_device()", "torch.tpu.synchronize()",
                                       "torch.tpu.init()", "torch.accelerator.set_device_index(1)"])
def test_is_initialized_is_false_until_first_use_like_cuda(subprocess_py, first_use: str) -> None:
    # DeviceMesh sets each rank's device from LOCAL_RANK only while is_initialized() is False;
    # checkpoint stashes the device RNG state only once _initialized is True.
    subprocess_py(f"""
        import torch, torch_tpu
        assert torch.tpu.is_available() and torch.tpu.device_count() == 2
        assert not torch.tpu.is_initialized() and not torch.tpu._initialized
        torch.ones(3).sum()  # CPU work does not count
        assert not torch.tpu.is_initialized()
        {first_use}
        assert torch.tpu.is_initialized() and torch.tpu._initialized
    """, TORCH_TPU_NUM_DEVICES="2")


def test_backend_name_and_device_type() -> None:
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    t = torch.empty(2, device="tpu")
    assert t.device == torch.device("tpu", 0)
    assert t.device.type == "tpu" and t.device.index == 0
    assert t.is_tpu and not torch.empty(2).is_tpu
    assert t.get_device() == 0


def test_current_and_set_device() -> None:
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0
    with pytest.raises(RuntimeError, match=r"Invalid device index tpu:3"):
        torch.tpu.set_device(3)
    assert torch.tpu.current_device() == 0
    with pytest.raises(ValueError, match="Expected a tpu device"):
        torch.tpu.set_device("cpu")


def test_device_context_managers() -> None:
    with torch.tpu.device(0) as d:
        assert torch.tpu.current_device() == 0
        assert d.idx == 0
    # device(None) / device(-1) are no-ops, like torch.cuda.device.
    with torch.tpu.device(None):
        assert torch.tpu.current_device() == 0
    x = torch.ones(2, device="tpu")
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(2)):  # CPU tensor: no-op
        assert torch.tpu.current_device() == 0
    with pytest.raises(RuntimeError, match="Invalid device index"):
        with torch.tpu.device(7):
            pass


def test_synchronize_completes_queued_work() -> None:
    x = torch.ones(64, 64, device="tpu")
    for _ in range(10):
        x = x + 1
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    assert torch.tpu.current_stream().query()
    torch.testing.assert_close(x.cpu(), torch.full((64, 64), 11.0))


def test_device_name_and_properties() -> None:
    name = torch.tpu.get_device_name()
    assert isinstance(name, str) and "TPU" in name
    assert torch.tpu.get_device_name(0) == name == torch.tpu.get_device_name("tpu:0")
    props = torch.tpu.get_device_properties(0)
    assert props.name == name
    assert isinstance(props.total_memory, int) and props.total_memory > 0
    assert props.total_memory == torch.tpu.mem_get_info()[1]
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.tpu.get_device_properties(5)


def test_bf16_supported_and_amp_dtypes() -> None:
    assert torch.tpu.is_bf16_supported() is True
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()


# -- torch.accelerator -------------------------------------------------------------------------

def test_accelerator_reports_tpu() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    s = torch.accelerator.current_stream()
    assert s.device_type == torch.device("tpu").type or s.device.type == "tpu"
    assert s == torch.tpu.current_stream()
    x = torch.ones(8, device="tpu") * 3
    torch.accelerator.synchronize()
    assert x.sum().item() == 24.0


def test_accelerator_memory_functions() -> None:
    torch.tpu.synchronize()
    base = torch.accelerator.memory_allocated()
    assert base == torch.tpu.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="tpu")
    assert torch.accelerator.memory_allocated() == base + (1 << 20)
    assert torch.accelerator.max_memory_allocated() >= base + (1 << 20)
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_reserved() >= torch.accelerator.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.tpu.get_device_properties(0).total_memory
    assert (free, total) == torch.tpu.mem_get_info()
    del x
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated() == base


# -- generated methods -------------------------------------------------------------------------

def test_tensor_tpu_method() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    y = x.tpu()
    assert y.is_tpu and y.device == torch.device("tpu:0")
    torch.testing.assert_close(y.cpu(), x)
    assert x.tpu(0).device.index == 0
    assert y.tpu() is y  # already there: no copy, like Tensor.cuda()
    nb = x.tpu(non_blocking=True)
    torch.testing.assert_close(nb.cpu(), x)
    assert x.to("tpu").is_tpu and x.to(torch.device("tpu")).is_tpu


def test_module_tpu_method() -> None:
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    ref = m(torch.ones(2, 4))
    m.tpu()
    assert all(p.is_tpu for p in m.parameters())
    out = m(torch.ones(2, 4, device="tpu"))
    assert out.is_tpu
    torch.testing.assert_close(out.cpu(), ref)
    m.cpu()
    assert not any(p.is_tpu for p in m.parameters())


def test_storage_methods() -> None:
    x = torch.arange(4, dtype=torch.float32)
    s = x.untyped_storage().tpu()
    assert s.is_tpu and s.device == torch.device("tpu:0")
    assert s.nbytes() == 16
    back = torch.empty(0).set_(s.cpu())
    torch.testing.assert_close(back, x)
    assert not x.untyped_storage().is_tpu
    t = x.tpu()
    assert t.untyped_storage().is_tpu
    assert t.untyped_storage().device.type == "tpu"


# -- execution modes ---------------------------------------------------------------------------

def test_get_set_mode() -> None:
    assert torch_tpu.get_mode() == "strict"
    torch_tpu.set_mode("debug")
    assert torch_tpu.get_mode() == "debug"
    x = torch.ones(3, device="tpu") + 1
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    torch_tpu.set_mode("strict")
    assert torch_tpu.get_mode() == "strict"
    with pytest.raises(ValueError, match="unknown execution mode 'bogus'"):
        torch_tpu.set_mode("bogus")
    torch_tpu.set_mode("fused")
    assert torch_tpu.get_mode() == "fused"
    torch_tpu.set_mode("strict")
    assert torch_tpu.get_mode() == "strict"


def test_mode_context_manager_restores() -> None:
    with torch_tpu.mode("debug"):
        assert torch_tpu.get_mode() == "debug"
        y = torch.full((2,), 4.0, device="tpu") * 2
    assert torch_tpu.get_mode() == "strict"
    assert y.cpu().tolist() == [8.0, 8.0]
    with pytest.raises(ZeroDivisionError):
        with torch_tpu.mode("debug"):
            raise ZeroDivisionError
    assert torch_tpu.get_mode() == "strict"


def _out_of_bounds_gather() -> torch.Tensor:
    """A gather whose last index is out of range. Its output (64Ki elements) is too large for
    strict mode's inline fast path (small programs run on the calling thread when the stream is
    idle), so in strict mode it is always queued."""
    x = torch.arange(4.0).to("tpu")
    idx = torch.zeros(1 << 16, dtype=torch.int64)
    idx[-1] = 7
    return x[idx.to("tpu")]


def test_debug_mode_raises_at_call_site() -> None:
    # The out-of-range index is only seen when the program runs: debug mode runs it inline.
    with torch_tpu.mode("debug"):
        with pytest.raises(IndexError, match="out of bounds"):
            _out_of_bounds_gather()


def test_strict_mode_raises_at_next_sync() -> None:
    y = _out_of_bounds_gather()  # queued: no error yet
    with pytest.raises(IndexError, match="out of bounds"):
        torch.tpu.synchronize()
    # The error is not sticky: the device keeps working.
    assert (torch.ones(2, device="tpu") * 5).cpu().tolist() == [5.0, 5.0]
    # The failed op's result was never written: using it raises again instead of reading garbage.
    with pytest.raises(IndexError, match="value was lost.*index 7 is out of bounds"):
        y.sum()
    with pytest.raises(IndexError, match="value was lost"):
        y.cpu()


def test_launch_blocking_selects_debug(subprocess_py) -> None:
    code = """
        import torch, torch_tpu
        assert torch_tpu.get_mode() == "debug", torch_tpu.get_mode()
        x = torch.arange(4.0).to("tpu")
        try:
            x[torch.tensor([7]).to("tpu")]
        except IndexError:
            print("raised-at-call")
        print(torch_tpu.get_mode())
    """
    out = subprocess_py(code, TORCH_TPU_LAUNCH_BLOCKING="1", TORCH_TPU_MODE="strict").stdout.split()
    assert out == ["raised-at-call", "debug"]
    out = subprocess_py("import torch, torch_tpu; print(torch_tpu.get_mode())", TORCH_TPU_MODE="debug").stdout
    assert out.strip() == "debug"


def test_env_vars_registry() -> None:
    names = {name for name, _, _ in torch_tpu.env_vars()}
    assert {"TORCH_TPU_MODE", "TORCH_TPU_LAUNCH_BLOCKING", "TORCH_TPU_NUM_DEVICES", "TORCH_TPU_HOST_MEMORY",
            "TORCH_TPU_FALLBACK"} <= names


def test_metrics_count_ops_and_transfers() -> None:
    torch_tpu.reset_metrics()
    x = torch.arange(6.0).to("tpu")
    y = (x * 2 + 1).sum()
    assert y.item() == 36.0
    m = torch_tpu.metrics()
    assert m["ops_dispatched"] >= 3
    assert m["bytes_to_device"] == 24
    assert m["bytes_from_device"] >= 4
    assert m["host_syncs"] >= 1
    assert m["fallbacks"] == {}


def test_sync_debug_mode_warns_or_raises_at_host_reads() -> None:
    import warnings

    x = torch.arange(4.0, device="tpu")
    y = x * 2  # no host read: never reported
    try:
        torch.tpu.set_sync_debug_mode("warn")
        assert torch.tpu.get_sync_debug_mode() == 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            z = y + 1
            assert not caught
            assert z.sum().item() == 16.0
        assert any("synchronizing tpu operation" in str(w.message) for w in caught), caught
        torch.tpu.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match="synchronizing tpu operation"):
            y.cpu()
        with pytest.raises(RuntimeError, match="synchronizing tpu operation"):
            torch.nonzero(y)
    finally:
        torch.tpu.set_sync_debug_mode("default")
    assert torch.tpu.get_sync_debug_mode() == 0
    assert torch.equal(y.cpu(), torch.tensor([0.0, 2.0, 4.0, 6.0]))  # usable after the errors
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.tpu.set_sync_debug_mode("loud")

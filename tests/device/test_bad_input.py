"""Errors a user can hit, with PyTorch-style messages, and robustness of the device layer under
misuse: mixed devices, bad indices and dtypes, OOM recovery, threads, frees while work is queued,
ops with no lowering and the CPU fallback (OpenReg: test_misc.py error cases)."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import torch_tpu
from torch_tpu.lowering import LOWERINGS


def test_mixed_cpu_tpu_operands() -> None:
    a = torch.ones(3, device="tpu")
    b = torch.ones(3)
    for fn in (lambda: a + b, lambda: b + a, lambda: torch.mm(a.view(3, 1), b.view(1, 3)), lambda: a.mul_(b),
               lambda: torch.where(a > 0, a, b)):
        with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at "
                                               r"least two devices, (tpu:0 and cpu|cpu and tpu:0)"):
            fn()


def test_cpu_scalar_tensor_mixes_like_pytorch() -> None:
    # A 0-d CPU tensor is a scalar and may mix with any device, as in PyTorch.
    a = torch.arange(3.0).to("tpu")
    out = a * torch.tensor(2.0)
    assert out.is_tpu
    torch.testing.assert_close(out.cpu(), torch.tensor([0.0, 2.0, 4.0]))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_cpu_index_tensors_index_device_tensors_like_cuda(mode: str) -> None:
    # As on CUDA, advanced indexing takes index and mask tensors from the CPU (nn.init.sparse_
    # relies on it); other mixed operands still raise (test_mixed_cpu_tpu_operands).
    cpu = torch.arange(12.0).view(3, 4)
    idx, mask = torch.tensor([2, 0]), torch.tensor([True, False, True])
    with torch_tpu.mode(mode):
        t = cpu.to("tpu")
        assert torch.equal(t[idx].cpu(), cpu[idx])
        assert torch.equal(t[mask].cpu(), cpu[mask])
        assert torch.equal(t[:, idx].cpu(), cpu[:, idx])
        for key, value in ((idx, 0.0), (mask, -1.0), ((idx, torch.tensor([1, 3])), 5.0)):
            got, want = t.clone(), cpu.clone()
            got[key] = value
            want[key] = value
            assert torch.equal(got.cpu(), want)
        got, want = t.clone(), cpu.clone()
        got.index_put_((idx,), torch.ones(2, 4, device="tpu"), accumulate=True)
        want.index_put_((idx,), torch.ones(2, 4), accumulate=True)
        assert torch.equal(got.cpu(), want)
        w = torch.empty(8, 4, device="tpu")
        torch.nn.init.sparse_(w, sparsity=0.5)
        assert ((w == 0).sum(0).cpu() == 4).all()


def test_bad_index_errors_name_the_index_as_cpu_does() -> None:
    t = torch.arange(10.0, device="tpu")
    for bad in (15, -11):
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for a dimension with size 10"):
            t[torch.tensor([0, bad], device="tpu")].cpu()
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for a dimension with size 10"):
            t.clone().index_put_((torch.tensor([bad], device="tpu"),), torch.tensor(1.0, device="tpu")).cpu()


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_writes_overlapping_their_inputs_raise_like_cpu(mode: str) -> None:
    cases = {
        "partial copy": lambda a: a[1:].copy_(a[:-1]),
        "partial out=": lambda a: torch.add(a[1:], a[:-1], out=a[:-1]),
        "expanded copy": lambda a: a[:3].expand(2, 3).copy_(torch.ones(2, 3, device=a.device)),
        "expanded copy from host": lambda a: a[:3].expand(2, 3).copy_(torch.ones(2, 3)),
        "resized out= that is an input": lambda a: torch.cat([a, a], out=a),
        "foreach element 1": lambda a: torch._foreach_add_([a[:2].clone(), a[1:]], [a[:2].clone(), a[:-1]]),
    }
    with torch_tpu.mode(mode):
        for device in ("tpu", "cpu"):  # CPU raises the same error
            for name, fn in cases.items():
                try:
                    fn(torch.arange(6.0, device=device))
                except RuntimeError as e:
                    assert "unsupported operation" in str(e), (name, device, e)
                else:
                    raise AssertionError(f"{name} on {device}: no error")
        square = torch.arange(4.0, device="tpu").view(2, 2)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            square.add_(square.t())
        # Full aliases and disjoint views stay fine, as on CPU.
        a = torch.arange(6.0, device="tpu")
        a.add_(a)
        a[:3].copy_(a[3:])
        torch.mm(square, square, out=square)
        assert a.tolist() == [6.0, 8.0, 10.0, 6.0, 8.0, 10.0]
        assert square.tolist() == [[2.0, 3.0], [6.0, 11.0]]


def test_invalid_device_index() -> None:
    with pytest.raises(RuntimeError, match=r"Invalid device index tpu:5: torch_tpu has 1 device\(s\)"):
        torch.empty(1, device="tpu:5")
    with pytest.raises(RuntimeError, match="Invalid device index tpu:5"):
        torch.ones(2).to("tpu:5")
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.tpu.synchronize(5)


@pytest.mark.parametrize("dtype", [torch.complex32, torch.float8_e4m3fn, torch.uint16])
def test_unsupported_dtype_rejected(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"is not supported on the tpu device"):
        torch.empty(2, dtype=dtype, device="tpu")
    with pytest.raises(TypeError, match=r"is not supported on the tpu device"):
        torch.zeros(2).to(dtype).to("tpu")


def test_complex_op_without_lowering_names_the_dtype() -> None:
    # tests/ops/test_complex.py covers what complex tensors support; an op outside it raises.
    z = torch.ones(2, dtype=torch.complex64, device="tpu")
    with pytest.raises(NotImplementedError, match=r"aten::cumprod.*complex64"):
        torch.cumprod(z, 0)


def test_oom_is_reported_and_recoverable(subprocess_py) -> None:
    out = subprocess_py("""
        import re, torch, torch_tpu
        MiB = 1 << 20
        assert torch.tpu.get_device_properties(0).total_memory == 64 * MiB
        keep = torch.empty(40 * MiB, dtype=torch.uint8, device="tpu")
        try:
            torch.empty(40 * MiB, dtype=torch.uint8, device="tpu")
        except torch.OutOfMemoryError as e:
            msg = str(e)
        else:
            raise AssertionError("no OOM")
        assert "Tried to allocate 40.00 MiB" in msg, msg
        assert "capacity of 64.00 MiB" in msg and "40.00 MiB is allocated" in msg, msg
        assert re.search(r"24\\.00 MiB is free", msg), msg
        assert torch.tpu.memory_stats()["num_ooms"] == 1
        # An op whose output does not fit raises the same error.
        x = torch.ones(4 * MiB, device="tpu")   # 16 MiB
        try:
            y = x * 2
            z = x + y   # 3 x 16 MiB + 40 MiB > 64 MiB
            torch.tpu.synchronize()
        except torch.OutOfMemoryError:
            pass
        else:
            raise AssertionError("no OOM for op outputs")
        # Free and carry on.
        del keep
        y = z = None
        torch.tpu.empty_cache()
        big = torch.ones(10 * MiB, device="tpu")   # 40 MiB (+ x: 56 MiB)
        assert big.sum().item() == 10 * MiB
        del big
        assert (x * 3).sum().item() == 12 * MiB
        print("recovered", torch.tpu.memory_stats()["num_ooms"])
    """, TORCH_TPU_HOST_MEMORY="64MiB").stdout
    assert out.split() == ["recovered", "2"]


def test_concurrent_python_threads() -> None:
    results: dict[int, float] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            a = torch.full((64, 64), float(k)).to("tpu")
            b = torch.eye(64).to("tpu")
            for _ in range(25):
                a = a @ b + 1.0
            results[k] = a.sum().item()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {k: 64 * 64 * (k + 25.0) for k in range(6)}


def test_free_while_op_queued() -> None:
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    a = torch.randn(256, 256)
    ta = a.to("tpu")
    tb = ta @ ta          # queued (strict mode)
    del ta                # the queued matmul keeps its input alive
    tc = (tb * 2).sum()
    del tb
    torch.tpu.synchronize()
    # A float32 sum of 65,536 products of N(0,1) matmul results (magnitudes ~1e3): a different
    # accumulation order moves it by ~1e-4 relative, so the check is relative.
    torch.testing.assert_close(tc.cpu(), (a @ a * 2).sum(), rtol=1e-4, atol=1e-2)
    del tc
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base


def test_free_inplace_target_while_queued() -> None:
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.zeros(1 << 16).to("tpu")
    for _ in range(5):
        x.add_(1.0)
    y = x[:4].clone()
    del x
    torch.tpu.synchronize()
    assert y.cpu().tolist() == [5.0] * 4
    del y
    assert torch.tpu.memory_allocated() == base


# -- ops with no lowering and the CPU fallback --------------------------------------------------

_lib = torch.library.Library("tpu_conformance", "DEF")
_lib.define("triple_plus_one(Tensor x) -> Tensor")
_lib.impl("triple_plus_one", lambda x: x * 3 + 1, "CPU")


def _unlowered_aten_op():
    """A rarely used aten op with no tpu lowering yet (the lowering table grows)."""
    candidates = [
        ("aten::polygamma", lambda x: torch.polygamma(2, x + 1)),
        ("aten::histc", lambda x: torch.histc(x, bins=4, min=0, max=4)),
        ("aten::special_zeta", lambda x: torch.special.zeta(x + 2, x + 1)),
        ("aten::special_airy_ai", lambda x: torch.special.airy_ai(x)),
        ("aten::special_bessel_y0", lambda x: torch.special.bessel_y0(x + 1)),
    ]
    keys = {str(k) for k in LOWERINGS}
    for name, fn in candidates:
        if not any(k == name or k.startswith(name + ".") for k in keys):
            return name, fn
    pytest.skip("every candidate op has a tpu lowering now; extend the candidate list")


def test_op_without_lowering_raises() -> None:
    x = torch.arange(4.0).to("tpu")
    with pytest.raises(NotImplementedError,
                       match=r"'tpu_conformance::triple_plus_one' is not implemented for the tpu device "
                             r"\(dtypes: float32\)"):
        torch.ops.tpu_conformance.triple_plus_one(x)
    with pytest.raises(NotImplementedError, match=r"\(dtypes: float64\)"):
        torch.ops.tpu_conformance.triple_plus_one(x.double())


def test_aten_op_without_lowering_raises() -> None:
    name, fn = _unlowered_aten_op()
    x = torch.arange(4.0).to("tpu")
    with pytest.raises(NotImplementedError, match=r"is not implemented for the tpu device \(dtypes: float32\)"):
        fn(x)
    assert torch_tpu.metrics()["fallbacks"] == {}


def test_cpu_fallback_runs_warns_once_and_counts(capfd) -> None:
    torch_tpu.reset_metrics()
    torch_tpu.set_fallback("cpu")
    assert torch_tpu.fallback_enabled()
    x = torch.arange(4.0).to("tpu")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [torch.ops.tpu_conformance.triple_plus_one(x) for _ in range(3)]
    for o in outs:
        assert o.is_tpu
        torch.testing.assert_close(o.cpu(), torch.tensor([1.0, 4.0, 7.0, 10.0]))
    # torch.ops calls have no Python warning handler, so the C++ warning may go to stderr
    # instead of the warnings module: count it in both places.
    err = capfd.readouterr().err
    n = sum("no tpu lowering" in str(w.message) for w in caught) + err.count("no tpu lowering")
    assert n == 1, (err, [str(w.message) for w in caught])
    assert "'tpu_conformance::triple_plus_one' has no tpu lowering" in err + "".join(str(w.message) for w in caught)
    assert torch_tpu.metrics()["fallbacks"] == {"tpu_conformance::triple_plus_one": 3}
    torch_tpu.set_fallback(None)
    assert not torch_tpu.fallback_enabled()
    with pytest.raises(NotImplementedError):
        torch.ops.tpu_conformance.triple_plus_one(x)


def test_cpu_fallback_for_aten_op_matches_cpu() -> None:
    name, fn = _unlowered_aten_op()
    torch_tpu.reset_metrics()
    torch_tpu.set_fallback("cpu")
    x = torch.arange(4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = fn(x.to("tpu"))
        b = fn(x.to("tpu"))
    assert a.is_tpu
    torch.testing.assert_close(a.cpu(), fn(x))
    torch.testing.assert_close(b.cpu(), fn(x))
    assert sum("no tpu lowering" in str(w.message) for w in caught) == 1
    counts = torch_tpu.metrics()["fallbacks"]
    assert sum(counts.values()) == 2 and all(k.startswith(name) for k in counts), counts


def test_set_fallback_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="fallback must be 'cpu' or None"):
        torch_tpu.set_fallback("gpu")

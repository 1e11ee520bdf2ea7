"""Hostile input behaves as on CPU and never crashes the process (issue 43, bad input part).

Each case runs the same call on CPU and on tpu and expects the same result: equal values where
CPU succeeds, the same exception type (and a fragment of CPU's message) where it raises. Cases
that used to kill the process (SIGFPE) or depend on the process environment run in a
subprocess, so a regression fails one test instead of ending the run.

(Named test_hostile_input.py: tests/device/test_bad_input.py already holds that basename, and
pytest's default import mode refuses two test modules of one name in a run.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

MODES = ["strict", "fused", "debug"]
INT_DTYPES = ["int8", "int16", "int32", "int64"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` with arguments `args` in a fresh interpreter (this checkout's torch_tpu first on
    the path) with extra environment variables; returns the process whatever its exit status."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _outcome(fn) -> tuple[str, object]:
    """("ok", values) or (exception type name, message) of calling fn."""
    try:
        out = fn()
        return "ok", out.cpu().tolist() if isinstance(out, torch.Tensor) else out
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e).__name__, str(e)


def _assert_like_cpu(cpu: tuple[str, object], tpu: tuple[str, object], fragment: str | None = None) -> None:
    assert tpu[0] == cpu[0], f"CPU gave {cpu}, tpu gave {tpu}"
    if cpu[0] == "ok":
        assert tpu[1] == cpu[1]
    else:
        want = fragment if fragment is not None else str(cpu[1]).splitlines()[0]
        assert want in str(tpu[1]), f"tpu's message {tpu[1]!r} lacks {want!r}"


# -- 1. integer division at MIN / -1 and by zero ------------------------------------------------

# Each expression over int tensors a (MIN, 7, -7, MIN, 5) and b; `a // -1` takes a Python number.
# "chain" runs the division between other integer ops, so fused mode records it inside a graph.
_DIV_EXPRS = {
    "floor_divide": "a // b",
    "div_trunc": "torch.div(a, b, rounding_mode='trunc')",
    "div_floor": "torch.div(a, b, rounding_mode='floor')",
    "remainder": "torch.remainder(a, b)",
    "fmod": "torch.fmod(a, b)",
    "floor_divide_scalar": "a // -1",
    "remainder_scalar": "torch.remainder(a, -1)",
    "fmod_scalar": "torch.fmod(a, -1)",
    "chain": "((a + 0) // b) * 1 + torch.remainder(a * 1, b)",
}
_DIVISORS = {"minus_one": [-1, -1, 2, 3, -1], "zero": [-1, 0, 2, 3, 1]}

_DIV_CHILD = """
    import json, sys, torch, torch_tpu
    mode, compiled = sys.argv[1], sys.argv[2] == "1"
    torch_tpu.set_mode(mode)
    exprs, divisors, dtypes = json.loads(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
    out = {}
    for dt_name in dtypes:
        dt = getattr(torch, dt_name)
        mn = torch.iinfo(dt).min
        for dname, d in divisors.items():
            for name, expr in exprs.items():
                fn = eval("lambda a, b: " + expr)
                if compiled:
                    torch._dynamo.reset()
                    fn = torch.compile(fn, backend="tpu")
                a = torch.tensor([mn, 7, -7, mn, 5], dtype=dt, device="tpu")
                b = torch.tensor(d, dtype=dt, device="tpu")
                try:
                    r = ("ok", fn(a, b).cpu().tolist())
                except Exception as e:
                    r = (type(e).__name__, str(e))
                out[f"{dt_name}/{dname}/{name}"] = r
    print("RESULT" + json.dumps(out))
"""


def _wrapped_trunc_div(a: list[int], b: list[int], dtype: torch.dtype) -> list[int]:
    """Truncating quotients wrapped to dtype's range (two's complement): -MIN is MIN."""
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    out = []
    for x, y in zip(a, b):
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        out.append((q - info.min) % span + info.min)
    return out


@pytest.mark.parametrize("mode", MODES + ["compiled"])
def test_integer_division_at_min_and_by_zero_matches_cpu(mode: str) -> None:
    # CPU itself dies of SIGFPE on int32/int64 `div(MIN, -1, rounding_mode="trunc")`: there the
    # expected value is MIN, what CPU's floor division and its int8/int16 kernels give.
    compiled = mode == "compiled"
    exprs = {"floor_divide": _DIV_EXPRS["floor_divide"], "chain": _DIV_EXPRS["chain"]} if compiled else _DIV_EXPRS
    proc = _run(_DIV_CHILD, "strict" if compiled else mode, "1" if compiled else "0", json.dumps(exprs),
                json.dumps(_DIVISORS), json.dumps(INT_DTYPES), timeout=600)
    assert proc.returncode == 0, f"child died (rc={proc.returncode}; -8 is SIGFPE)\n{proc.stderr[-3000:]}"
    got = json.loads(proc.stdout.split("RESULT", 1)[1])
    for dt_name in INT_DTYPES:
        dt = getattr(torch, dt_name)
        mn = torch.iinfo(dt).min
        for dname, d in _DIVISORS.items():
            for name, expr in exprs.items():
                a = torch.tensor([mn, 7, -7, mn, 5], dtype=dt)
                b = torch.tensor(d, dtype=dt)
                if name == "div_trunc" and dt in (torch.int32, torch.int64):  # CPU traps at MIN / -1
                    want = (("RuntimeError", "ZeroDivisionError") if 0 in d else
                            ("ok", _wrapped_trunc_div(a.tolist(), b.tolist(), dt)))
                else:
                    want = _outcome(lambda: eval("lambda a, b: " + expr)(a, b))
                _assert_like_cpu(want, tuple(got[f"{dt_name}/{dname}/{name}"]))


# -- 2. a broadcast (stride-0) operand is read in place, within the host memory cap -------------

_EXPAND_CHILD = """
    import json, resource, sys, torch, torch_tpu
    torch_tpu.set_mode(sys.argv[1])
    n = 2 ** 29  # 2 GiB of float32 if materialized: 8x the cap
    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    x = torch.ones(1, device="tpu")
    x.cpu()
    exprs = {"total": lambda t: t.expand(n).sum(), "mean": lambda t: t.expand(n).mean(),
             "rows": lambda t: t.view(1, 1).expand(n // 4096, 4096).sum(1),
             "columns": lambda t: t.view(1, 1).expand(n // 4096, 4096).sum(0)}
    out = {}
    for name, fn in exprs.items():
        before = peak_mib()
        got = fn(x).cpu()
        grew = peak_mib() - before
        want = fn(torch.ones(1))  # after the tpu run: CPU's own run is not measured
        out[name] = [grew, torch.equal(got, want), got.flatten()[:4].tolist(), want.flatten()[:4].tolist()]
    print("RESULT" + json.dumps(out))
"""


@pytest.mark.parametrize("mode", MODES)
def test_sum_of_an_expanded_view_stays_within_the_memory_cap(mode: str) -> None:
    proc = _run(_EXPAND_CHILD, mode, TORCH_TPU_HOST_MEMORY="256MiB")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (grew, equal, got, want) in json.loads(proc.stdout.split("RESULT", 1)[1]).items():
        assert equal, f"{name}: tpu {got} vs CPU {want}"
        # The result and the kernels' working buffers: a few MiB (materializing would be 2048).
        assert grew < 64, f"{name}: peak RSS grew by {grew:.0f} MiB"


# -- 4e. configuration variables out of range are errors naming the variable and the range ------

_IMPORT_CHILD = """
    import torch
    try:
        import torch_tpu
        torch.ones(1, device="tpu").cpu()
    except Exception as e:
        print("RAISED", type(e).__name__, e)
    else:
        print("ACCEPTED", torch.tpu.device_count(), torch.tpu.get_device_properties().total_memory)
"""


@pytest.mark.parametrize("name, value, accepted", [
    ("TORCH_TPU_NUM_DEVICES", "0", "from 1 to 64"),
    ("TORCH_TPU_NUM_DEVICES", "-1", "from 1 to 64"),
    ("TORCH_TPU_NUM_DEVICES", "10000", "from 1 to 64"),
    ("TORCH_TPU_NUM_DEVICES", "abc", "from 1 to 64"),
    ("TORCH_TPU_NUM_DEVICES", "2x", "from 1 to 64"),
    ("TORCH_TPU_HOST_MEMORY", "99999999999999999999GB", "1 to 18446744073709551615 bytes"),
    ("TORCH_TPU_HOST_MEMORY", "0", "1 to 18446744073709551615 bytes"),
    ("TORCH_TPU_HOST_MEMORY", "1.2.3MB", "1 to 18446744073709551615 bytes"),
    ("TORCH_TPU_CACHE_MAX_BYTES", "99999999999999999999GB", "0 to 18446744073709551615 bytes"),
    ("TORCH_TPU_HOST_SCRATCH_CACHE", "18446744073709551616", "0 to 18446744073709551615 bytes"),
])
def test_bad_configuration_is_a_clear_error_at_import(name: str, value: str, accepted: str) -> None:
    proc = _run(_IMPORT_CHILD, **{name: value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"RAISED ValueError torch_tpu: {name}='{value}'" in proc.stdout, proc.stdout
    assert accepted in proc.stdout, proc.stdout


@pytest.mark.parametrize("name, value, devices, memory", [
    ("TORCH_TPU_NUM_DEVICES", "3", 3, None),
    ("TORCH_TPU_HOST_MEMORY", "256MiB", 1, 256 << 20),
    ("TORCH_TPU_HOST_MEMORY", "1.5GB", 1, 1_500_000_000),
])
def test_good_configuration_is_accepted(name: str, value: str, devices: int, memory: int | None) -> None:
    proc = _run(_IMPORT_CHILD, **{name: value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    words = proc.stdout.split()
    assert words[0] == "ACCEPTED", proc.stdout
    assert int(words[1]) == devices
    if memory is not None:
        assert int(words[2]) == memory


# -- 3. multinomial refuses invalid distributions ----------------------------------------------

_INF, _NAN = float("inf"), float("nan")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("probs", [[0.5, -0.1, 0.6], [0.5, _NAN], [1.0, _INF], [1.0, -_INF], [0.0, 0.0]],
                         ids=["negative", "nan", "inf", "minus_inf", "all_zero"])
@pytest.mark.parametrize("replacement, samples", [(False, 1), (False, 2), (True, 1), (True, 2)])
@pytest.mark.parametrize("rows", [1, 2])
def test_multinomial_refuses_invalid_distributions_like_cpu(mode: str, probs: list[float], replacement: bool,
                                                            samples: int, rows: int) -> None:
    p = torch.tensor(probs)
    if rows == 2:  # a valid row first: the bad one is not the first the check sees
        p = torch.stack([torch.ones(len(probs)), p])
    cpu = _outcome(lambda: torch.multinomial(p, samples, replacement))
    assert cpu[0] == "RuntimeError"
    with torch_tpu.mode(mode):
        tpu = _outcome(lambda: torch.multinomial(p.to("tpu"), samples, replacement))
    _assert_like_cpu(cpu, tpu)
    assert "multinomial" in str(tpu[1])


@pytest.mark.parametrize("mode", MODES)
def test_multinomial_argument_errors_and_valid_rows_like_cpu(mode: str) -> None:
    calls = {
        "more samples than categories": lambda d: torch.multinomial(torch.ones(3, device=d), 4),
        "no samples": lambda d: torch.multinomial(torch.ones(3, device=d), 0),
        "integer probabilities": lambda d: torch.multinomial(torch.ones(3, dtype=torch.int64, device=d), 2, True),
        "3-d": lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
        "no rows": lambda d: torch.multinomial(torch.ones(0, 3, device=d), 2),
        # One category with all the mass: every sample is known.
        "one-hot rows": lambda d: torch.multinomial(torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.5]], device=d), 4,
                                                    True),
        "one-hot rows without replacement": lambda d: torch.multinomial(
            torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.5]], device=d), 1),
    }
    with torch_tpu.mode(mode):
        for name, fn in calls.items():
            cpu, tpu = _outcome(lambda: fn("cpu")), _outcome(lambda: fn("tpu"))
            if cpu[0] == "ok":
                assert tpu == cpu, name
            else:
                _assert_like_cpu(cpu, tpu, str(cpu[1]))


# -- 4b-d. index errors and empty integer softmax ----------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", [15, -11])
def test_take_and_index_fill_name_the_bad_index(mode: str, bad: int) -> None:
    t = torch.arange(10.0)
    idx = torch.tensor([0, bad])
    calls = {"take": lambda x, i: torch.take(x, i), "put_": lambda x, i: x.clone().put_(i, torch.ones_like(x[:2])),
             "index_fill_": lambda x, i: x.clone().index_fill_(0, i, 1.0)}
    with torch_tpu.mode(mode):
        for name, fn in calls.items():
            cpu = _outcome(lambda: fn(t, idx))
            tpu = _outcome(lambda: fn(t.to("tpu"), idx.to("tpu")))
            assert cpu[0] == "IndexError", name
            _assert_like_cpu(cpu, tpu, f"index {bad}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_of_integer_tensors_like_cpu(mode: str, fn) -> None:
    cases = [((0,), torch.int64, 0), ((0, 3), torch.int32, 0), ((2, 0), torch.bool, 1), ((2, 3), torch.int64, 0),
             ((2, 3), torch.int32, 1), ((), torch.int64, 0)]
    with torch_tpu.mode(mode):
        for shape, dtype, dim in cases:
            x = torch.zeros(shape, dtype=dtype)
            cpu = _outcome(lambda: fn(x, dim))
            tpu = _outcome(lambda: fn(x.to("tpu"), dim))
            _assert_like_cpu(cpu, tpu)
            if cpu[0] == "ok":
                assert fn(x.to("tpu"), dim).dtype == fn(x, dim).dtype


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", [15, -11])
def test_gather_and_scatter_out_of_range_raise_runtime_error_like_cpu(mode: str, bad: int) -> None:
    t = torch.arange(10.0)
    idx = torch.tensor([0, bad])
    calls = {
        "gather": lambda x, i: torch.gather(x, 0, i),
        "gather 2-d": lambda x, i: torch.gather(x.view(2, 5), 1, i.view(2, 1)),
        "scatter": lambda x, i: x.clone().scatter_(0, i, torch.ones_like(x[:2])),
        "scatter value": lambda x, i: x.clone().scatter_(0, i, 2.0),
        "scatter_add": lambda x, i: x.clone().scatter_add_(0, i, torch.ones_like(x[:2])),
        "scatter_reduce": lambda x, i: x.clone().scatter_reduce_(0, i, torch.ones_like(x[:2]), "amax"),
        # Indexing keeps CPU's IndexError.
        "getitem": lambda x, i: x[i],
        "index_put_": lambda x, i: x.clone().index_put_((i,), torch.tensor(1.0, device=x.device)),
    }
    with torch_tpu.mode(mode):
        for name, fn in calls.items():
            cpu = _outcome(lambda: fn(t, idx))
            tpu = _outcome(lambda: fn(t.to("tpu"), idx.to("tpu")))
            assert cpu[0] in ("RuntimeError", "IndexError"), name
            if name == "gather 2-d":  # CPU names the dim (1) and its size (5): ours names the index only
                _assert_like_cpu(cpu, tpu, f"index {bad} is out of bounds")
            else:
                _assert_like_cpu(cpu, tpu, f"index {bad} is out of bounds for")


# -- 4a. writes into an expanded view ----------------------------------------------------------

_EXPANDED_WRITES = {
    "add_": lambda d: torch.zeros(1, device=d).expand(4).add_(1),
    "mul_": lambda d: torch.zeros(1, device=d).expand(4).mul_(2),
    "copy_": lambda d: torch.zeros(1, device=d).expand(4).copy_(torch.ones(4, device=d)),
    "fill_": lambda d: torch.zeros(1, device=d).expand(4).fill_(2),  # CPU allows: one value everywhere
    "zero_": lambda d: torch.zeros(1, device=d).expand(4).zero_(),
    "index_copy_": lambda d: torch.zeros(1, device=d).expand(4).index_copy_(
        0, torch.tensor([0], device=d), torch.ones(1, device=d)),
    "relu_": lambda d: torch.zeros(1, device=d).expand(4).relu_(),
    "uniform_": lambda d: torch.zeros(1, device=d).expand(4).uniform_(),
    "out=": lambda d: torch.add(torch.ones(4, device=d), 1, out=torch.zeros(1, device=d).expand(4)),
}


# CPU only warns ("deprecated") for these, and its result depends on the order in which its loop
# writes the shared element; tpu writes whole results, so it refuses them with CPU's overlap error
# rather than give another value (the fuzzer's seed 1611).
_EXPANDED_WRITES_CPU_WARNS = {
    "masked_fill_": lambda d: torch.zeros(1, device=d).expand(4).masked_fill_(
        torch.tensor([True, False, True, False], device=d), 1),
    "index_put_": lambda d: torch.zeros(1, device=d).expand(4).index_put_(
        (torch.tensor([0, 2], device=d),), torch.tensor(1.0, device=d)),
    "index_fill_": lambda d: torch.zeros(1, device=d).expand(4).index_fill_(0, torch.tensor([0], device=d), 1.0),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(_EXPANDED_WRITES_CPU_WARNS))
def test_writes_into_an_expanded_view_that_cpu_only_warns_about_raise(mode: str, name: str) -> None:
    assert _outcome(lambda: _EXPANDED_WRITES_CPU_WARNS[name]("cpu"))[0] == "ok"
    with torch_tpu.mode(mode), pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        _EXPANDED_WRITES_CPU_WARNS[name]("tpu")
        torch_tpu.sync()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(_EXPANDED_WRITES))
def test_writes_into_an_expanded_view_like_cpu(mode: str, name: str) -> None:
    fn = _EXPANDED_WRITES[name]
    cpu = _outcome(lambda: fn("cpu"))
    with torch_tpu.mode(mode):
        tpu = _outcome(lambda: fn("tpu"))
    _assert_like_cpu(cpu, tpu, "more than one element of the written-to tensor refers to a single memory location")

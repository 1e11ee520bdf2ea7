"""Shared logic of the OpInfo correctness suite (tests/ops/test_opinfo.py) and the coverage
table generator (tools/gen_ops_table.py): which OpInfo entries run, how a sample moves to the
"tpu" device, how results are compared with CPU, and how a failure is classified.

One check = (OpInfo entry, dtype, mode):
  mode "strict" / "debug"  forward: each of the first MAX_SAMPLES samples of
                           op.sample_inputs("cpu", dtype) runs on CPU and on "tpu" (in that
                           execution mode) and the results must be assert_close (exact dtype).
  mode "grad"              backward, strict mode: d(sum(out * g))/d(inputs) on "tpu" vs CPU
                           for samples with requires_grad=True.
  mode "gradcheck"         torch.autograd.gradcheck in float64 entirely on "tpu".
The CPU fallback is always off: an op without a lowering fails with NotImplementedError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import traceback

import torch
from torch.testing._internal.common_device_type import toleranceOverride
from torch.testing._internal.common_methods_invocations import op_db  # includes opinfo.definitions.op_db
from torch.utils._pytree import tree_flatten, tree_map

import torch_tpu

DEVICE = "tpu"
FULL = os.environ.get("TORCH_TPU_TEST_FULL", "0") == "1"
MAX_SAMPLES = int(os.environ.get("TORCH_TPU_OPINFO_SAMPLES", "8"))
MAX_GRAD_SAMPLES = 3
MAX_GRADCHECK_SAMPLES = 1

ALL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)
DTYPE_NAMES = {d: str(d).removeprefix("torch.") for d in ALL_DTYPES}
DTYPE_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
MODES = ("strict", "debug", "fused", "grad", "gradcheck")
# gradcheck (float64, on tpu) is slow-ish (many forward evaluations): a handful of entries.
GRADCHECK_OPS = ("add", "mul", "div.no_rounding_mode", "sin", "exp", "tanh", "sigmoid", "sum", "mean", "matmul",
                 "softmax", "nn.functional.linear", "nn.functional.layer_norm", "nn.functional.cross_entropy",
                 "index_select", "cat", "where", "pow")


def entry_id(op) -> str:
    """'name' or 'name.variant' — the test id and table row of an OpInfo entry."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _entries() -> list:
    seen, out = set(), []
    for op in op_db:
        key = (op.name, op.variant_test_name)
        if key not in seen:
            seen.add(key)
            out.append(op)
    return sorted(out, key=entry_id)


ENTRIES = _entries()
BY_ID = {entry_id(op): op for op in ENTRIES}


# -- entries that cannot be compared with CPU ---------------------------------------------------
from expected_failures import SKIPPED_ENTRIES  # noqa: E402  (random ops, listed with reasons)


def seeded(op) -> bool:
    """OpInfo's own mark of a random op: its callable runs under wrapper_set_seed (so that two
    calls on one device agree). Some seeded entries are deterministic nonetheless (item) or
    random only in some samples (attention with dropout_p > 0: see random_sample)."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


# torch < 2.13 has no OpInfo.has_nondeterministic_output; these are the entries 2.13 marks (the
# device check runs the OpInfo tests on the GPU machine's torch 2.11).
_NONDETERMINISTIC_BEFORE_2_13 = {
    "empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
    "torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward",
}


def skip_reason(op) -> str | None:
    """Why an entry is not compared with CPU at all (None: it is)."""
    eid = entry_id(op)
    if eid in SKIPPED_ENTRIES:
        return SKIPPED_ENTRIES[eid]
    if getattr(op, "has_nondeterministic_output", op.name in _NONDETERMINISTIC_BEFORE_2_13):
        return "nondeterministic output (uninitialized memory or implementation-defined order)"
    return None


def cpu_dtypes(op) -> set:
    return set(op.supported_dtypes("cpu"))


# -- tolerances -----------------------------------------------------------------------------------
_DEFAULT_GRAD_TOL = {torch.float32: (1e-4, 1.3e-4), torch.float64: (1e-7, 1e-7)}


def tolerance(op, dtype: torch.dtype, grad: bool = False) -> dict:
    """atol/rtol for assert_close: the largest the OpInfo declares for `dtype` in any of its
    toleranceOverride decorators (they are the op's own admission of implementation slop, e.g. in
    TestCommon.test_compare_cpu or test_variant_consistency_eager), else assert_close defaults.
    Backward compares allow a little more than assert_close's float32 default (the summation
    order of gradient accumulation is implementation-defined)."""
    atol = rtol = None
    for info in op.decorators:
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                atol, rtol = max(atol or 0.0, t.atol), max(rtol or 0.0, t.rtol)
    if grad and dtype in _DEFAULT_GRAD_TOL:
        da, dr = _DEFAULT_GRAD_TOL[dtype]
        atol, rtol = max(atol or 0.0, da), max(rtol or 0.0, dr)
    if atol is None:
        return {}
    return {"atol": atol, "rtol": rtol}


# -- moving samples -------------------------------------------------------------------------------
def _move_tensor(x: torch.Tensor) -> torch.Tensor:
    """x on tpu with the same strides and storage offset: the whole storage is copied and viewed
    the same way (a plain .to() would make partial views contiguous, changing what as_strided
    and friends read, and would never exercise non-contiguous inputs)."""
    x = x.detach()
    if x.layout != torch.strided:
        return x.to(DEVICE)
    n = x.untyped_storage().nbytes() // x.element_size()
    if x.is_contiguous() and x.storage_offset() == 0 and n == x.numel():
        return x.to(DEVICE)
    return x.as_strided((n,), (1,), 0).to(DEVICE).as_strided(x.shape, x.stride(), x.storage_offset())


def _to_tpu(x):
    if isinstance(x, torch.Tensor):
        t = _move_tensor(x)
        return t.requires_grad_() if x.requires_grad and t.is_leaf else t
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    return x


def _to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def sample_to_tpu(sample):
    """A copy of `sample` on tpu: every tensor in input/args/kwargs (nested lists/tuples/dicts);
    torch.device('cpu') and a device='cpu' kwarg (factory functions) become tpu."""
    s = sample.transform(_to_tpu)
    if s.kwargs.get("device") in ("cpu", torch.device("cpu")):
        s.kwargs["device"] = DEVICE
    return s


def _tensor_split_indices_on_cpu(sample, tsample):
    # ATen requires tensor_indices_or_sections on CPU (OpInfo creates it without device=).
    if isinstance(sample.args[0], torch.Tensor):
        tsample.args = (sample.args[0],) + tuple(tsample.args[1:])


# Entries whose samples hold tensors that must stay on CPU on every device.
CPU_ARGUMENT_FIXUPS = {"tensor_split": _tensor_split_indices_on_cpu}


def prepare(op, sample):
    """The tpu copy of a CPU sample (see sample_to_tpu), with the entry's CPU-argument fixup."""
    tsample = sample_to_tpu(sample)
    fix = CPU_ARGUMENT_FIXUPS.get(entry_id(op))
    if fix:
        fix(sample, tsample)
    return tsample


def random_sample(op, sample) -> bool:
    """Samples of otherwise deterministic ops that draw random numbers: attention with
    dropout_p > 0, and dropout-carrying functions in training mode."""
    if sample.kwargs.get("dropout_p", 0.0):
        return True
    return bool(sample.kwargs.get("training", False)) and ("dropout" in op.name or "attention" in op.name)


def _tensors(tree) -> list:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def compare(got, exp, tol: dict) -> None:
    """assert_close of a (possibly nested) result moved to CPU; dtype must match exactly."""
    torch.testing.assert_close(tree_map(_to_cpu, got), exp, equal_nan=True, check_dtype=True,
                               check_device=True, check_layout=True, **tol)


def _arg(sample, pos: int, name: str, default):
    """Argument `name` of the op (positional index `pos` after the input) in a sample."""
    if name in sample.kwargs:
        return sample.kwargs[name]
    return sample.args[pos] if len(sample.args) > pos else default


def _compare_tie_order(op, sample, got, exp, tol) -> None:
    """sort/argsort/topk/kthvalue/mode without stable=True: the order of equal elements (so the index
    returned for a tie) is unspecified (torch.sort docs), so indices are compared through the
    input values they select; values must match as usual."""
    got = tree_map(_to_cpu, got)
    name = op.name
    dim = _arg(sample, 1 if name in ("topk", "kthvalue") else 0, "dim", -1)
    keep = bool(_arg(sample, 2 if name == "kthvalue" else 1, "keepdim", False)) if name in ("kthvalue", "mode") \
        else True
    inp = sample.input

    def take(idx):
        if inp.dim() == 0:
            return inp.expand_as(idx)
        d = dim % inp.dim()
        return inp.gather(d, idx if keep else idx.unsqueeze(d))

    if name == "argsort":
        compare(take(got), take(exp), tol)
        return
    compare(got[0], exp[0], tol)
    assert got[1].dtype == exp[1].dtype, f"index dtype {got[1].dtype} != {exp[1].dtype}"
    compare(take(got[1]), take(exp[1]), tol)


# Entries whose results are compared by a custom rule (unless the sample asks for stable=True).
# mode: torch.mode's docs leave open which index of the mode value is returned (CPU's comes
# from an unstable sort).
TIE_ORDER_ENTRIES = {"sort", "argsort", "topk", "kthvalue", "mode"}


def compare_sample(op, sample, got, exp, tol) -> None:
    if entry_id(op) in TIE_ORDER_ENTRIES and not sample.kwargs.get("stable", False):
        _compare_tie_order(op, sample, got, exp, tol)
    else:
        compare(got, exp, tol)


class NoSampleRan(Exception):
    """Every sample was rejected by CPU itself (nothing to compare)."""


@contextlib.contextmanager
def noted(note: str):
    """Adds which sample failed to any exception raised inside the block."""
    try:
        yield
    except Exception as e:
        e.add_note(note)
        raise


# -- forward ----------------------------------------------------------------------------------------
def check_forward(op, dtype: torch.dtype, mode: str = "strict", max_samples: int = MAX_SAMPLES) -> int:
    """Runs the first `max_samples` samples on CPU and on tpu in `mode`; raises on the first
    mismatch or tpu error. Returns the number of samples compared."""
    tol = tolerance(op, dtype)
    ran = 0
    with torch_tpu.mode(mode):
        for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
            if i >= max_samples:
                break
            if random_sample(op, sample):
                continue
            tsample = prepare(op, sample)  # copied before CPU runs (some ops mutate inputs)
            try:
                exp = op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                continue  # CPU rejects this sample: nothing to compare
            exp = sample.output_process_fn_grad(exp)
            with noted(f"[sample {i}: {describe(sample)}]"):
                got = op(tsample.input, *tsample.args, **tsample.kwargs)
                if op.is_factory_function or tsample.kwargs.get("device") == DEVICE:
                    off = [str(t.device) for t in _tensors(got) if t.device.type != DEVICE]
                    assert not off, f"factory function returned tensors on {off}, not on {DEVICE}"
                got = tsample.output_process_fn_grad(got)
                got = tree_map(_to_cpu, got)  # synchronizes: strict-mode errors surface here
                compare_sample(op, sample, got, exp, tol)
            ran += 1
    torch_tpu.sync()
    if ran == 0:
        raise NoSampleRan("CPU rejected every sample")
    return ran


def describe(sample) -> str:
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}:{DTYPE_NAMES.get(x.dtype, x.dtype)}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(d(y) for y in x[:6]) + (", ..." if len(x) > 6 else "")
            return ("[" + inner + "]") if isinstance(x, list) else ("(" + inner + ")")
        r = repr(x)
        return r if len(r) < 40 else r[:37] + "..."
    parts = [d(sample.input)] + [d(a) for a in sample.args] + [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(parts)


# -- backward ---------------------------------------------------------------------------------------
def _grad_inputs(sample) -> list:
    return [t for t in _tensors([sample.input, sample.args, sample.kwargs]) if t.requires_grad]


def _backward(op, sample, gen_grads) -> list:
    out = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    outs = [t for t in _tensors(out) if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if not outs:
        return []
    inputs = _grad_inputs(sample)
    grads = torch.autograd.grad(outs, inputs, grad_outputs=gen_grads(outs), allow_unused=True)
    return [None if g is None else _to_cpu(g) for g in grads]


def check_backward(op, dtype: torch.dtype = torch.float32, max_samples: int = MAX_GRAD_SAMPLES) -> int:
    """tpu backward vs CPU backward (strict mode): the gradients of sum(out * g) with respect to
    every input requiring grad, g a fixed random cotangent. Returns samples compared."""
    tol = tolerance(op, dtype, grad=True)
    ran = 0
    for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=True)):
        if i >= max_samples:
            break
        if not _grad_inputs(sample) or random_sample(op, sample):
            continue
        tsample = prepare(op, sample)
        cots: list = []

        def cpu_cot(outs):
            g = torch.Generator().manual_seed(i)
            cots[:] = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]
            return cots

        try:
            exp = _backward(op, sample, cpu_cot)
        except Exception:
            continue
        if not exp:
            continue
        with noted(f"[grad, sample {i}: {describe(sample)}]"):
            got = _backward(op, tsample, lambda outs: [c.to(o.device) for c, o in zip(cots, outs)])
            compare(got, exp, tol)
        ran += 1
    torch_tpu.sync()
    if ran == 0:
        raise NoSampleRan("no sample with a differentiable output ran on CPU")
    return ran


def check_gradcheck(op, max_samples: int = MAX_GRADCHECK_SAMPLES) -> int:
    """torch.autograd.gradcheck in float64 on tpu (analytical vs numerical Jacobian)."""
    ran = 0
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float64, requires_grad=True)):
        if i >= max_samples:
            break
        if not _grad_inputs(sample) or random_sample(op, sample):
            continue
        sample = prepare(op, sample)
        inputs = _grad_inputs(sample)

        def fn(*xs, sample=sample):
            it = iter(xs)
            rebuilt = sample.transform(lambda t: next(it) if isinstance(t, torch.Tensor) and t.requires_grad else t)
            out = rebuilt.output_process_fn_grad(op(rebuilt.input, *rebuilt.args, **rebuilt.kwargs))
            return tuple(t for t in _tensors(out) if t.is_floating_point())

        torch.autograd.gradcheck(fn, tuple(inputs), check_undefined_grad=False, check_batched_grad=False,
                                 atol=op.gradcheck_nondet_tol or 1e-5, nondet_tol=op.gradcheck_nondet_tol,
                                 fast_mode=op.gradcheck_fast_mode if op.gradcheck_fast_mode is not None else True)
        ran += 1
    torch_tpu.sync()
    if ran == 0:
        raise NoSampleRan("no sample with inputs requiring grad")
    return ran


# -- classification -------------------------------------------------------------------------------
_MISSING = re.compile(r"'([\w:.]+)' is not implemented for the tpu device")


def classify(exc: BaseException) -> str:
    """A one-line reason for a failure, grouped so that equal causes read equal:
    'no lowering for aten::X', 'mismatch: ...', or '<ExceptionType>: first line'."""
    msg = str(exc)
    m = _MISSING.search(msg)
    if m:
        return f"no lowering for {m.group(1)}"
    if isinstance(exc, AssertionError):
        body = msg
        first = body.strip().splitlines()[0] if body.strip() else "assertion"
        for line in body.splitlines():
            if "Mismatched elements" in line or "Greatest absolute difference" in line:
                first = first.rstrip("!.") + "; " + line.strip().rstrip(".")
        return "mismatch: " + _squash(first)
    body = msg
    first = body.strip().splitlines()[0] if body.strip() else ""
    return f"{type(exc).__name__}: {_squash(first)}"


def _squash(s: str, n: int = 160) -> str:
    s = re.sub(r"\s+", " ", s).strip()
    return s if len(s) <= n else s[: n - 3] + "..."


@dataclasses.dataclass
class Outcome:
    status: str  # pass | fail | unsupported | skip
    reason: str = ""
    samples: int = 0
    seconds: float = 0.0


def run_check(op, dtype: torch.dtype, mode: str) -> Outcome:
    """One (entry, dtype, mode) check as an Outcome, never raising (for the table)."""
    import time

    if dtype not in cpu_dtypes(op):
        return Outcome("unsupported", "dtype not supported by the op on CPU")
    r = skip_reason(op)
    if r:
        return Outcome("skip", r)
    if mode in ("grad", "gradcheck") and not op.supports_autograd:
        return Outcome("unsupported", "op does not support autograd")
    t0 = time.perf_counter()
    try:
        if mode in ("strict", "debug"):
            n = check_forward(op, dtype, mode)
        elif mode == "grad":
            n = check_backward(op, dtype)
        else:
            n = check_gradcheck(op)
        return Outcome("pass", "", n, time.perf_counter() - t0)
    except NoSampleRan as e:
        return Outcome("skip", str(e), 0, time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its class
        if os.environ.get("TORCH_TPU_OPINFO_TRACE"):
            traceback.print_exc()
        return Outcome("fail", classify(e), 0, time.perf_counter() - t0)
    finally:
        try:
            torch_tpu.sync()
        except Exception:  # noqa: BLE001 - a late async error belongs to this check, already failed
            pass

"""The float32 OpInfo forward suite (tests/ops) through the StableHLO path: TORCH_TPU_RUNTIME=jax.

Issue 6's bar: the StableHLO path passes at least 90% of the OpInfo entries that pass in strict
mode on the host runtime. Every check here is one that passes on the host runtime (an entry not
skipped by tests/ops/opinfo_util.py, float32 supported on CPU, and not an expected failure of
tests/ops/expected_failures.py in that mode); a child process on the JAX runtime
(jax_opinfo_worker.py) runs them all, in strict mode (one program per op) and fused mode (fused
graphs of several ops, so the emitter sees the host's fused clusters as one module), and each
check becomes one test here:
  pass  -> passes, unless jax_expected_failures.py lists it (then XPASS: delete the line);
  fail  -> xfail with the listed reason if jax_expected_failures.py lists it, else a failure;
  skip  -> CPU rejected every sample.
test_stablehlo_opinfo_pass_rate asserts the 90% bar over the checks run.

`make test` runs SUBSET, a fixed representative set of entries per mode (JAX compiles every
program, which is the cost); TORCH_TPU_TEST_FULL=1 runs every entry in both modes.
tools/gen_stablehlo_opinfo.py runs the full set (or chosen modes), prints the pass rates and
rewrites jax_expected_failures.py; docs/stablehlo.md has the figures.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("jax", reason="the JAX runtime runs modules on JAX's CPU backend (pip install 'jax[cpu]')")

from jax_expected_failures import JAX_EXPECTED_FAILURES  # noqa: E402
from jax_session import ROOT, run_python  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "ops"))
import opinfo_util as U  # noqa: E402
import torch  # noqa: E402
from expected_failures import EXPECTED_FAILURES  # noqa: E402

MODES = ("strict", "fused")
BAR = 0.90

# Representative entries (make test): elementwise math, comparisons and where, reductions and
# scans, contractions and convolution, normalization and softmax, data movement, gather/scatter
# and indexing, sorting and pooling; fused mode on a smaller set of the same kinds. The cost is
# JAX's compile of every distinct program (about 0.1 s of CPU each).
SUBSET = {
    "strict": ("add", "mul", "div.no_rounding_mode", "sigmoid", "where", "sum", "amax", "argmax", "cumsum", "matmul",
               "nn.functional.conv2d", "softmax", "nn.functional.layer_norm", "cat", "gather", "index_put", "sort",
               "nn.functional.max_pool2d"),
    "fused": ("add", "where", "sum", "softmax", "nn.functional.layer_norm", "gather"),
}
TIMEOUT = 10800 if U.FULL else 600


def host_passes(op, mode: str) -> bool:
    """The check passes on the host runtime (test_opinfo.py's expectations for float32)."""
    if U.skip_reason(op) or torch.float32 not in U.cpu_dtypes(op):
        return False
    key = (op.name, op.variant_test_name, "float32")
    return key + (mode,) not in EXPECTED_FAILURES and key + ("strict",) not in EXPECTED_FAILURES


def checks(modes: tuple[str, ...] = MODES) -> list[tuple[str, str]]:
    """(mode, entry id) of every check to run: all entries with TORCH_TPU_TEST_FULL=1, else SUBSET."""
    out = []
    for mode in modes:
        entries = U.ENTRIES if U.FULL else [U.BY_ID[e] for e in SUBSET[mode]]
        out += [(mode, U.entry_id(op)) for op in entries if host_passes(op, mode)]
    return out


CHECKS = checks()


@pytest.fixture(scope="module")
def outcomes() -> dict:
    """(mode, entry) -> the worker's record; also 'stderr' (the child's error output)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "outcomes.jsonl"
        r = run_python([str(ROOT / "tests" / "stablehlo" / "jax_opinfo_worker.py"), str(out),
                        *[f"{m}:{e}" for m, e in CHECKS]], timeout=TIMEOUT)
        lines = out.read_text().splitlines() if out.exists() else []
    res: dict = {"stderr": r.stderr[-4000:], "returncode": r.returncode}
    for line in lines:
        rec = json.loads(line)
        if "jax" in rec:
            res["jax"] = rec["jax"]
        else:
            res[(rec["mode"], rec["entry"])] = rec
    return res


@pytest.mark.parametrize("mode,entry", CHECKS, ids=[f"{m}-{e}" for m, e in CHECKS])
def test_stablehlo_opinfo(outcomes: dict, mode: str, entry: str) -> None:
    rec = outcomes.get((mode, entry))
    assert rec is not None, (f"the JAX worker did not finish this check (exit code {outcomes['returncode']}):\n"
                             f"{outcomes['stderr']}")
    expected = JAX_EXPECTED_FAILURES.get((entry, mode)) or JAX_EXPECTED_FAILURES.get((entry, "any"))
    if rec["status"] == "skip":
        pytest.skip(rec["reason"])
    if rec["status"] == "pass":
        assert not expected, f"XPASS: {entry} ({mode}) passes now: delete it from jax_expected_failures.py"
        return
    if expected:
        pytest.xfail(f"{expected} [{rec['reason']}]")
    pytest.fail(rec["reason"])


def test_stablehlo_opinfo_pass_rate(outcomes: dict) -> None:
    """At least 90% of the host-passing checks pass on the StableHLO path, per mode."""
    for mode in MODES:
        recs = [outcomes.get((m, e)) for m, e in CHECKS if m == mode]
        ran = [r for r in recs if r is not None and r["status"] != "skip"]
        passed = sum(r["status"] == "pass" for r in ran)
        rate = passed / max(len(ran), 1)
        print(f"StableHLO OpInfo float32 {mode}: {passed}/{len(ran)} = {rate:.1%}")
        assert len(ran) > 0 and rate >= BAR, f"{mode}: {passed}/{len(ran)} = {rate:.1%} < {BAR:.0%}"

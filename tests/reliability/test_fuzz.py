"""A fixed-seed slice of the differential op fuzzer (tools/fuzz_ops.py) in every mode.

150 cases per mode (seeds 0..149), in worker subprocesses (2 at a time, 75 cases each), so a
crash or a hang is a recorded verdict, not a dead test run. Every case must pass: no crash, no
hang, no wrong result, no unexpected error, except the cases in KNOWN_FAILURES (real bugs the
fuzzer found, each with what is wrong; the tool's `--repro SEED --mode MODE` prints and reruns
one). A known failure that passes now fails the test too, so the table stays true.
`make test-stress` runs 10,000 cases per mode.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fuzz_ops.py"
CASES = 150
SEED = 0
MODES = ("strict", "fused", "compiled")

# (mode, seed) -> what is wrong. Rerun one with: python tools/fuzz_ops.py --repro SEED --mode MODE
# Empty: every failure the slice found is fixed (docs/reliability.md lists them).
KNOWN_FAILURES: dict[tuple[str, int], str] = {}


def _load_tool() -> Any:
    spec = importlib.util.spec_from_file_location("fuzz_ops", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_ops", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    tool = _load_tool()
    return tool.fuzz(CASES, SEED, list(MODES), jobs=2, batch=75, case_timeout=60.0, log=lambda s: None)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("mode", MODES)
def test_fuzz_slice_matches_cpu(report: dict[str, Any], mode: str) -> None:
    summary = report["summary"][mode]
    assert summary["cases"] == CASES, summary
    failures = {f["seed"]: f for f in report["failures"] if f["mode"] == mode}
    known = {seed for (m, seed) in KNOWN_FAILURES if m == mode}
    new = [f"seed {s} {f['verdict']} {f['op']}: {f['detail'][:300]}\n    {f['repro']}"
           for s, f in sorted(failures.items()) if s not in known]
    fixed = sorted(known - set(failures))
    assert not new, f"{len(new)} new failures in {mode} mode:\n" + "\n".join(new)
    assert not fixed, f"known failures that pass now (remove them from KNOWN_FAILURES): {fixed}"
    assert summary["pass"] + summary["cpu_gap"] + summary["compile_gap"] == CASES - len(known), summary

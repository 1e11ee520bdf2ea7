#!/usr/bin/env python
"""The float32 OpInfo suite through the StableHLO path (TORCH_TPU_RUNTIME=jax, or with
--runtime pjrt the PJRT runtime on XLA's CPU plugin): pass rates relative to the host runtime's
strict-mode passes, and the failures grouped by reason.

    python tools/gen_stablehlo_opinfo.py [--subset] [--modes strict,fused] [--jobs N] [--write-xfails]
                                         [--runtime jax|pjrt]

Runs the checks tests/stablehlo/test_jax_opinfo.py runs with TORCH_TPU_TEST_FULL=1 (every entry
that passes on the host runtime, strict and fused mode; --subset: its make-test SUBSET), split
over N child processes (tests/stablehlo/jax_opinfo_worker.py). --write-xfails rewrites
tests/stablehlo/jax_expected_failures.py from the failures (a full run only).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "stablehlo"
XFAILS = HERE / "jax_expected_failures.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", action="store_true", help="only test_jax_opinfo.SUBSET (what make test runs)")
    ap.add_argument("--modes", default="strict,fused", help="comma-separated modes (default: strict,fused)")
    ap.add_argument("--jobs", type=int, default=1, help="child processes")
    ap.add_argument("--write-xfails", action="store_true", help="rewrite jax_expected_failures.py (full runs)")
    ap.add_argument("--runtime", default="jax", choices=["jax", "pjrt"],
                    help="jax: JAX's CPU backend; pjrt: our PJRT runtime on XLA's CPU PJRT plugin")
    args = ap.parse_args()
    if args.write_xfails and (args.subset or args.runtime != "jax"):
        raise SystemExit("--write-xfails needs a full run on the jax runtime")
    os.environ["TORCH_TPU_TEST_FULL"] = "0" if args.subset else "1"
    sys.path[:0] = [str(HERE), str(ROOT / "tests" / "ops"), str(ROOT)]
    import test_jax_opinfo as T
    from jax_session import jax_env

    env = jax_env()
    if args.runtime == "pjrt":
        sys.path.insert(0, str(ROOT / "tests" / "pjrt"))
        from pjrt_cpu_plugin import cpu_plugin_path

        plugin = cpu_plugin_path()
        if plugin is None:
            raise SystemExit("XLA's CPU PJRT plugin is not installed (pip install lammps-jax-pjrt-cpu)")
        env.update(TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=str(plugin))
    modes = tuple(args.modes.split(","))
    checks = T.checks(modes)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        procs, outs = [], []
        for j in range(args.jobs):
            out = Path(tmp) / f"out{j}.jsonl"
            part = checks[j::args.jobs]
            procs.append(subprocess.Popen([sys.executable, str(HERE / "jax_opinfo_worker.py"), str(out),
                                           *[f"{m}:{e}" for m, e in part]], env=env, cwd=ROOT))
            outs.append(out)
        for p in procs:
            p.wait()
        recs = {}
        compiles = 0
        for out in outs:
            for line in out.read_text().splitlines() if out.exists() else []:
                rec = json.loads(line)
                if "jax" in rec:
                    compiles += rec["jax"].get("compiles", 0)
                else:
                    recs[(rec["mode"], rec["entry"])] = rec
    missing = [c for c in checks if c not in recs]
    print(f"{len(checks)} checks in {time.perf_counter() - t0:.0f} s, {compiles} modules compiled by JAX")
    for c in missing:
        print(f"  did not finish: {c}")
    failures: dict[tuple[str, str], str] = {}
    for mode in modes:
        ran = [r for (m, _), r in recs.items() if m == mode and r["status"] != "skip"]
        passed = sum(r["status"] == "pass" for r in ran)
        print(f"{mode}: {passed}/{len(ran)} = {passed / max(len(ran), 1):.1%} of the host-passing checks pass "
              f"({sum(r['status'] == 'skip' for (m, _), r in recs.items() if m == mode)} skipped: CPU rejected every sample)")
        for (m, e), r in recs.items():
            if m == mode and r["status"] == "fail":
                failures[(e, m)] = r["reason"]
    for c in missing:
        failures[(c[1], c[0])] = "did not finish (crash or timeout)"
    by_reason = collections.defaultdict(list)
    for (e, m), reason in sorted(failures.items()):
        by_reason[reason].append(f"{e} ({m})")
    for reason, items in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        print(f"- {reason}: {', '.join(items)}")
    if args.write_xfails:
        write_xfails(failures, modes)


def write_xfails(failures: dict[tuple[str, str], str], modes: tuple[str, ...]) -> None:
    head = XFAILS.read_text().split("JAX_EXPECTED_FAILURES", 1)[0]
    from jax_expected_failures import JAX_EXPECTED_FAILURES as old

    # An entry failing for the same reason in both modes is listed once, as "any"; the entries of
    # modes this run did not cover stay as they were.
    merged: dict[tuple[str, str], str] = {k: v for k, v in old.items() if k[1] not in modes and k[1] != "any"}
    for (e, m), reason in sorted(failures.items()):
        other = failures.get((e, "fused" if m == "strict" else "strict"))
        if other == reason:
            merged[(e, "any")] = reason
        else:
            merged[(e, m)] = reason
    lines = [head + "JAX_EXPECTED_FAILURES: dict[tuple[str, str], str] = {"]
    for (e, m), reason in sorted(merged.items()):
        lines.append(f"    ({e!r}, {m!r}): {reason!r},")
    lines.append("}")
    XFAILS.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(merged)} entries to {XFAILS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

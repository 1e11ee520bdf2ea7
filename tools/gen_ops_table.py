#!/usr/bin/env python
"""OpInfo coverage of the "tpu" device: runs the checks of tests/ops/test_opinfo.py (the same
code: tests/ops/opinfo_util.py) and writes docs/ops.md (entry x dtype x mode table + totals)
and docs/ops.json, and prints the README totals line.

    python tools/gen_ops_table.py                 # full sweep (every dtype/mode), ~5 min on 2 cores
    python tools/gen_ops_table.py --quick         # float32 strict only
    python tools/gen_ops_table.py --write-xfails  # also regenerate tests/ops/expected_failures.py
    python tools/gen_ops_table.py --readme        # also update the totals line in README.md
    python tools/gen_ops_table.py --probe-random  # list entries whose CPU output depends on the seed

Each (mode, dtype) column runs in a worker process, so a crash (segfault, abort) or hang in the
device layer costs one cell, not the run: the cell is recorded as failed ("crash: ..." /
"hang: ...") and the worker restarts after that entry.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import re
import selectors
import subprocess
import sys
import time

# torch_tpu is imported explicitly below; torch's entry-point autoloading is not needed.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS_DIR = os.path.join(ROOT, "tests", "ops")
sys.path.insert(0, OPS_DIR)

ALL_DTYPE_NAMES = ("float32", "bfloat16", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool",
                   "complex64")
# (mode, dtype) columns of the full sweep, in table order.
FULL_COLUMNS = ([("strict", d) for d in ALL_DTYPE_NAMES]
                + [("debug", "float32"), ("grad", "float32"), ("grad", "float64"), ("gradcheck", "float64")])
QUICK_COLUMNS = [("strict", "float32")]
CHECK_TIMEOUT_S = 300  # one (entry, dtype, mode) check; beyond that the worker is killed: "hang"
MARK = {"pass": "✓", "fail": "✗", "unsupported": "—", "skip": "s", None: ""}


# -- worker -------------------------------------------------------------------------------------------
def worker(mode: str, dtype_name: str, ids: list[str]) -> None:
    """Runs checks sequentially, one JSON line before ({"start"}) and after ({"id", ...}) each."""
    import faulthandler

    faulthandler.enable()
    import opinfo_util as U

    dtype = U.DTYPE_BY_NAME[dtype_name]
    out = sys.__stdout__
    for eid in ids:
        op = U.BY_ID[eid]
        print(json.dumps({"start": eid}), file=out, flush=True)
        if mode == "gradcheck" and eid not in U.GRADCHECK_OPS:
            res = U.Outcome(None, "")
        else:
            res = U.run_check(op, dtype, mode)
        print(json.dumps({"id": eid, "status": res.status, "reason": res.reason, "samples": res.samples,
                          "seconds": round(res.seconds, 3)}), file=out, flush=True)


def run_column(mode: str, dtype_name: str, ids: list[str], log) -> dict[str, dict]:
    """Runs one column in worker processes (restarting after a crash/hang); id -> result."""
    results: dict[str, dict] = {}
    todo = list(ids)
    t0 = time.time()
    stderr_tail = ""
    fruitless = 0  # consecutive worker deaths with nothing done: a broken worker, not one bad op
    while todo:
        if fruitless >= 3:
            raise RuntimeError(f"worker {mode}/{dtype_name} keeps dying without results:\n{stderr_tail}")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", mode, dtype_name],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)
        proc.stdin.write("\n".join(todo))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current, started_at = None, time.time()
        while True:
            timeout = CHECK_TIMEOUT_S + (120 if current is None else 0) - (time.time() - started_at)
            if timeout <= 0 or not sel.select(timeout=timeout):
                if current is None:
                    proc.kill()
                    proc.wait()
                    raise RuntimeError(f"worker {mode}/{dtype_name} did not start: {proc.stderr.read()[-2000:]}")
                proc.kill()
                proc.wait()
                results[current] = {"status": "fail", "reason": f"hang: no result after {CHECK_TIMEOUT_S}s",
                                    "samples": 0, "seconds": CHECK_TIMEOUT_S}
                log(f"  {mode}/{dtype_name}: HANG in {current}")
                break
            line = proc.stdout.readline()
            if not line:
                rc = proc.wait()
                stderr_tail = proc.stderr.read()[-3000:]
                if current is not None:
                    how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
                    last = [ln for ln in stderr_tail.splitlines() if ln.strip()][-1:] or [""]
                    results[current] = {"status": "fail", "reason": f"crash: worker died ({how}) {last[0][:120]}",
                                        "samples": 0, "seconds": 0.0}
                    log(f"  {mode}/{dtype_name}: CRASH in {current} ({how})\n{stderr_tail}")
                elif rc != 0:
                    raise RuntimeError(f"worker {mode}/{dtype_name} failed (rc={rc}):\n{stderr_tail}")
                break
            msg = json.loads(line)
            if "start" in msg:
                current, started_at = msg["start"], time.time()
            else:
                results[msg.pop("id")] = msg
                current, started_at = None, time.time()
        done = [i for i in todo if i in results]
        fruitless = 0 if len(done) > 1 else fruitless + 1
        todo = [i for i in todo if i not in results]
    log(f"  {mode}/{dtype_name}: {time.time() - t0:.0f}s")
    return results


# -- outputs --------------------------------------------------------------------------------------------
def totals(results, columns) -> dict[str, dict[str, int]]:
    out = {}
    for mode, dt in columns:
        c = collections.Counter(r["status"] for r in results[f"{mode}/{dt}"].values() if r["status"])
        out[f"{mode}/{dt}"] = {k: c.get(k, 0) for k in ("pass", "fail", "unsupported", "skip")}
    return out


def missing_ops(results, column: str | None = None) -> collections.Counter:
    """aten op -> number of entries whose check fails only for want of its lowering."""
    c = collections.Counter()
    for col, rs in results.items():
        if column and col != column:
            continue
        seen = set()
        for eid, r in rs.items():
            m = re.match(r"no lowering for (\S+)", r["reason"] or "")
            if r["status"] == "fail" and m and (eid, m.group(1)) not in seen:
                seen.add((eid, m.group(1)))
                c[m.group(1)] += 1
    return c


def failure_class(reason: str) -> str:
    if reason.startswith("no lowering"):
        return "no lowering"
    if reason.startswith("mismatch"):
        return "mismatch"
    if "is not supported on the tpu device" in reason:
        return "dtype not supported by the device (complex/uint64)"
    if reason.startswith(("crash", "hang")):
        return reason.split(":")[0]
    return "error"


def readme_line(tot) -> str:
    s = tot.get("strict/float32")
    parts = [f"OpInfo: {s['pass']} entries pass float32 strict (of {sum(s.values())};"
             f" {s['fail']} fail, {s['skip']} skipped, {s['unsupported']} without float32)"]
    for key, label in (("debug/float32", "float32 debug"), ("grad/float32", "float32 backward vs CPU"),
                       ("strict/bfloat16", "bfloat16 strict"), ("strict/int64", "int64 strict")):
        if key in tot:
            t = tot[key]
            parts.append(f"{t['pass']}/{t['pass'] + t['fail']} {label}")
    return ", ".join(parts) + " — CPU fallback off; docs/ops.md."


def write_markdown(path, results, columns, tot, meta) -> None:
    ids = sorted(next(iter(results.values())).keys())
    L = ["# OpInfo coverage of the tpu device", "",
         f"Generated by `tools/gen_ops_table.py` ({meta['date']}, torch {meta['torch']}, "
         f"{meta['samples']} samples per check, CPU fallback off). Do not edit by hand.", "",
         "Each cell is one check of tests/ops/test_opinfo.py: the entry's first samples "
         "(`op.sample_inputs('cpu', dtype)`) on tpu vs CPU, `assert_close` with exact dtype. "
         "Modes: `strict`/`debug` forward in that execution mode; `grad` backward vs CPU backward; "
         "`gradcheck` torch.autograd.gradcheck in float64 on tpu (a handful of entries).", "",
         "✓ pass · ✗ fail · — unsupported (dtype not supported by the op on CPU, or no autograd) · "
         "s skipped (random op, nondeterministic output, or CPU rejects every sample) · blank: not run", "",
         "## Totals", "", "| mode/dtype | pass | fail | unsupported | skip |", "|---|---:|---:|---:|---:|"]
    for col, t in tot.items():
        L.append(f"| {col} | {t['pass']} | {t['fail']} | {t['unsupported']} | {t['skip']} |")
    L += ["", "## Missing lowerings by entries affected (float32 strict)", "",
          "| op | entries |", "|---|---:|"]
    for op, n in missing_ops(results, "strict/float32").most_common():
        L.append(f"| `{op}` | {n} |")
    L += ["", "## Failure classes (all columns)", "", "| class | checks |", "|---|---:|"]
    fc = collections.Counter(failure_class(r["reason"]) for rs in results.values() for r in rs.values()
                             if r["status"] == "fail")
    for k, n in fc.most_common():
        L.append(f"| {k} | {n} |")
    L += ["", "## Table", ""]
    head = [f"{m}<br>{d}" for m, d in columns]
    L.append("| entry | " + " | ".join(head) + " |")
    L.append("|---|" + "|".join(":-:" for _ in columns) + "|")
    for eid in ids:
        L.append(f"| `{eid}` | " + " | ".join(MARK[results[f'{m}/{d}'][eid]['status']] for m, d in columns) + " |")
    L += ["", "## Failures", ""]
    for eid in ids:
        fails = [(f"{m}/{d}", results[f"{m}/{d}"][eid]["reason"]) for m, d in columns
                 if results[f"{m}/{d}"][eid]["status"] == "fail"]
        if fails:
            by_reason = collections.defaultdict(list)
            for col, reason in fails:
                by_reason[reason].append(col)
            for reason, cols in by_reason.items():
                L.append(f"- `{eid}` ({', '.join(cols)}): {reason.replace('|', '/')}")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def write_json(path, results, columns, tot, meta) -> None:
    """docs/ops.json: totals, missing lowerings, and per entry {column: status or [status, reason]}."""
    entries: dict[str, dict] = collections.defaultdict(dict)
    for col, rs in results.items():
        for eid, r in rs.items():
            if r["status"]:
                entries[eid][col] = [r["status"], r["reason"]] if r["reason"] else r["status"]
    doc = {"meta": meta, "columns": [f"{m}/{d}" for m, d in columns], "totals": tot,
           "missing_lowerings": dict(missing_ops(results).most_common()), "entries": dict(sorted(entries.items()))}
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "entries"))
        f.write(',\n"entries": {\n' + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc["entries"].items()))
        f.write("\n}}\n")


def write_xfails(path, results, skipped_entries) -> None:
    import opinfo_util as U

    groups = collections.defaultdict(list)  # group heading -> [(key, reason)]
    for col, rs in results.items():
        mode, dt = col.split("/")
        for eid, r in rs.items():
            if r["status"] == "fail":
                op = U.BY_ID[eid]
                cls = failure_class(r["reason"])
                # One group per missing op / per error message; numerics in one group.
                head = cls if cls in ("mismatch", "crash", "hang") else r["reason"][:100]
                groups[(cls, head)].append(((op.name, op.variant_test_name, dt, mode), r["reason"]))
    order = {"no lowering": 0, "dtype not supported by the device (complex/uint64)": 1, "error": 2,
             "mismatch": 3, "crash": 4, "hang": 5}
    L = ['"""Known failures of tests/ops/test_opinfo.py, and the entries it does not compare at all.',
         "",
         "EXPECTED_FAILURES: (op name, variant_test_name, dtype, mode) -> reason; each runs as",
         "xfail(strict=True, reason), so a fix shows up as XPASS: delete its line (or regenerate with",
         "`python tools/gen_ops_table.py --write-xfails`, which keeps SKIPPED_ENTRIES as written).",
         "Groups (one comment each) share a cause; 'no lowering for X' groups are what the lowering",
         'work should pick up, largest first."""',
         "",
         "# Random ops: their values come from the tpu Philox generator, CPU's from Mersenne Twister,",
         "# so they cannot be compared with CPU (tests/lowering/test_random.py checks their",
         "# distributions). Also entries whose output is uninitialized memory are skipped by",
         "# opinfo_util.skip_reason (OpInfo.has_nondeterministic_output: empty, empty_like, ...).",
         "SKIPPED_ENTRIES: dict[str, str] = {"]
    for eid, reason in sorted(skipped_entries.items()):
        L.append(f"    {eid!r}: {reason!r},")
    L += ["}", "", "EXPECTED_FAILURES: dict[tuple[str, str, str, str], str] = {"]
    for (cls, head), items in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 9), -len(kv[1]), kv[0][1])):
        entries = len({k[:2] for k, _ in items})
        what = {"mismatch": "numerics differ from CPU beyond the tolerance",
                "crash": "the worker process died (device layer)", "hang": "no result in time"}.get(cls, head)
        L.append(f"    # {cls}: {what} — {entries} entries, {len(items)} checks")
        for k, reason in sorted(items):
            L.append(f"    {k!r}: {reason!r},")
    L.append("}")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def update_readme(line: str) -> None:
    p = os.path.join(ROOT, "README.md")
    text = open(p).read()
    new = f"<!-- opinfo-totals -->{line}<!-- /opinfo-totals -->"
    if "<!-- opinfo-totals -->" in text:
        text = re.sub(r"<!-- opinfo-totals -->.*?<!-- /opinfo-totals -->", lambda _: new, text, flags=re.S)
    else:
        text = text.replace("## Documentation\n", f"## Op coverage\n\n{new}\n\n## Documentation\n", 1)
    with open(p, "w") as f:
        f.write(text)


def probe_random() -> None:
    """Entries whose first CPU float32 sample gives different results under two seeds."""
    import torch

    import opinfo_util as U

    for op in U.ENTRIES:
        if torch.float32 not in U.cpu_dtypes(op):
            continue
        outs = []
        for seed in (0, 1):
            try:
                torch.manual_seed(123)
                s = next(iter(op.sample_inputs("cpu", torch.float32)))
                torch.manual_seed(seed)
                outs.append(op(s.input, *s.args, **s.kwargs))
            except Exception:  # noqa: BLE001
                break
        if len(outs) == 2:
            try:
                torch.testing.assert_close(outs[0], outs[1], equal_nan=True)
            except Exception:  # noqa: BLE001
                listed = "listed" if U.skip_reason(op) else "NOT LISTED"
                print(f"{U.entry_id(op)}: seed-dependent ({listed})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "DTYPE"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="float32 strict only")
    ap.add_argument("--columns", help="comma-separated mode/dtype columns, e.g. strict/float32,grad/float32")
    ap.add_argument("--entries", help="regex on entry ids (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "ops.md"))
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "ops.json"))
    ap.add_argument("--write-xfails", action="store_true", help="regenerate tests/ops/expected_failures.py")
    ap.add_argument("--readme", action="store_true", help="update the totals line in README.md")
    ap.add_argument("--probe-random", action="store_true")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], [ln for ln in sys.stdin.read().splitlines() if ln])
        return
    if a.probe_random:
        probe_random()
        return

    import torch

    import opinfo_util as U
    from expected_failures import SKIPPED_ENTRIES

    columns = QUICK_COLUMNS if a.quick else FULL_COLUMNS
    if a.columns:
        columns = [tuple(c.split("/")) for c in a.columns.split(",")]
    ids = [U.entry_id(o) for o in U.ENTRIES if not a.entries or re.search(a.entries, U.entry_id(o))]
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    log(f"{len(ids)} entries x {len(columns)} columns, {a.jobs} jobs")
    t0 = time.time()
    results: dict[str, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = {ex.submit(run_column, m, d, ids, log): f"{m}/{d}" for m, d in columns}
        for f in concurrent.futures.as_completed(futs):
            results[futs[f]] = f.result()
    results = {f"{m}/{d}": results[f"{m}/{d}"] for m, d in columns}
    tot = totals(results, columns)
    meta = {"date": datetime.date.today().isoformat(), "torch": torch.__version__, "samples": U.MAX_SAMPLES,
            "seconds": round(time.time() - t0, 1)}
    partial = bool(a.entries)
    if not partial:
        write_markdown(a.out, results, columns, tot, meta)
        write_json(a.json, results, columns, tot, meta)
    if a.write_xfails:
        if partial or a.quick or a.columns:
            log("--write-xfails needs the full sweep (no --quick/--columns/--entries); not written")
        else:
            write_xfails(os.path.join(OPS_DIR, "expected_failures.py"), results, SKIPPED_ENTRIES)
    if partial:
        for col, rs in results.items():
            for eid, r in rs.items():
                if r["status"] in ("fail", "skip"):
                    log(f"  {col} {eid}: {r['status']} {r['reason']}")
    for col, t in tot.items():
        log(f"{col:18s} pass {t['pass']:4d}  fail {t['fail']:4d}  unsupported {t['unsupported']:4d}  skip {t['skip']:4d}")
    log("top missing lowerings (entries affected, all columns): "
        + ", ".join(f"{k} {v}" for k, v in missing_ops(results).most_common(15)))
    log(f"{time.time() - t0:.0f}s")
    line = readme_line(tot) if "strict/float32" in tot else ""
    if line:
        print(line)
        if a.readme and not partial:
            update_readme(line)


if __name__ == "__main__":
    main()

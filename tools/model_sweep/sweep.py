"""Hugging Face model coverage sweep: every architecture x {strict, fused} x {forward, train}.

    PYTHONPATH=. python -m tools.model_sweep.sweep [--workers 2] [--timeout 150] [--only a,b] [--merge]

Sources: transformers (every architecture with a task head) and diffusers (tiny UNet /
autoencoder configs); see sources.py, also for why timm is not swept. `--only` takes source
names and/or model types; with `--merge` the run replaces only those records in the existing
docs/model-coverage.json and regenerates the docs from the merged records, e.g.
`--only diffusers --merge --readme` re-runs the diffusers models (seconds) without the
33-minute transformers sweep.

Models run in worker processes (tools/model_sweep/worker.py); a model that exceeds --timeout
seconds (all modes together) is recorded as "slow" and its worker is replaced, and a model
that kills its worker is recorded as "crash". Results go to docs/model-coverage.json and
docs/model-coverage.md (tools/model_sweep/report.py), and the README summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """One worker process and the model it is running."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.model_sweep.worker"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.current: str | None = None
        self.started = 0.0
        self.ready = False

    def send(self, model_type: str) -> None:
        self.current = model_type
        self.started = time.monotonic()
        self.proc.stdin.write(model_type + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_sweep(model_types: list[str], workers: int, timeout: float, log=None) -> list[dict]:
    if log is None:
        def log(msg: str) -> None:
            print(msg, flush=True)
    pending = list(model_types)
    results: list[dict] = []
    sel = selectors.DefaultSelector()
    pool: list[Worker] = []

    def spawn() -> Worker:
        w = Worker()
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        pool.append(w)
        return w

    def retire(w: Worker) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        pool.remove(w)

    def feed(w: Worker) -> None:
        if pending:
            w.send(pending.pop(0))
        else:
            retire(w)

    for _ in range(min(workers, len(pending))):
        spawn()
    t0 = time.monotonic()
    while pool:
        events = sel.select(timeout=1.0)
        for key, _ in events:
            w: Worker = key.data
            line = w.proc.stdout.readline()
            if not line:  # the worker died: the model it ran crashed the interpreter
                if w.current is not None:
                    rc = w.proc.poll()
                    results.append(_failed(w.current, "crash", f"worker process died (exit code {rc})",
                                           time.monotonic() - w.started))
                    log(f"[{len(results)}/{len(model_types)}] {w.current}: worker died")
                retire(w)
                continue
            if line.strip() == "ready":
                w.ready = True
                feed(w)
                continue
            rec = json.loads(line)
            results.append(rec)
            log(f"[{len(results)}/{len(model_types)}] {_summary(rec)}  ({time.monotonic() - t0:.0f}s)")
            w.current = None
            feed(w)
        now = time.monotonic()
        for w in list(pool):
            if w.current is not None and now - w.started > timeout:
                results.append(_failed(w.current, "slow", f"exceeded {timeout:.0f}s (all modes together)",
                                       now - w.started))
                log(f"[{len(results)}/{len(model_types)}] {w.current}: slow (killed)")
                retire(w)
        idle = [w for w in pool if w.current is None]
        while len(pool) < workers and len(pending) > len(idle):
            idle.append(spawn())
    return results


def _failed(model_type: str, cls: str, error: str, seconds: float) -> dict:
    from .sources import all_targets
    t = next(t for t in all_targets() if t.model_type == model_type)
    res = {"class": cls, "error": error}
    return {"model_type": model_type, "head": t.head, "class": t.class_name, "source": t.source,
            "seconds": round(seconds, 1),
            "strict": {"forward": res, "train": res}, "fused": {"forward": res, "train": res}}


def _summary(rec: dict) -> str:
    if "setup_error" in rec:
        return f"{rec['model_type']}: setup error {rec['setup_error'][:80]}"
    parts = []
    for mode in ("strict", "fused"):
        r = rec.get(mode, {})
        parts.append(f"{mode} fwd={r.get('forward', {}).get('class')} train={r.get('train', {}).get('class')}")
    return f"{rec['model_type']}: " + ", ".join(parts) + f" [{rec.get('seconds')}s]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--only", default="",
                    help="comma-separated sources (transformers, diffusers) and/or model types")
    ap.add_argument("--json", default=str(ROOT / "docs" / "model-coverage.json"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "model-coverage.md"))
    ap.add_argument("--readme", action="store_true", help="update the README summary line")
    ap.add_argument("--merge", action="store_true",
                    help="keep the existing JSON's records and replace only the models swept now")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: regenerate the Markdown (and README line) from the existing JSON")
    args = ap.parse_args()

    from .report import load_previous, write_reports
    from .sources import all_targets, unavailable, versions
    if args.report_only:
        results, meta = load_previous(Path(args.json))
        meta["unavailable"] = unavailable()
        write_reports(results, meta, Path(args.json), Path(args.md), readme=ROOT / "README.md" if args.readme else None)
        return
    only = {s for s in args.only.split(",") if s}
    targets = all_targets(only or None)
    t0 = time.monotonic()
    results = run_sweep([t.model_type for t in targets], args.workers, args.timeout)
    elapsed = time.monotonic() - t0
    swept_sources = sorted({t.source for t in targets})
    # A source's wall time is that of the last run that swept all of it (together with whatever
    # else that run swept); a run of a few of its models merged into it keeps that figure.
    whole = [s for s in swept_sources if not only or s in only
             or {t.model_type for t in all_targets({s})} <= only]
    meta: dict = {"sources": {}, "unavailable": unavailable()}
    if args.merge and Path(args.json).exists():
        old_results, old_meta = load_previous(Path(args.json))
        fresh = {r["model_type"] for r in results}
        results = [r for r in old_results if r["model_type"] not in fresh] + results
        meta["sources"].update(old_meta.get("sources", {}))
    ver = versions()
    for s in swept_sources:
        entry = dict(meta["sources"].get(s, {}))
        entry["version"] = ver[s]
        if s in whole or "elapsed_s" not in entry:
            entry["elapsed_s"] = round(elapsed)
        meta["sources"][s] = entry
    results.sort(key=lambda r: r["model_type"])
    write_reports(results, meta, Path(args.json), Path(args.md), readme=ROOT / "README.md" if args.readme else None)


if __name__ == "__main__":
    main()

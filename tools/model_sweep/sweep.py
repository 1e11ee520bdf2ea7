"""Hugging Face model coverage sweep: every architecture x {strict, fused} x {forward, train}.

    PYTHONPATH=. python -m tools.model_sweep.sweep [--workers 2] [--timeout 120] [--only a,b]

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
    from .tiny_configs import architectures
    t = next(t for t in architectures() if t.model_type == model_type)
    res = {"class": cls, "error": error}
    return {"model_type": model_type, "head": t.head, "class": t.class_name, "seconds": round(seconds, 1),
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
    ap.add_argument("--only", default="", help="comma-separated model types")
    ap.add_argument("--json", default=str(ROOT / "docs" / "model-coverage.json"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "model-coverage.md"))
    ap.add_argument("--readme", action="store_true", help="update the README summary line")
    ap.add_argument("--merge", action="store_true", help="update only the given models in the existing JSON")
    args = ap.parse_args()

    from .report import write_reports
    from .tiny_configs import architectures
    only = {s for s in args.only.split(",") if s}
    types = [t.model_type for t in architectures(only or None)]
    t0 = time.monotonic()
    results = run_sweep(types, args.workers, args.timeout)
    elapsed = time.monotonic() - t0
    if args.merge and Path(args.json).exists():
        old = json.loads(Path(args.json).read_text())
        keep = {r["model_type"]: r for r in old["results"]}
        for r in results:
            keep[r["model_type"]] = r
        results = list(keep.values())
        elapsed = old.get("elapsed_s", elapsed)
    results.sort(key=lambda r: r["model_type"])
    write_reports(results, elapsed, Path(args.json), Path(args.md), readme=ROOT / "README.md" if args.readme else None)


if __name__ == "__main__":
    main()

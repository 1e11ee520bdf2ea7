"""Runs float32 OpInfo forward checks (tests/ops/opinfo_util.py) in a process that uses
TORCH_TPU_RUNTIME=jax (every program runs as StableHLO on JAX's CPU backend) or
TORCH_TPU_RUNTIME=pjrt (StableHLO compiled and run by a PJRT plugin, e.g. XLA's CPU plugin).

    TORCH_TPU_RUNTIME=jax python tests/stablehlo/jax_opinfo_worker.py OUT.jsonl MODE:ENTRY_ID...

Writes one JSON line per check to OUT.jsonl as soon as it finished ({"entry", "mode", "status":
pass|fail|skip, "reason", "seconds"}), so a crash or a timeout still leaves the checks before it
(test_jax_opinfo.py reports the first missing check as the one that did not finish). The last
line is {"jax": engine statistics}.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import jax_runtime  # noqa: E402

import opinfo_util as U  # noqa: E402


def check(op, mode: str) -> dict:
    """One forward check as a record (opinfo_util.run_check's classification, for any mode)."""
    t0 = time.perf_counter()
    status, reason = "pass", ""
    try:
        U.check_forward(op, torch.float32, mode)
    except U.NoSampleRan as e:
        status, reason = "skip", str(e)
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its class
        if os.environ.get("TORCH_TPU_OPINFO_TRACE"):
            traceback.print_exc()
        status, reason = "fail", U.classify(e)
    finally:
        try:
            torch_tpu.sync()
        except Exception:  # noqa: BLE001 - a late asynchronous error belongs to this failed check
            pass
    return {"status": status, "reason": reason, "seconds": round(time.perf_counter() - t0, 3)}


def main() -> None:
    runtime = torch_tpu._C._runtime_name()
    if runtime not in ("jax", "pjrt"):
        raise SystemExit("run with TORCH_TPU_RUNTIME=jax or TORCH_TPU_RUNTIME=pjrt")
    torch_tpu.set_fallback(None)
    out = Path(sys.argv[1])
    with out.open("w") as f:
        for item in sys.argv[2:]:
            mode, eid = item.split(":", 1)
            rec = {"entry": eid, "mode": mode, **check(U.BY_ID[eid], mode)}
            f.write(json.dumps(rec) + "\n")
            f.flush()
        if runtime == "jax":
            f.write(json.dumps({"jax": jax_runtime.stats()}) + "\n")


if __name__ == "__main__":
    main()

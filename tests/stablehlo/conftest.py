"""Writes the (op, dtype) emitted/verified record to $TORCH_TPU_STABLEHLO_RECORD at the end of a
session (tools/gen_stablehlo_table.py sets it)."""

import json
import os
import sys


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("TORCH_TPU_STABLEHLO_RECORD")
    oracle = sys.modules.get("oracle") or sys.modules.get("tests.stablehlo.oracle")
    if path and oracle is not None:
        with open(path, "w") as f:
            json.dump([[op, dt, status] for (op, dt), status in sorted(oracle.RECORD.items())], f, indent=0)

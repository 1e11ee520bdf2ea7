#!/usr/bin/env python
"""The StableHLO coverage table: runs tests/stablehlo (emit + run on JAX's CPU backend) and writes
the IR op x dtype table between the markers in docs/stablehlo.md.

    python tools/gen_stablehlo_table.py

A cell is "V" when a test emitted a graph containing that (op, operand dtype) node and its
results matched the reference, "E" when it was emitted but no passing test covered it, and "-"
when no test emitted it (for most such cells the IR itself rejects the dtype).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "stablehlo.md"
BEGIN, END = "<!-- BEGIN GENERATED TABLE (tools/gen_stablehlo_table.py) -->", "<!-- END GENERATED TABLE -->"
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]


def collect() -> dict[tuple[str, str], str]:
    """Run the tests once and return the (op, dtype) -> status record they leave."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        env = {**os.environ, "TORCH_TPU_STABLEHLO_RECORD": str(out), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "stablehlo")],
                       env=env, cwd=ROOT, check=False)
        if not out.exists():
            raise SystemExit("tests/stablehlo wrote no record (is jax installed?)")
        return {(op, dt): status for op, dt, status in json.loads(out.read_text())}


def render(record: dict[tuple[str, str], str]) -> str:
    sys.path.insert(0, str(ROOT))
    from torch_tpu.ir.builder import OPS

    mark = {"verified": "V", "emitted": "E"}
    lines = ["| op | " + " | ".join(DTYPES) + " |", "|---" * (len(DTYPES) + 1) + "|"]
    for op in OPS:
        if op == "parameter":
            continue
        lines.append(f"| {op} | " + " | ".join(mark.get(record.get((op, dt), ""), "-") for dt in DTYPES) + " |")
    verified = sum(1 for s in record.values() if s == "verified")
    lines.append("")
    lines.append(f"{verified} (op, dtype) pairs verified on JAX CPU, {len(record) - verified} emitted only.")
    return "\n".join(lines)


def main() -> None:
    table = render(collect())
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    print(table.splitlines()[-1])


if __name__ == "__main__":
    main()

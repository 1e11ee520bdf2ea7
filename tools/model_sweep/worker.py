"""Sweep worker: reads one model type per line on stdin, writes one JSON result line per model.

Runs in its own process so that the parent can kill it when a model hangs or crashes the
interpreter; programs compiled for one model stay cached for the next one in the same worker.
"""

from __future__ import annotations

import json
import os
import sys
import warnings


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers

    transformers.logging.set_verbosity_error()
    import torch_tpu  # noqa: F401  (registers the device)

    from .check import run_target
    from .sources import all_targets

    by_type = {t.model_type: t for t in all_targets()}
    out = sys.stdout
    sys.stdout = sys.stderr  # model code that prints must not corrupt the result stream
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        model_type = line.strip()
        if not model_type:
            continue
        rec = run_target(by_type[model_type])
        out.write(json.dumps(rec) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

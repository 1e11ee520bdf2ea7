"""``python -m torch_tpu profile [options] -- python train.py ...``: runs a script under a
profiling session and prints the ranked report of torch_tpu.diagnose.report()
(docs/diagnostics.md, "profile").

The script runs in this process (``runpy``, as ``python script.py`` would run it: ``__main__``,
its own ``sys.argv`` and ``sys.path[0]``), so the report sees every op it dispatched. The report
is printed after the script ends, also when it raises or calls ``sys.exit``.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from collections.abc import Sequence

_USAGE = "python -m torch_tpu profile [--json FILE] [--trace FILE] [--memory-snapshot FILE] [--top N] " \
         "[--fallback cpu] -- [python] script.py [args] | -m module [args]"


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    # No "--": the first argument that is not an option (or an option's value) starts the command.
    opts: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        opts.append(argv[i])
        if argv[i] in ("--json", "--trace", "--memory-snapshot", "--top", "--fallback") and i + 1 < len(argv):
            opts.append(argv[i + 1])
            i += 1
        i += 1
    return opts, argv[i:]


def _resolve(command: list[str]) -> list[str]:
    """`script.py args` or `-m module args` (a leading python executable dropped); raises
    SystemExit for a missing script."""
    if command and os.path.basename(command[0]).startswith("python"):
        command = command[1:]
    if not command or (command[0] == "-m" and len(command) < 2):
        raise SystemExit(f"usage: {_USAGE}")
    if command[0] != "-m" and not os.path.isfile(command[0]):
        raise SystemExit(f"python -m torch_tpu profile: no such script: {command[0]}")
    return command


def _run_target(command: list[str]) -> int:
    """Runs a resolved command (see _resolve) as `python` would; returns its exit status."""
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    try:
        if command[0] == "-m":
            sys.argv = [command[1]] + command[2:]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        else:
            script = command[0]
            sys.argv = command[:]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # the report still comes: it may say why
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path and sys.path[0] != saved_path0:
            sys.path.pop(0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m torch_tpu profile``; returns the script's exit status."""
    opts, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    ap = argparse.ArgumentParser(prog="python -m torch_tpu profile", usage=_USAGE,
                                 description="Run a script and print a ranked report of what made it slow.")
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    ap.add_argument("--trace", metavar="FILE", help="also record a torch.profiler Chrome trace with the tpu "
                                                    "programs as device events")
    ap.add_argument("--memory-snapshot", metavar="FILE", help="also write torch.tpu.memory._snapshot() (pickle, "
                                                              "for torch/cuda/_memory_viz.py)")
    ap.add_argument("--top", type=int, default=20, help="findings to print (default 20)")
    ap.add_argument("--fallback", choices=["cpu"], help="run ops without a lowering on the CPU (counted)")
    args = ap.parse_args(opts)
    if not command:
        ap.error("no script to run")
    command = _resolve(command)

    import torch_tpu
    from torch_tpu.diagnose import profiler_memory
    from torch_tpu.diagnose.report import report, start, stop

    if args.fallback:
        torch_tpu.set_fallback(args.fallback)
    prof = None
    if args.trace:
        from torch_tpu.diagnose.profiler_trace import profile as tpu_profile

        prof = tpu_profile()
        prof.start()
    start()
    try:
        status = _run_target(command)
    finally:
        if args.memory_snapshot:  # before stop(), which drops the allocator history
            profiler_memory._dump_snapshot(args.memory_snapshot)
        data = stop()
        if prof is not None:
            prof.stop()
            prof.export_chrome_trace(args.trace, events=data.device_events)
    sys.stdout.flush()
    print(file=sys.stderr)
    report(data, file=sys.stdout, json_path=args.json, top=args.top)
    return status

"""``python -m torch_tpu <command>``: ``doctor`` (environment report), ``migrate`` (CUDA to
tpu rewrites), ``check`` (CPU/tpu parity, module by module) and ``profile`` (ranked performance
report). See docs/diagnostics.md."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = """usage: python -m torch_tpu <command> [options]

commands:
  doctor [--json]                       report the installation, runtime, devices, program cache,
                                        C++ compiler and TORCH_TPU_* variables; exit 1 if broken
  migrate FILE|DIR [--diff] [--write]   find CUDA device usage and rewrite it for "tpu"
  check FILE.py:FACTORY [--train] [--modes strict,fused,compiled] [--atol A] [--rtol R] [--json]
                                        run a model on CPU and tpu module by module; name the first
                                        diverging module and op; list unsupported ops; exit 1 if any
  profile [--json FILE] -- python train.py [args]
                                        run a script, print a ranked report of what made it slow
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a tool's ``main``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "doctor":
        from .tools import doctor

        return doctor.main(rest)
    if command == "migrate":
        from .tools import migrate

        return migrate.main(rest)
    if command == "check":
        from .tools import check

        return check.main(rest)
    if command == "profile":
        from .tools import profile

        return profile.main(rest)
    print(f"python -m torch_tpu: unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""``python -m torch_tpu check TARGET``: does a model compute on "tpu" what it computes on the
CPU, in every mode? If not, which module and which op inside it is wrong (docs/diagnostics.md,
"check"; the Python API is :func:`torch_tpu.diagnose.parity`).

TARGET names a factory: ``path/to/file.py:make`` or ``package.module:make`` (``:make_model``
when omitted). The factory takes no arguments and returns ``(model, inputs)`` or
``(model, args, kwargs)``; ``inputs`` is a tensor, a tuple/list of positional arguments, or a
dict of keyword arguments (a tokenizer's output).

Exit status: 0 all modes agree with the CPU; 1 an unsupported op, a divergence, or a mode that
raised; 2 bad usage (the target cannot be loaded, or the factory fails).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_FACTORY = "make_model"


class UsageError(Exception):
    """The target cannot be loaded or its factory does not return a model and inputs."""


def load_factory(target: str) -> Callable[[], Any]:
    """The factory ``target`` names: ``file.py:name`` or ``module.path:name``."""
    where, _, name = target.rpartition(":") if ":" in target else (target, "", DEFAULT_FACTORY)
    name = name or DEFAULT_FACTORY
    if where.endswith(".py") or "/" in where or Path(where).is_file():
        path = Path(where)
        if not path.is_file():
            raise UsageError(f"{where}: no such file")
        spec = importlib.util.spec_from_file_location(f"_torch_tpu_check_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))  # the file's own imports of its neighbours
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise UsageError(f"cannot import {where!r}: {e}") from e
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"{where} has no function {name!r} (TARGET is FILE.py:FACTORY or MODULE:FACTORY)")
    return factory


def build(factory: Callable[[], Any]) -> tuple[Any, Any, dict]:
    """Call the factory: (model, args_or_inputs, kwargs)."""
    import torch

    made = factory()
    if not isinstance(made, (tuple, list)) or len(made) not in (2, 3) or not isinstance(made[0], torch.nn.Module):
        raise UsageError("the factory must return (model, inputs) or (model, args, kwargs) with model an "
                         f"nn.Module; got {type(made).__name__}")
    return made[0], made[1], dict(made[2]) if len(made) == 3 and made[2] is not None else {}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torch_tpu check``: prints the report (or ``--json``); returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="python -m torch_tpu check",
        description="Run a model on the CPU and on tpu in each mode, module by module; name the first module, and "
                    "the op inside it, whose results diverge. Lists unsupported ops before running anything.")
    ap.add_argument("target", metavar="FILE.py:FACTORY|MODULE:FACTORY",
                    help=f"a function returning (model, inputs) or (model, args, kwargs) (default name "
                         f"{DEFAULT_FACTORY})")
    ap.add_argument("--train", action="store_true", help="also compare gradients and locate backward divergences")
    ap.add_argument("--modes", default="strict,fused,compiled", help="comma-separated subset of strict,fused,compiled")
    ap.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    ap.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    ap.add_argument("--dry-run", action="store_true", help="only list the ops the backend does not implement")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        model, inputs, kwargs = build(load_factory(args.target))
    except UsageError as e:
        print(f"python -m torch_tpu check: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the user's factory failed: say so, with its error
        print(f"python -m torch_tpu check: the factory raised {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    from ..diagnose.parity import parity

    try:
        result = parity(model, inputs, kwargs, modes=modes, train=args.train, atol=args.atol, rtol=args.rtol,
                        dry_run_only=args.dry_run)
    except (TypeError, ValueError) as e:
        print(f"python -m torch_tpu check: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.format())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

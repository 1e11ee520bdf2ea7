"""Environment report: ``python -m torch_tpu doctor [--json]`` or :func:`report`.

Reports the torch and torch_tpu versions and build, the runtime selected and why, PJRT plugin
discovery, devices and their memory, the program cache's disk tier, the C++ compiler used for
native kernels and every torch_tpu environment variable in effect (unknown ones flagged). Each
problem carries a fix; the exit status is 1 when one of them is an error (a warning does not
change it).

Only the standard library is imported at module level and torch_tpu is imported inside
:func:`report`, so when ``import torch_tpu`` itself fails (for example TORCH_TPU_RUNTIME=pjrt
with no plugin) this file still runs as a script, ``python <path>/torch_tpu/tools/doctor.py``,
and turns the import error into a diagnosis (``python -m torch_tpu`` cannot: Python imports
the package before its ``__main__``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

_PREFIX = "TORCH_TPU" + "_"  # spelled so that no unregistered variable name appears in the sources
_RUNTIMES = ("auto", "host", "pjrt", "jax")
# Where the pjrt runtime discovers plugins (csrc/runtime/pjrt/plugin.cpp; docs/pjrt.md), used when
# the extension could not be loaded at all.
_CANDIDATES = ("libtpu/libtpu.so", "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
               "jax_plugins/xla_cuda12/xla_cuda_plugin.so")
_PLUGIN_FIX = ("install a PJRT plugin: `pip install libtpu` on a TPU VM, `pip install jax-cuda13-pjrt` "
               "on an NVIDIA GPU with CUDA 13 (`jax-cuda12-pjrt` for CUDA 12), or set "
               "TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so; or use the host runtime "
               "(unset TORCH_TPU_RUNTIME, or TORCH_TPU_RUNTIME=host)")


def _problem(problems: list[dict], severity: str, message: str, fix: str) -> None:
    problems.append({"severity": severity, "message": message, "fix": fix})


def _base_version(v: str | None) -> str | None:
    return v.split("+")[0] if v else v


def _import_torch_tpu() -> tuple[ModuleType | None, ModuleType | None, str | None]:
    """(torch_tpu, its _C, the import error). ``_C`` may be loaded even when the package's
    initialization failed (it stays in sys.modules)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's autoload warns when torch_tpu fails: reported below
        import torch  # noqa: F401
    try:
        import torch_tpu

        startup = getattr(torch_tpu, "_startup_error", None)  # python -m torch_tpu imported it anyway
        if startup is not None:
            return None, torch_tpu._C, f"{type(startup).__name__}: {startup}"
        return torch_tpu, torch_tpu._C, None
    except Exception as e:  # noqa: BLE001  any failure is the diagnosis
        return None, sys.modules.get("torch_tpu._C"), f"{type(e).__name__}: {e}"


def _path_info(path: str) -> dict[str, Any]:
    """Existence, kind, owner and mode of a path (no following of a final symbolic link)."""
    p = Path(path)
    info: dict[str, Any] = {"exists": os.path.lexists(p)}
    if not info["exists"]:
        return info
    st = p.lstat()
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    info.update(is_dir=stat.S_ISDIR(st.st_mode), is_symlink=stat.S_ISLNK(st.st_mode), owner=owner,
                uid=st.st_uid, mode=format(stat.S_IMODE(st.st_mode), "04o"))
    return info


def _cache_section(tpu: ModuleType | None, problems: list[dict]) -> dict[str, Any]:
    env = os.environ.get(_PREFIX + "CACHE_DIR")
    if env is not None:
        configured, source = env, "TORCH_TPU_CACHE_DIR"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache")
        configured, source = os.path.join(base, "torch_tpu"), "default ($XDG_CACHE_HOME or ~/.cache)"
    off = configured in ("", "off")
    out: dict[str, Any] = {"configured": configured, "source": source, "disabled_by_config": off}
    if not off:
        configured = os.path.abspath(configured)
        out["configured"] = configured
        out.update(_path_info(configured))
    stats = tpu.cache_stats() if tpu is not None else None
    out["enabled"] = stats["enabled"] if stats else None
    out["stats"] = stats
    if off:
        return out
    reason = None
    if out["exists"] and not out["is_dir"]:
        reason = "it is not a directory"
    elif out["exists"] and out["uid"] != os.getuid():
        reason = f"it is owned by {out['owner']}, not by you"
    elif out["exists"] and int(out["mode"], 8) & 0o022:
        reason = f"it is writable by group or others (mode {out['mode']})"
    if reason is not None or (stats is not None and not stats["enabled"]):
        _problem(problems, "error", f"program cache directory {configured} is unusable: "
                 f"{reason or 'refused by torch_tpu (see its warning at import)'}; the disk tier is off",
                 "point TORCH_TPU_CACHE_DIR at a directory that only you own and can write (mode 0700, "
                 f"e.g. `chmod 700 {configured}`), or set TORCH_TPU_CACHE_DIR=off")
    return out


def _pjrt_section(tpu_c: ModuleType | None, runtime: str | None, problems: list[dict]) -> dict[str, Any]:
    plugin_env = os.environ.get(_PREFIX + "PJRT_PLUGIN")
    out: dict[str, Any] = {"plugin_env": plugin_env}
    if plugin_env:
        out["plugin_env_exists"] = os.path.isfile(plugin_env)
    if tpu_c is not None:
        out["candidates"] = list(tpu_c._pjrt_candidates())
        out["discovered"] = list(tpu_c._pjrt_discover())
        try:
            out["plugin"] = tpu_c._pjrt_plugin_path()
            out["lookup_error"] = None
        except Exception as e:  # noqa: BLE001  the message names what was looked for
            out["plugin"], out["lookup_error"] = None, str(e)
        out["active"] = None
        if runtime == "pjrt":
            info = tpu_c._pjrt_info()
            if info:
                out["active"] = {k: info[k] for k in ("path", "api_version", "platform", "platform_version")}
    else:
        out["candidates"] = list(_CANDIDATES)
        out["discovered"] = [str(Path(d) / c) for c in _CANDIDATES for d in sys.path
                             if d and (Path(d) / c).is_file()]
        out["plugin"] = plugin_env if plugin_env and os.path.isfile(plugin_env) else (
            out["discovered"][0] if out["discovered"] and not plugin_env else None)
        out["lookup_error"] = None
    out["found"] = out["plugin"] is not None
    if plugin_env and not out["plugin_env_exists"]:
        _problem(problems, "error", f"TORCH_TPU_PJRT_PLUGIN={plugin_env} does not exist (or is not a file); "
                 "setting it selects the pjrt runtime",
                 f"point TORCH_TPU_PJRT_PLUGIN at an installed plugin .so, or unset it; otherwise {_PLUGIN_FIX}")
    elif os.environ.get(_PREFIX + "RUNTIME") == "pjrt" and not out["found"]:
        _problem(problems, "error", "TORCH_TPU_RUNTIME=pjrt but no PJRT plugin was found (looked for "
                 f"{', '.join(out['candidates'])} in every sys.path directory)", _PLUGIN_FIX)
    return out


def _runtime_section(tpu_c: ModuleType | None, import_error: str | None, pjrt: dict,
                     problems: list[dict]) -> dict[str, Any]:
    requested = os.environ.get(_PREFIX + "RUNTIME")
    selected = None
    if tpu_c is not None and import_error is None:
        selected = tpu_c._runtime_name()
    if requested:
        why = f"TORCH_TPU_RUNTIME={requested}"
    elif pjrt["plugin_env"]:
        why = "TORCH_TPU_PJRT_PLUGIN is set (auto selects pjrt)"
    elif selected == "pjrt":
        why = f"default (auto): discovered plugin {pjrt['plugin']}"
    elif pjrt["discovered"]:
        why = (f"default (auto): discovered {pjrt['discovered'][0]} but could not create its client "
               "(see the warning at import), so host")
    else:
        why = "default (auto): no PJRT plugin discovered, so host"
    if requested and requested not in _RUNTIMES:
        _problem(problems, "error", f"TORCH_TPU_RUNTIME={requested} is not a runtime",
                 f"set TORCH_TPU_RUNTIME to one of {', '.join(_RUNTIMES)} or unset it")
    return {"selected": selected, "requested": requested, "why": why}


def _devices_section(tpu: ModuleType | None, problems: list[dict]) -> dict[str, Any]:
    if tpu is None:
        return {"count": None, "devices": []}
    import torch

    devices = []
    count = torch.tpu.device_count()
    for i in range(count):
        free, total = torch.tpu.mem_get_info(i)
        devices.append({"index": i, "name": torch.tpu.get_device_name(i), "free_bytes": free, "total_bytes": total})
    if count == 0:
        _problem(problems, "error", "no tpu device", "check TORCH_TPU_NUM_DEVICES (>= 1) and the runtime's devices")
    return {"count": count, "devices": devices}


def _compiler_section(tpu_c: ModuleType | None, problems: list[dict]) -> dict[str, Any]:
    cxx = os.environ.get("CXX") or "c++"
    words = shlex.split(cxx) or ["c++"]
    path = shutil.which(words[0])
    version = None
    if path:
        try:
            r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
            version = (r.stdout.splitlines() or [""])[0]
        except (OSError, subprocess.SubprocessError) as e:
            version = f"({e})"
    setting = os.environ.get(_PREFIX + "NATIVE_KERNELS", "64")
    stats = tpu_c._native_kernel_stats() if tpu_c is not None else None
    out = {"cxx": cxx, "source": "CXX" if os.environ.get("CXX") else "default (c++)", "path": path,
           "version": version, "native_kernels": setting, "stats": stats}
    if path is None and setting not in ("0", "off"):
        _problem(problems, "warning", f"the C++ compiler {words[0]!r} for native kernels is not on PATH: fused "
                 "clusters stay interpreted (same results, slower)",
                 "install one (e.g. `apt-get install g++`) or set CXX to a compiler; "
                 "TORCH_TPU_NATIVE_KERNELS=off silences this")
    if stats and stats.get("last_error"):
        _problem(problems, "warning", f"a native kernel failed to compile: {stats['last_error']}",
                 "check CXX; TORCH_TPU_NATIVE_KERNELS=off interprets every cluster")
    return out


def _env_section(tpu_c: ModuleType | None, problems: list[dict]) -> list[dict[str, Any]]:
    registry = {name: default for name, default, _ in tpu_c._env_registry()} if tpu_c is not None else None
    out = []
    for name in sorted(k for k in os.environ if k.startswith(_PREFIX)):
        known = None if registry is None else name in registry
        out.append({"name": name, "value": os.environ[name], "known": known,
                    "default": registry.get(name) if registry else None})
        if known is False:
            close = difflib.get_close_matches(name, list(registry), n=1)
            _problem(problems, "warning", f"unknown variable {name}={os.environ[name]} (torch_tpu does not read it)",
                     (f"did you mean {close[0]}? " if close else "") + "the variables are listed in docs/env.md "
                     "and by torch_tpu.env_vars()")
    return out


def report() -> dict[str, Any]:
    """The environment report as a dict: ``python``, ``torch``, ``torch_tpu`` (version, path,
    extension, built_against: the torch version the extension was compiled with, or None when
    it cannot be told, import_error), ``runtime`` (selected, requested, why), ``pjrt``
    (plugin_env, candidates, discovered, plugin, found, lookup_error, active), ``devices`` (count
    and per device index, name, free/total bytes), ``cache`` (configured directory and its source,
    exists/owner/mode, enabled, the disk tier's stats), ``compiler`` (cxx, path, version,
    native_kernels), ``env`` (each torch_tpu variable set: name, value, known, default),
    ``problems`` (severity ``error`` or ``warning``, message, fix) and ``ok`` (no error)."""
    problems: list[dict] = []
    tpu, tpu_c, import_error = _import_torch_tpu()
    import torch

    cache = _cache_section(tpu, problems)
    built_against = None
    directory = (cache.get("stats") or {}).get("directory") or ""
    m = re.search(r"-torch([^-/]+)-ir", os.path.basename(directory))
    if m:
        built_against = m.group(1)
    pkg = {"version": getattr(tpu, "__version__", None),
           "path": str(Path(tpu.__file__).parent) if tpu else None,
           "extension": getattr(tpu_c, "__file__", None),
           "built_against": built_against,
           "import_error": import_error}
    if built_against and _base_version(built_against) != _base_version(torch.__version__):
        _problem(problems, "error", f"the extension was built against torch {built_against}, this is torch "
                 f"{torch.__version__}", "rebuild torch_tpu (`make`, or `pip install -e .`) against this torch")
    pjrt = _pjrt_section(tpu_c, tpu_c._runtime_name() if tpu_c is not None and import_error is None else None,
                         problems)
    runtime = _runtime_section(tpu_c, import_error, pjrt, problems)
    if import_error:
        covered = any(p["severity"] == "error" for p in problems)
        problems.insert(0, {"severity": "error", "message": f"import torch_tpu failed: {import_error}",
                            "fix": "see the next error" if covered else
                            "an AttributeError or ImportError from torch_tpu._C means the extension is older "
                            "than the Python sources: rebuild it (`make`)"})
    out = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "torch": {"version": torch.__version__, "path": str(Path(torch.__file__).parent)},
        "torch_tpu": pkg,
        "runtime": runtime,
        "pjrt": pjrt,
        "devices": _devices_section(tpu, problems),
        "cache": cache,
        "compiler": _compiler_section(tpu_c, problems),
        "env": _env_section(tpu_c, problems),
        "problems": problems,
    }
    out["ok"] = not any(p["severity"] == "error" for p in problems)
    return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def format_report(r: dict[str, Any]) -> str:
    """The human-readable form of :func:`report`."""
    t, rt, pj, c, cx = r["torch_tpu"], r["runtime"], r["pjrt"], r["cache"], r["compiler"]
    lines = [
        f"python      {r['python']['version']} ({r['python']['executable']})",
        f"torch       {r['torch']['version']} ({r['torch']['path']})",
        f"torch_tpu   {t['version']} ({t['path']})" if t["version"] else "torch_tpu   (import failed)",
        f"  extension {t['extension']}",
        "  built against torch " + (t["built_against"] or "unknown (read from the program cache's directory "
                                    "name, which needs the disk tier and a working import)"),
    ]
    if t["import_error"]:
        lines.append(f"  import FAILED: {t['import_error']}")
    lines.append(f"runtime     {rt['selected'] or '(none)'}: {rt['why']}")
    lines.append(f"pjrt plugin {pj['plugin'] or 'not found'}")
    if pj.get("active"):
        a = pj["active"]
        lines.append(f"  active    {a['platform']} {a['platform_version']}, API {a['api_version']}")
    lines.append(f"  looks for {', '.join(pj['candidates'])} in each sys.path directory; "
                 f"TORCH_TPU_PJRT_PLUGIN={pj['plugin_env'] or '(unset)'}")
    d = r["devices"]
    count = d["count"] if d["count"] is not None else "(unknown: torch_tpu did not import)"
    lines.append(f"devices     {count}")
    for dev in d["devices"]:
        lines.append(f"  tpu:{dev['index']}     {dev['name']}: "
                     f"{_gib(dev['free_bytes'])} free of {_gib(dev['total_bytes'])}")
    if c["disabled_by_config"]:
        lines.append(f"cache       off ({c['source']})")
    else:
        where = (f"owner {c['owner']}, mode {c['mode']}" if c["exists"]
                 else "does not exist yet (created on first use)")
        state = {True: "enabled", False: "DISABLED", None: "unknown"}[c["enabled"]]
        lines.append(f"cache       {c['configured']} ({c['source']}): {where}; disk tier {state}")
        if c["stats"] and c["stats"]["enabled"]:
            s = c["stats"]
            lines.append(f"  entries   {s['directory']}: {s['bytes']} bytes of {s['max_bytes']}")
    lines.append(f"compiler    {cx['cxx']} ({cx['source']}): {cx['path'] or 'NOT FOUND on PATH'}"
                 + (f", {cx['version']}" if cx["version"] else "")
                 + f"; TORCH_TPU_NATIVE_KERNELS={cx['native_kernels']}")
    lines.append(f"variables   {len(r['env'])} set")
    for v in r["env"]:
        mark = "" if v["known"] is not False else "   <- UNKNOWN"
        lines.append(f"  {v['name']}={v['value']}{mark}")
    for p in r["problems"]:
        lines.append(f"{p['severity'].upper()}: {p['message']}")
        lines.append(f"  fix: {p['fix']}")
    errors = sum(p["severity"] == "error" for p in r["problems"])
    warns = len(r["problems"]) - errors
    lines.append(f"doctor: {'OK' if r['ok'] else 'BROKEN'} ({errors} error(s), {warns} warning(s))")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torch_tpu doctor [--json]``: prints the report; 1 if it found an error."""
    ap = argparse.ArgumentParser(prog="python -m torch_tpu doctor", description="torch_tpu environment report")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    r = report()
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""python -m torch_tpu doctor: the report's keys and values on this machine, and the broken set-ups
it must name with a fix (pjrt without a plugin, an unusable cache directory) or flag (unknown
variables, no C++ compiler)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu
from torch_tpu.tools import doctor

SCRIPT = Path(doctor.__file__)
HERE = Path(__file__).resolve().parent


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without runtime selection variables and unregistered torch_tpu variables
    (such as the suite's own switches, which the doctor would flag), plus ``extra``."""
    registered = {name for name, _, _ in torch_tpu.env_vars()}
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TPU_RUNTIME", "TORCH_TPU_PJRT_PLUGIN")
           and (not k.startswith("TORCH_TPU_") or k in registered)}
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=HERE, env=env)


def test_json_report_on_this_machine() -> None:
    env = clean_env()
    out = run(["-m", "torch_tpu", "doctor", "--json"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert set(r) == {"python", "torch", "torch_tpu", "runtime", "pjrt", "devices", "cache", "compiler", "env",
                      "problems", "ok"}
    assert r["ok"] is True and [p for p in r["problems"] if p["severity"] == "error"] == []
    assert r["torch"]["version"] == torch.__version__
    assert r["torch_tpu"]["version"] == torch_tpu.__version__
    assert r["torch_tpu"]["extension"] == torch_tpu._C.__file__
    assert r["torch_tpu"]["built_against"] == torch.__version__.split("+")[0]
    assert r["torch_tpu"]["import_error"] is None
    assert r["runtime"] == {"selected": "host", "requested": None,
                            "why": "default (auto): no PJRT plugin discovered, so host"}
    assert r["pjrt"]["found"] is False and r["pjrt"]["discovered"] == []
    assert r["pjrt"]["candidates"] == ["libtpu/libtpu.so", "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
                                       "jax_plugins/xla_cuda12/xla_cuda_plugin.so"]
    assert r["devices"]["count"] == torch.tpu.device_count() >= 1
    dev = r["devices"]["devices"][0]
    assert dev["name"] == torch.tpu.get_device_name(0)
    assert dev["total_bytes"] == torch.tpu.get_device_properties(0).total_memory
    assert 0 < dev["free_bytes"] <= dev["total_bytes"]
    # tests/conftest.py points the disk tier at a private temporary directory
    cache = r["cache"]
    assert cache["configured"] == os.environ["TORCH_TPU_CACHE_DIR"]
    assert cache["source"] == "TORCH_TPU_CACHE_DIR"
    assert cache["exists"] and cache["is_dir"] and cache["mode"] == "0700" and cache["uid"] == os.getuid()
    assert cache["enabled"] is True and cache["stats"]["directory"].startswith(cache["configured"])
    names = {v["name"]: v for v in r["env"]}
    assert names["TORCH_TPU_CACHE_DIR"]["known"] is True
    assert set(names) == {k for k in env if k.startswith("TORCH_TPU_")}
    assert r["compiler"]["cxx"] == os.environ.get("CXX", "c++")


def test_human_readable_report() -> None:
    out = run(["-m", "torch_tpu", "doctor"], clean_env())
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert f"torch       {torch.__version__} ({Path(torch.__file__).parent})" in lines
    assert "runtime     host: default (auto): no PJRT plugin discovered, so host" in lines
    assert f"devices     {torch.tpu.device_count()}" in lines
    assert lines[-1] == "doctor: OK (0 error(s), 0 warning(s))"


def test_pjrt_with_a_missing_plugin_file_names_the_fix(tmp_path: Path) -> None:
    missing = str(tmp_path / "no_such_plugin.so")
    env = clean_env(TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=missing)
    # `import torch_tpu` fails in this environment: `python -m torch_tpu doctor` still runs (the
    # package keeps the startup error for the tools) and diagnoses it, as does the doctor run as a
    # file; a plain import still raises.
    out = run(["-c", "import torch_tpu"], env)
    assert out.returncode != 0 and f"TORCH_TPU_PJRT_PLUGIN={missing} does not exist" in out.stderr
    out = run(["-m", "torch_tpu", "doctor", "--json"], env)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["problems"] == json.loads(run([str(SCRIPT), "--json"], env).stdout)["problems"]
    assert "Exception ignored" not in out.stderr  # no exit handler touches the device that never started
    r = json.loads(out.stdout)
    assert r["ok"] is False and r["runtime"]["selected"] is None
    assert r["runtime"]["why"] == "TORCH_TPU_RUNTIME=pjrt"
    assert r["pjrt"]["plugin_env"] == missing and r["pjrt"]["plugin_env_exists"] is False
    errors = [p for p in r["problems"] if p["severity"] == "error"]
    assert errors[0]["message"].startswith("import torch_tpu failed: RuntimeError:")
    assert errors[1]["message"].startswith(f"TORCH_TPU_PJRT_PLUGIN={missing} does not exist")
    assert "pip install libtpu" in errors[1]["fix"] and "pip install jax-cuda13-pjrt" in errors[1]["fix"]
    assert "unset it" in errors[1]["fix"]
    text = run([str(SCRIPT)], env)
    assert text.returncode == 1
    assert "  fix: point TORCH_TPU_PJRT_PLUGIN at an installed plugin .so, or unset it" in text.stdout
    assert text.stdout.splitlines()[-1] == "doctor: BROKEN (2 error(s), 0 warning(s))"


def test_pjrt_without_any_plugin_names_the_packages() -> None:
    if torch_tpu._C._pjrt_discover():
        pytest.skip(f"a PJRT plugin is installed here ({torch_tpu._C._pjrt_discover()[0]})")
    out = run([str(SCRIPT), "--json"], clean_env(TORCH_TPU_RUNTIME="pjrt"))
    assert out.returncode == 1, out.stderr
    r = json.loads(out.stdout)
    assert "no PJRT plugin found" in r["pjrt"]["lookup_error"]
    errors = [p for p in r["problems"] if p["severity"] == "error"]
    assert errors[1]["message"].startswith("TORCH_TPU_RUNTIME=pjrt but no PJRT plugin was found")
    assert errors[1]["fix"].startswith("install a PJRT plugin: `pip install libtpu` on a TPU VM, "
                                       "`pip install jax-cuda13-pjrt` on an NVIDIA GPU")


def test_unusable_cache_directory_is_an_error(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = run(["-m", "torch_tpu", "doctor", "--json"], clean_env(TORCH_TPU_CACHE_DIR=str(shared)))
    assert out.returncode == 1, out.stderr
    r = json.loads(out.stdout)
    assert r["cache"]["enabled"] is False and r["cache"]["mode"] == "0777"
    [err] = [p for p in r["problems"] if p["severity"] == "error"]
    assert err["message"] == (f"program cache directory {shared} is unusable: it is writable by group or others "
                              "(mode 0777); the disk tier is off")
    assert f"chmod 700 {shared}" in err["fix"] and "TORCH_TPU_CACHE_DIR=off" in err["fix"]


def test_cache_off_is_not_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "off")
    r = doctor.report()
    assert r["cache"]["disabled_by_config"] is True and r["cache"]["configured"] == "off"
    assert not any("cache" in p["message"] for p in r["problems"])


def test_unknown_variable_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TPU_FOO", "1")
    monkeypatch.setenv("TORCH_TPU_MODEE", "fused")
    r = doctor.report()
    assert r["ok"] is True
    env = {v["name"]: v for v in r["env"]}
    assert env["TORCH_TPU_FOO"] == {"name": "TORCH_TPU_FOO", "value": "1", "known": False, "default": None}
    warnings = {p["message"]: p["fix"] for p in r["problems"] if p["severity"] == "warning"}
    assert "unknown variable TORCH_TPU_FOO=1 (torch_tpu does not read it)" in warnings
    assert warnings["unknown variable TORCH_TPU_MODEE=fused (torch_tpu does not read it)"].startswith(
        "did you mean TORCH_TPU_MODE?")
    assert "  TORCH_TPU_FOO=1   <- UNKNOWN" in doctor.format_report(r).splitlines()


def test_missing_compiler_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/bin/g++ -O2")
    r = doctor.report()
    assert r["ok"] is True
    assert r["compiler"]["path"] is None and r["compiler"]["source"] == "CXX"
    assert any(p["message"].startswith("the C++ compiler '/nonexistent/bin/g++' for native kernels is not on PATH")
               for p in r["problems"])


def test_compiler_found() -> None:
    r = doctor.report()
    assert r["compiler"]["path"] == shutil.which(os.environ.get("CXX", "c++").split()[0])
    assert r["compiler"]["version"]

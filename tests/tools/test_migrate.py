"""python -m torch_tpu migrate: findings on a corpus of CUDA scripts (tests/tools/corpus), the
rewrite (comments and formatting kept, lookalike strings untouched, idempotent) and the migrated
training scripts running on "tpu"."""

from __future__ import annotations

import ast
import io
import math
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from torch_tpu.tools import migrate

CORPUS = Path(__file__).resolve().parent / "corpus"
ROOT = Path(__file__).resolve().parents[2]

# (line, kind) of every finding per corpus file.
EXPECTED = {
    "train_loop.py": {(6, "cudnn-flag"), (11, "torch-cuda"), (12, "dot-cuda"), (14, "device-string"),
                      (15, "device-string"), (23, "torch-cuda"), (24, "torch-cuda")},
    "amp_train.py": {(5, "cuda-amp"), (10, "device-string"), (13, "cuda-amp"), (19, "cuda-amp"), (26, "cuda-amp")},
    "ddp_train.py": {(13, "torch-cuda"), (14, "nccl-backend"), (14, "device-string"), (15, "device-string"),
                     (22, "nccl-backend"), (24, "torch-cuda")},
    "hf_trainer.py": {(12, "device-string"), (18, "cuda-branch"), (18, "torch-cuda"), (26, "torch-cuda"),
                      (27, "torch-cuda")},
    "device_select.py": {(6, "cuda-branch"), (6, "torch-cuda"), (7, "device-string"), (10, "cuda-branch"),
                         (10, "device-string"), (10, "torch-cuda"), (13, "device-string"), (15, "device-string"),
                         (19, "is-cuda"), (26, "device-string")},
    "lookalikes.py": set(),
}
REPORT_ONLY = {"cudnn-flag", "cuda-branch"}


def code(text: str) -> str:
    """The source without comments and docstrings (the text that runs)."""
    tree = ast.parse(text)
    docs = {(n.body[0].value.lineno, n.body[0].value.col_offset) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    keep = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type != tokenize.COMMENT and not (t.type == tokenize.STRING and t.start in docs)]
    return " ".join(keep)


def findings(path: Path) -> list[migrate.Finding]:
    r = migrate.migrate_file(path)
    assert r.error is None
    return r.findings


def test_corpus_findings_by_line_and_kind() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.py")) == sorted(EXPECTED)
    for name, expected in EXPECTED.items():
        got = {(f.line, f.kind) for f in findings(CORPUS / name)}
        assert got == expected, name


def test_report_positions_and_suggestions() -> None:
    by_pos = {(f.line, f.col): f for f in findings(CORPUS / "train_loop.py")}
    # `.cuda()` is reported at the attribute, `.to("cuda")` at the string (1-based columns)
    assert by_pos[(12, 75)].kind == "dot-cuda" and by_pos[(12, 75)].suggestion == ".tpu()"
    assert by_pos[(14, 32)].message == '"cuda" in .to()' and by_pos[(14, 32)].suggestion == '"tpu"'
    assert by_pos[(23, 5)].suggestion == "torch.accelerator.synchronize"
    assert by_pos[(24, 71)].suggestion == "torch.tpu.get_device_name"
    assert not by_pos[(6, 1)].rewritable and "no tpu equivalent" in by_pos[(6, 1)].suggestion
    ddp = {(f.line, f.col): f for f in findings(CORPUS / "ddp_train.py")}
    assert ddp[(14, 29)].suggestion == '"cpu:gloo,tpu:tpu"'
    assert ddp[(13, 5)].suggestion == "torch.accelerator.set_device_index"


def test_cli_report_lines() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_RUNTIME"}
    out = subprocess.run([sys.executable, "-m", "torch_tpu", "migrate", str(CORPUS)], capture_output=True,
                         text=True, timeout=300, cwd=CORPUS, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"{CORPUS / 'train_loop.py'}:12:75: dot-cuda: .cuda() moves to the CUDA device -> .tpu()" in lines
    assert sum(1 for line in lines if "lookalikes.py" in line) == 0
    assert len(lines) == 36  # two findings share a (line, kind) in ddp_train.py:24
    assert "36 finding(s) in 6 file(s): 32 rewritable, 4 report only; 5 file(s) to rewrite" in out.stderr


@pytest.fixture()
def migrated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work)
    assert migrate.main([str(work), "--write"]) == 0
    return work, capsys.readouterr().out


def test_write_leaves_no_cuda_device_usage(migrated: tuple[Path, str]) -> None:
    work, out = migrated
    assert "+    scaler = GradScaler(\"tpu\", init_scale=2.0**10)" in out  # the diff is shown first
    for name in EXPECTED:
        text = (work / name).read_text()
        compile(text, name, "exec")
        left = findings(work / name)
        assert all(f.kind in REPORT_ONLY and not f.rewritable for f in left), (name, [f.format() for f in left])
        assert {f.kind for f in left} <= {"cudnn-flag"}  # the availability branches now test torch.accelerator
        if name != "lookalikes.py":
            assert "import torch_tpu  # noqa: F401" in text
            assert not re.search(r"\.cuda\(|torch\.cuda\.|[\"']nccl[\"']|[\"']cuda(:\d+)?[\"']", code(text)), name
    assert (work / "lookalikes.py").read_bytes() == (CORPUS / "lookalikes.py").read_bytes()
    amp = (work / "amp_train.py").read_text()
    assert "from torch.amp import GradScaler, autocast" in amp
    assert 'with autocast("tpu", dtype=torch.float16):' in amp and 'with torch.amp.autocast("tpu"):' in amp
    loop = (work / "train_loop.py").read_text()
    assert "torch.backends.cudnn.benchmark = True  # speed up convolutions" in loop  # left, comment kept
    assert "nn.Linear(32, 1)).tpu()" in loop and 'device="tpu:0"' in loop
    ddp = (work / "ddp_train.py").read_text()
    assert 'dist.init_process_group("cpu:gloo,tpu:tpu", device_id=torch.device("tpu", local_rank))' in ddp
    assert 'device = f"tpu:{local_rank}"' in ddp
    sel = (work / "device_select.py").read_text()
    assert 'fallback_device = "tpu" if torch.accelerator.is_available() else "cpu"' in sel
    assert "pin_memory_device" not in sel and "batch_size=4, pin_memory=True)\n" in sel and "batch.is_tpu" in sel


def test_write_is_idempotent(migrated: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    work, _ = migrated
    before = {p.name: p.read_bytes() for p in work.glob("*.py")}
    assert migrate.main([str(work), "--write"]) == 0
    assert "---" not in capsys.readouterr().out  # no diff
    assert {p.name: p.read_bytes() for p in work.glob("*.py")} == before


def test_diff_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work)
    assert migrate.main([str(work / "device_select.py"), "--diff"]) == 0
    out = capsys.readouterr().out
    assert '\n-    device = "cuda"\n' in out and '\n+    device = "tpu"\n' in out
    assert out.startswith(f"--- a/{str(work).lstrip('/')}/device_select.py")
    assert (work / "device_select.py").read_bytes() == (CORPUS / "device_select.py").read_bytes()


def _run(script: Path) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_RUNTIME"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=script.parent, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    m = re.search(r"RESULT first=(\S+) last=(\S+)", out.stdout)
    assert m, out.stdout
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("name", ["train_loop.py", "amp_train.py"])
def test_migrated_script_trains_on_tpu(migrated: tuple[Path, str], name: str) -> None:
    first, last = _run(migrated[0] / name)
    assert math.isfinite(first) and math.isfinite(last)
    assert last < 0.8 * first


def test_migrated_loop_matches_cpu(migrated: tuple[Path, str]) -> None:
    """The same script with the device strings set to "cpu" gives the same losses."""
    work = migrated[0]
    text = (work / "train_loop.py").read_text()
    cpu = text.replace('"tpu:0"', '"cpu"').replace('"tpu"', '"cpu"').replace(".tpu()", ".cpu()")
    cpu = cpu.replace("torch.tpu.manual_seed_all(0)", "pass").replace("torch.accelerator.synchronize()", "pass")
    cpu = re.sub(r"^ *print\(f\"peak memory.*\n", "", cpu, flags=re.M)
    (work / "train_loop_cpu.py").write_text(cpu)
    tpu_losses, cpu_losses = _run(work / "train_loop.py"), _run(work / "train_loop_cpu.py")
    assert tpu_losses == pytest.approx(cpu_losses, rel=1e-4)


def test_source_rewrites_keep_formatting() -> None:
    src = ('"""Doc: .cuda() here is text."""\n'
           "import torch as th  # the alias\n"
           "\n"
           "s = 'é'; x = th.device( 'cuda:1' )  # 'cuda' in a comment\n"
           "y = x.cuda(  )\n"
           "with th.cuda.amp.autocast(True, th.bfloat16):\n"
           "    th.cuda.synchronize()\n")
    r = migrate.migrate_source(src, "t.py")
    assert r.rewritten == ('"""Doc: .cuda() here is text."""\n'
                           "import torch as th  # the alias\n"
                           'import torch_tpu  # noqa: F401  registers the "tpu" device\n'
                           "\n"
                           "s = 'é'; x = th.device( 'tpu:1' )  # 'cuda' in a comment\n"
                           "y = x.tpu(  )\n"
                           'with th.amp.autocast("tpu", enabled=True, dtype=th.bfloat16):\n'
                           "    th.accelerator.synchronize()\n")
    dev = [f for f in r.findings if f.kind == "device-string"][0]
    assert (dev.line, dev.col) == (4, 25)  # a character column, although 'é' is two bytes in UTF-8
    assert migrate.migrate_source(r.rewritten).rewritten == r.rewritten


def test_crlf_and_existing_torch_tpu_import_kept() -> None:
    src = "import torch\r\nimport torch_tpu\r\nt = torch.ones(2).to('cuda')\r\n"
    r = migrate.migrate_source(src)
    assert r.rewritten == "import torch\r\nimport torch_tpu\r\nt = torch.ones(2).to('tpu')\r\n"


def test_unparsable_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = torch.device('cuda'\n")
    assert migrate.main([str(bad), "--write"]) == 2
    assert f"{bad}:1:" in capsys.readouterr().err and bad.read_text() == "x = torch.device('cuda'\n"


def test_no_tpu_equivalent_is_report_only() -> None:
    r = migrate.migrate_source("import torch\ng = torch.cuda.CUDAGraph()\ntorch.cuda.amp.custom_fwd\n")
    kinds = {(f.line, f.kind, f.rewritable) for f in r.findings}
    assert kinds == {(2, "torch-cuda", False), (3, "cuda-amp", False)}
    assert r.rewritten == r.original


def test_default_device_and_map_location() -> None:
    src = "import torch\ntorch.set_default_device('cuda')\nsd = torch.load('m.pt', map_location=\"cuda:0\")\n"
    r = migrate.migrate_source(src)
    assert r.rewritten.splitlines()[2:] == ["torch.set_default_device('tpu')",
                                            "sd = torch.load('m.pt', map_location=\"tpu:0\")"]
    assert [(f.line, f.col, f.kind) for f in r.findings] == [(2, 26, "device-string"), (3, 38, "device-string")]


def test_import_added_where_the_file_has_no_torch_import_or_final_newline() -> None:
    r = migrate.migrate_source('"""Doc."""\nfrom __future__ import annotations\nm = make().cuda()\n')
    assert r.rewritten == ('"""Doc."""\nfrom __future__ import annotations\n'
                           'import torch_tpu  # noqa: F401  registers the "tpu" device\nm = make().tpu()\n')
    r = migrate.migrate_source("import torch")
    assert r.rewritten == "import torch" and not r.findings
    r = migrate.migrate_source("x.cuda(); import torch")
    assert r.rewritten == 'x.tpu(); import torch\nimport torch_tpu  # noqa: F401  registers the "tpu" device'

"""CUDA-to-tpu migration assistant: ``python -m torch_tpu migrate FILE|DIR [--diff] [--write]``.

Finds CUDA device usage with Python's ``ast`` and, with ``--write``, rewrites it by editing the
source text at the nodes' positions, so formatting and comments stay as they were. Only
expressions in a device position are touched: the argument of ``torch.device``, ``.to`` and
``torch.set_default_device``, ``device=``/``device_type=``/``pin_memory_device=``/
``map_location=`` keywords, autocast/GradScaler device arguments, values assigned to a name
containing "device", ``.cuda()``/``.is_cuda``, ``torch.cuda.*`` references and ``"nccl"``
process-group backends. A ``"cuda"`` string anywhere
else (a print, a dict key, a comment, a docstring) is left alone.

Replacements prefer ``torch.accelerator`` where PyTorch has the API (is_available,
device_count, synchronize, current_device_index, set_device_index, memory statistics), else
``torch.tpu`` (torch_tpu's ``torch.cuda`` twin), else the finding is reported without a rewrite
(``torch.backends.cudnn`` flags, CUDA graphs, NVTX). Rewriting is idempotent: a second run finds
nothing to change. Columns in the report are 1-based characters.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

# torch.cuda.<name> -> torch.accelerator.<name> (PyTorch 2.9+ has all of these).
_ACCELERATOR = {
    "is_available": "is_available",
    "device_count": "device_count",
    "synchronize": "synchronize",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "current_stream": "current_stream",
    "set_stream": "set_stream",
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
    "mem_get_info": "get_memory_info",
}

# Positional parameters of the torch.cuda.amp classes, which torch.amp takes after device_type.
_CUDA_AMP_POSITIONAL = {
    "autocast": ("enabled", "dtype", "cache_enabled"),
    "GradScaler": ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
}

_DEVICE_RE = re.compile(r"^cuda(:\d+)?$")
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "__pycache__", "site-packages", "node_modules", ".tox"}


def _tpu_names() -> frozenset[str]:
    """Public top-level names of torch_tpu/device.py (what ``torch.tpu`` offers), read with ast so
    the tool needs neither torch nor the extension."""
    path = Path(__file__).resolve().parent.parent / "device.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return frozenset()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(n for n in names if not n.startswith("_"))


_TPU_NAMES = _tpu_names()


@dataclass(frozen=True)
class Edit:
    """Replace the source text between two positions ((line 1-based, column in characters,
    0-based), end exclusive) with ``text``; equal positions insert."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass
class Finding:
    """One piece of CUDA usage: where (``line``, 1-based ``col``), what (``kind``, ``message``),
    what to use instead (``suggestion``) and the edits that make the change (none: report only)."""

    path: str
    line: int
    col: int
    kind: str
    message: str
    suggestion: str
    edits: list[Edit] = field(default_factory=list)

    @property
    def rewritable(self) -> bool:
        return bool(self.edits)

    def format(self) -> str:
        tag = "" if self.rewritable else " [report only]"
        return f"{self.path}:{self.line}:{self.col}: {self.kind}: {self.message} -> {self.suggestion}{tag}"

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("edits")
        d["rewritable"] = self.rewritable
        return d


class _Source:
    """Source text with conversions from ast positions (UTF-8 byte columns) to characters."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def line(self, lineno: int) -> str:
        start = self.starts[lineno - 1]
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.text)
        return self.text[start:end]

    def char_col(self, lineno: int, byte_col: int) -> int:
        return len(self.line(lineno).encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def start(self, node: ast.AST) -> tuple[int, int]:
        return node.lineno, self.char_col(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> tuple[int, int]:
        return node.end_lineno, self.char_col(node.end_lineno, node.end_col_offset)

    def offset(self, pos: tuple[int, int]) -> int:
        return self.starts[pos[0] - 1] + pos[1]

    def segment(self, node: ast.AST) -> str:
        return self.text[self.offset(self.start(node)):self.offset(self.end(node))]

    def apply(self, edits: Iterable[Edit]) -> str:
        out = self.text
        last = None
        for e in sorted(set(edits), key=lambda e: (self.offset(e.start), self.offset(e.end)), reverse=True):
            a, b = self.offset(e.start), self.offset(e.end)
            if last is not None and b > last:
                continue  # overlaps an edit already applied: keep the first (the later one in the file)
            out = out[:a] + e.text + out[b:]
            last = a
        return out


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> qualified name for every import in the file (scopes ignored)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, src: _Source, tree: ast.Module):
        self.path = path
        self.src = src
        self.tree = tree
        self.names = _imports(tree)
        self.findings: list[Finding] = []
        self.seen: set[int] = set()  # ids of nodes already reported
        self.parents: dict[int, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent

    # -- helpers ----------------------------------------------------------------------------

    def qualname(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def torch_root(self, node: ast.AST) -> str | None:
        """The local name of ``torch`` at the root of an attribute chain (``torch``, ``th``)."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name) and self.names.get(node.id) == "torch":
            return node.id
        return None

    def add(self, node: ast.AST, kind: str, message: str, suggestion: str, edits: Sequence[Edit] = (),
            at: tuple[int, int] | None = None) -> None:
        if id(node) in self.seen:
            return
        self.seen.add(id(node))
        line, col = at or self.src.start(node)
        self.findings.append(Finding(self.path, line, col + 1, kind, message, suggestion, list(edits)))

    def replace(self, node: ast.AST, text: str) -> Edit:
        return Edit(self.src.start(node), self.src.end(node), text)

    def device_value(self, node: ast.AST | None, where: str) -> None:
        """A value in a device position: rewrite "cuda"/"cuda:N" literals (also f"cuda:{rank}" and
        both arms of a conditional expression)."""
        if node is None:
            return
        if isinstance(node, ast.IfExp):
            self.device_value(node.body, where)
            self.device_value(node.orelse, where)
            return
        seg = self.src.segment(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DEVICE_RE.match(node.value):
            new = node.value.replace("cuda", "tpu", 1)
            edits = [self.replace(node, seg.replace("cuda", "tpu", 1))] if "cuda" in seg else []
            self.add(node, "device-string", f"{seg} {where}", repr(new).replace("'", '"'), edits)
        elif isinstance(node, ast.JoinedStr) and re.match(r"^[fFrR]{1,2}(['\"]{1,3})cuda:", seg):
            self.add(node, "device-string", f"{seg} {where}", seg.replace("cuda", "tpu", 1),
                     [self.replace(node, seg.replace("cuda", "tpu", 1))])

    def backend_value(self, node: ast.AST | None) -> None:
        """A torch.distributed backend name: "nccl" -> "cpu:gloo,tpu:tpu"; "cuda:nccl" -> "tpu:tpu"."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            return
        seg = self.src.segment(node)
        if node.value == "nccl":
            new = seg.replace("nccl", "cpu:gloo,tpu:tpu", 1)
        elif "cuda:nccl" in node.value:
            new = seg.replace("cuda:nccl", "tpu:tpu", 1)
        else:
            return
        self.add(node, "nccl-backend", f"process-group backend {seg} (NCCL needs CUDA)", new,
                 [self.replace(node, new)] if new != seg else [])

    # -- visitors ---------------------------------------------------------------------------

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = [a.name for a in node.names]
        seg = self.src.segment(node)
        if node.module == "torch.cuda.amp":
            if set(names) <= set(_CUDA_AMP_POSITIONAL):
                new = re.sub(r"torch\s*\.\s*cuda\s*\.\s*amp", "torch.amp", seg, count=1)
                self.add(node, "cuda-amp", "import from torch.cuda.amp (deprecated, CUDA only)",
                         "from torch.amp import ...; pass \"tpu\" as the device", [self.replace(node, new)])
            else:
                self.add(node, "cuda-amp", "import from torch.cuda.amp",
                         "torch.amp equivalents with device_type=\"tpu\"")
        elif node.module == "torch.cuda":
            if names == ["amp"]:
                new = re.sub(r"torch\s*\.\s*cuda\b", "torch", seg, count=1)
                self.add(node, "cuda-amp", "import of torch.cuda.amp", "from torch import amp",
                         [self.replace(node, new)])
            else:
                self.add(node, "torch-cuda", f"import from torch.cuda ({', '.join(names)})",
                         "torch.accelerator / torch.tpu equivalents")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        q = self.qualname(node.func)
        func = node.func
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if q == "torch.set_default_device" and node.args:
            self.device_value(node.args[0], "in torch.set_default_device()")
        if q == "torch.device":
            self.device_value(node.args[0] if node.args else kw.get("type"), "in torch.device()")
        if isinstance(func, ast.Attribute) and func.attr == "to":
            for a in node.args:
                self.device_value(a, "in .to()")
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and not self.is_torch_module(func.value):
            line, col = self.src.end(func)
            edit = Edit((line, col - len("cuda")), (line, col), "tpu")
            self.add(func, "dot-cuda", ".cuda() moves to the CUDA device", ".tpu()", [edit], at=edit.start)
        for name in ("device", "device_type", "map_location"):
            self.device_value(kw.get(name), f"as {name}=")
        self.pin_memory_device(node)
        if q in ("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                 "torch.amp.autocast_mode.autocast", "torch.amp.grad_scaler.GradScaler") and node.args:
            self.device_value(node.args[0], f"as the device of {q.rsplit('.', 1)[1]}")
        if q and q.startswith("torch.cuda.amp.") and q.rsplit(".", 1)[1] in _CUDA_AMP_POSITIONAL:
            self.cuda_amp_call(node, q.rsplit(".", 1)[1])
        if q in ("torch.distributed.init_process_group", "torch.distributed.new_group"):
            if q.endswith("init_process_group") and node.args:
                self.backend_value(node.args[0])
            self.backend_value(kw.get("backend"))
        if isinstance(func, ast.Attribute) and func.attr == "add_argument" and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) and "device" in a.value for a in node.args):
            self.device_value(kw.get("default"), "as the default of a device option")
        self.generic_visit(node)

    def pin_memory_device(self, node: ast.Call) -> None:
        """DataLoader(..., pin_memory_device="cuda"): the keyword is deprecated (torch 2.13 warns and
        pins for the current accelerator, which pin_memory=True does), so the rewrite deletes it,
        with the comma before it."""
        ks = [k for k in node.keywords if k.arg == "pin_memory_device"]
        if not ks:
            return
        k = ks[0]
        v = k.value
        if not (isinstance(v, ast.Constant) and isinstance(v.value, str) and _DEVICE_RE.match(v.value)):
            return
        before = [self.src.end(a) for a in [*node.args, *node.keywords]
                  if self.src.offset(self.src.end(a)) <= self.src.offset(self.src.start(k))]
        edits = [Edit(max(before, key=self.src.offset), self.src.end(k), "")] if before else []
        self.add(v, "device-string", f"pin_memory_device={self.src.segment(v)} (deprecated: pins for the "
                 "current accelerator)", "delete it: pin_memory=True pins for the tpu", edits)

    def is_torch_module(self, node: ast.AST) -> bool:
        q = self.qualname(node)
        return q is not None and (q == "torch" or q.startswith("torch."))

    def cuda_amp_call(self, node: ast.Call, name: str) -> None:
        """torch.cuda.amp.autocast(...) / GradScaler(...) -> torch.amp.X("tpu", ...), positional
        arguments turned into keywords (torch.amp takes the device first)."""
        edits: list[Edit] = []
        root = self.torch_root(node.func)
        if isinstance(node.func, ast.Attribute):
            if root is None:  # amp.autocast() with `from torch.cuda import amp`: the import is rewritten
                pass
            else:
                edits.append(self.replace(node.func, f"{root}.amp.{name}"))
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > len(_CUDA_AMP_POSITIONAL[name]):
            self.add(node, "cuda-amp", f"torch.cuda.amp.{name}() with *args", f'torch.amp.{name}("tpu", ...)')
            return
        for i, (a, pname) in enumerate(zip(node.args, _CUDA_AMP_POSITIONAL[name])):
            start = self.src.start(a)
            edits.append(Edit(start, start, ('"tpu", ' if i == 0 else "") + f"{pname}="))
        if node.args:
            pass  # the device went in front of the first positional argument
        elif node.keywords:
            at = min(self.src.start(k) for k in node.keywords)
            edits.append(Edit(at, at, '"tpu", '))
        else:
            line, col = self.src.end(node)
            edits.append(Edit((line, col - 1), (line, col - 1), '"tpu"'))
        self.add(node, "cuda-amp", f"torch.cuda.amp.{name}() (deprecated, CUDA only)", f'torch.amp.{name}("tpu", ...)',
                 edits)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        q = self.qualname(node)
        parent = self.parents.get(id(node))
        outermost = not (isinstance(parent, ast.Attribute) and parent.value is node)
        if q and q.startswith("torch.cuda.") and q.count(".") == 2:
            self.torch_cuda(node, node.attr)
        elif q and q.startswith("torch.cuda.amp.") and q.count(".") == 3 and not (
                self.in_call_func(node) and node.attr in _CUDA_AMP_POSITIONAL):
            name = node.attr
            self.add(node, "cuda-amp", f"torch.cuda.amp.{name}",
                     f'torch.amp.{name}(device_type="tpu")' if name.startswith("custom_") else f"torch.amp.{name}")
        elif q and q.startswith("torch.backends.cudnn.") and outermost:
            self.add(node, "cudnn-flag", f"{self.src.segment(node)} (cuDNN setting)",
                     "no tpu equivalent: has no effect on tpu, safe to delete or leave")
        elif q and q.startswith("torch.backends.cuda.") and outermost:
            self.add(node, "cuda-backend-flag", f"{self.src.segment(node)} (CUDA backend setting)",
                     "no tpu equivalent; for matmul precision use torch.set_float32_matmul_precision")
        elif node.attr == "is_cuda" and not self.is_torch_module(node.value):
            line, col = self.src.end(node)
            edit = Edit((line, col - len("is_cuda")), (line, col), "is_tpu")
            self.add(node, "is-cuda", ".is_cuda", ".is_tpu", [edit], at=edit.start)
        self.generic_visit(node)

    def in_call_func(self, node: ast.AST) -> bool:
        parent = self.parents.get(id(node))
        return isinstance(parent, ast.Call) and parent.func is node

    def torch_cuda(self, node: ast.Attribute, name: str) -> None:
        """A reference torch.cuda.<name> (called or not)."""
        root = self.torch_root(node)
        base = node.value  # torch.cuda
        rewritable = root is not None and isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
        if name == "amp":
            return  # torch.cuda.amp.X is handled one level up
        if name in _ACCELERATOR:
            new = f"torch.accelerator.{_ACCELERATOR[name]}"
            text = f"{root}.accelerator.{_ACCELERATOR[name]}"
        elif name in _TPU_NAMES:
            new = f"torch.tpu.{name}"
            text = f"{root}.tpu.{name}"
        else:
            self.add(node, "torch-cuda", f"torch.cuda.{name}", "no torch.tpu equivalent: remove or guard it")
            return
        self.add(node, "torch-cuda", f"torch.cuda.{name}", new, [self.replace(node, text)] if rewritable else [])
        if name == "is_available":
            self.availability_branch(node)

    def availability_branch(self, node: ast.AST) -> None:
        """Report the if-statement / conditional expression that branches on CUDA's availability."""
        child, parent = node, self.parents.get(id(node))
        while parent is not None and not isinstance(parent, (ast.stmt, ast.IfExp)):
            child, parent = parent, self.parents.get(id(parent))
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is child:
            self.add(parent, "cuda-branch", "branch on torch.cuda.is_available()",
                     "tests torch.accelerator.is_available() after the rewrite (the tpu is the accelerator); "
                     "device strings in the branch become \"tpu\"")

    def visit_Assign(self, node: ast.Assign) -> None:
        self.assigned(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.assigned([node.target], node.value)
        self.generic_visit(node)

    def assigned(self, targets: list[ast.AST], value: ast.AST | None) -> None:
        names = [t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in targets]
        if any("device" in n.lower() for n in names):
            self.device_value(value, "assigned to a device variable")
        if any("backend" in n.lower() for n in names):
            self.backend_value(value)

    def visit_arguments(self, node: ast.arguments) -> None:
        positional = node.posonlyargs + node.args
        for arg, default in zip(positional[len(positional) - len(node.defaults):], node.defaults):
            if "device" in arg.arg.lower():
                self.device_value(default, "as a device parameter's default")
        for arg, default in zip(node.kwonlyargs, node.kw_defaults):
            if default is not None and "device" in arg.arg.lower():
                self.device_value(default, "as a device parameter's default")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        devicey = any((isinstance(s, ast.Attribute) and (s.attr == "type" or "device" in s.attr.lower()))
                      or (isinstance(s, ast.Name) and "device" in s.id.lower()) for s in sides)
        if devicey and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            for s in sides:
                self.device_value(s, "compared with a device")
        self.generic_visit(node)


def _import_edit(src: _Source, tree: ast.Module) -> Edit | None:
    """An ``import torch_tpu`` line after the file's first top-level torch import (or after the
    docstring and __future__ imports), unless the file imports torch_tpu already."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_tpu" for a in node.names):
            return None
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_tpu":
            return None
    after = None
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names) or (
                isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and node.level == 0):
            after = node
            break
    if after is None:
        for node in tree.body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
                node.value.value, str) and node is tree.body[0]
            if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                after = node
    line = after.end_lineno + 1 if after is not None else 1
    if line > len(src.starts):  # the statement ends the file without a newline
        end = (after.end_lineno, len(src.line(after.end_lineno)))
        return Edit(end, end, "\nimport torch_tpu  # noqa: F401  registers the \"tpu\" device")
    return Edit((line, 0), (line, 0), "import torch_tpu  # noqa: F401  registers the \"tpu\" device\n")


@dataclass
class FileResult:
    """What migrate found in one file and the rewritten text (equal to ``original`` when nothing
    is rewritable). ``error`` is set when the file could not be read or parsed."""

    path: str
    original: str
    rewritten: str
    findings: list[Finding]
    encoding: str = "utf-8"
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.rewritten != self.original

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.original.splitlines(keepends=True),
                                            self.rewritten.splitlines(keepends=True),
                                            fromfile=f"a/{self.path.lstrip('/')}",
                                            tofile=f"b/{self.path.lstrip('/')}"))


def migrate_source(text: str, path: str = "<string>") -> FileResult:
    """Find CUDA usage in Python source ``text`` and compute the rewritten source."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return FileResult(path, text, text, [], error=f"{path}:{e.lineno}:{e.offset}: cannot parse: {e.msg}")
    src = _Source(text)
    finder = _Finder(path, src, tree)
    finder.visit(tree)
    findings = sorted(finder.findings, key=lambda f: (f.line, f.col, f.kind))
    edits = [e for f in findings for e in f.edits]
    if edits:
        imp = _import_edit(src, tree)
        if imp is not None:
            edits.append(imp)
    return FileResult(path, text, src.apply(edits) if edits else text, findings)


def migrate_file(path: str | Path) -> FileResult:
    """``migrate_source`` on a file, decoded with its PEP 263 encoding (newlines kept as they are)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        with p.open("rb") as f:
            encoding, _ = tokenize.detect_encoding(f.readline)
        text = raw.decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        return FileResult(str(path), "", "", [], error=f"{path}: cannot read: {e}")
    r = migrate_source(text, str(path))
    r.encoding = encoding
    return r


def iter_python_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """The .py files named, and those under the directories named (skipping VCS, virtual
    environment and cache directories), in sorted order."""
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.py")):
                if not _SKIP_DIRS.intersection(f.relative_to(p).parts[:-1]):
                    yield f
        else:
            yield p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torch_tpu migrate``: report (default), show the diff (--diff) or rewrite
    (--write: shows the diff, then writes). Exit status 2 if a file could not be parsed."""
    ap = argparse.ArgumentParser(prog="python -m torch_tpu migrate",
                                 description="Find CUDA device usage and rewrite it for the tpu device.")
    ap.add_argument("paths", nargs="+", metavar="FILE|DIR")
    ap.add_argument("--diff", action="store_true", help="show the unified diff of the rewrite, write nothing")
    ap.add_argument("--write", action="store_true", help="show the diff, then rewrite the files in place")
    ap.add_argument("--json", action="store_true", help="findings as JSON")
    args = ap.parse_args(argv)
    results = [migrate_file(f) for f in iter_python_files(args.paths)]
    status = 0
    if args.json:
        print(json.dumps([{"path": r.path, "error": r.error, "changed": r.changed,
                           "findings": [f.to_json() for f in r.findings]} for r in results], indent=2))
    for r in results:
        if r.error:
            print(r.error, file=sys.stderr)
            status = 2
            continue
        if not args.json and not args.diff:
            for f in r.findings:
                print(f.format())
        if (args.diff or args.write) and r.changed:
            sys.stdout.write(r.diff())
        if args.write and r.changed:
            Path(r.path).write_bytes(r.rewritten.encode(r.encoding))
    if not args.json:
        n = sum(len(r.findings) for r in results)
        fixable = sum(f.rewritable for r in results for f in r.findings)
        changed = sum(r.changed for r in results)
        verb = "rewritten" if args.write else "to rewrite"
        print(f"{n} finding(s) in {len(results)} file(s): {fixable} rewritable, {n - fixable} report only; "
              f"{changed} file(s) {verb}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Rejects a layer back-edge in csrc/: an #include "dir/..." that a file's layer may not use.

Run by the build before anything is compiled (CMakeLists.txt, target tpu_check_layers) and by
tests/test_layers.py. The layers, lowest first (docs/architecture.md, "Layers"):

    common < ir < passes < stablehlo < runtime < compiler, device < exec < frontend < python

A layer may include its own headers and those of the layers listed for it below, nothing else.
Besides, runtime/host/, runtime/pjrt/ and runtime/jax/ are the runtimes' own: outside the
runtime layer only the Python bindings include them (everything else goes through runtime/*.h).

Usage: check_layers.py [CSRC_DIR]   (exit 1 and one line per back-edge when there is one)
"""
import os
import re
import sys

# Layer: (the csrc/ directories it owns, the layers it may include). A directory is matched
# by its longest prefix (compiler/passes/ belongs to passes, the rest of compiler/ to compiler).
LAYERS = {
    "common": (["common"], []),
    "ir": (["ir"], []),
    "passes": (["compiler/passes"], ["ir"]),
    "stablehlo": (["stablehlo"], ["common", "ir"]),
    "runtime": (["runtime"], ["common", "ir", "passes", "stablehlo"]),
    "compiler": (["compiler"], ["common", "ir", "passes", "runtime"]),
    "device": (["device"], ["common", "runtime"]),
    "exec": (["exec"], ["common", "ir", "passes", "stablehlo", "runtime", "compiler", "device"]),
    "frontend": (["aten", "distributed"],
                 ["common", "ir", "passes", "stablehlo", "runtime", "compiler", "device", "exec"]),
    "python": (["python"],
               ["common", "ir", "passes", "stablehlo", "runtime", "compiler", "device", "exec", "frontend"]),
}
# Private to the runtime layer (and readable by the bindings, which expose their knobs).
RUNTIME_PRIVATE = ("runtime/host/", "runtime/pjrt/", "runtime/jax/")
PRIVATE_READERS = {"runtime", "python"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(rel_path):
    """The layer owning a path relative to csrc/ (a file or an included header), or None."""
    best, best_len = None, -1
    for name, (dirs, _) in LAYERS.items():
        for d in dirs:
            if (rel_path == d or rel_path.startswith(d + "/")) and len(d) > best_len:
                best, best_len = name, len(d)
    return best


def check(csrc):
    errors = []
    for root, _, files in os.walk(csrc):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp", ".hpp", ".cc")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, csrc).replace(os.sep, "/")
            layer = layer_of(rel)
            if layer is None:
                continue
            allowed = {layer, *LAYERS[layer][1]}
            with open(path, encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    to = layer_of(target)
                    if to is None:
                        continue  # a header beside the file, or not in csrc/
                    where = f"csrc/{rel}:{lineno}"
                    if to not in allowed:
                        errors.append(f"{where}: layer back-edge: {layer} may not include \"{target}\" "
                                      f"(layer {to}); {layer} may include: {', '.join(sorted(allowed))}")
                    elif target.startswith(RUNTIME_PRIVATE) and layer not in PRIVATE_READERS:
                        errors.append(f"{where}: \"{target}\" is private to the runtime layer: "
                                      f"{layer} uses the runtimes through runtime/*.h")
    return errors


def main(argv):
    csrc = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc")
    errors = check(csrc)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} layer back-edge(s); the layers and what each may include are "
              "listed in tools/check_layers.py (docs/architecture.md, \"Layers\")", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

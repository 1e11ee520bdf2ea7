"""Builds the C++ core with CMake + ninja; `pip install --no-build-isolation -e .` uses it."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    """Configure and build with CMake; the build copies _C into torch_tpu/ itself."""

    def build_extension(self, ext: Extension) -> None:
        build_dir = ROOT / os.environ.get("BUILD", "build")
        if not (build_dir / "build.ninja").exists():
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                                   f"-DPython_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_C"])
        built = next((ROOT / "torch_tpu").glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        if target.resolve() != built.resolve():
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(built), str(target))


setup(ext_modules=[Extension("torch_tpu._C", sources=[])], cmdclass={"build_ext": CMakeBuild})

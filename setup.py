"""Builds the Python package attnlab with the project's own CMake build.

    python3 -m pip install --no-build-isolation .     # into a venv, or --user --break-system-packages
    python3 -m build --wheel --no-isolation           # dist/attnlab-VERSION-cp3X-cp3X-linux_x86_64.whl

Metadata is in pyproject.toml; this file adds what needs code: the version, read from
CMakeLists.txt's `project(attnlab VERSION ...)` (the one source of the version: the library
and attnlab.__version__ take theirs from the same line), and an extension built by CMake.
CMake configures the project with the Python module only (no tests, no command line) and
libattnlab as a static library (ATTNLAB_STATIC_LIBRARY), builds the one target
attnlab_python, and the extension it produces goes into the wheel: one file with libattnlab
linked in, so that the installed package needs no libattnlab.so next to it. It still links
Debian's shared libraries (libhwy1, libgomp1, libfmt9, libopenblas0, libstdc++6): the
wheel is for machines that have them.

Everything this build writes goes to one directory, ATTNLAB_BUILD_DIR (default
build-python/ beside this file): CMake's tree, and setuptools' build/ and egg-info, so that
the source tree and the developer's build/ stay as they were. The CMake tree persists
between builds (an unchanged tree rebuilds nothing), and ccache is used when installed.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD_DIR = Path(os.environ.get("ATTNLAB_BUILD_DIR", ROOT / "build-python")).resolve()


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(attnlab\s+VERSION\s+([0-9][0-9.]*)", text)
    if not match:
        sys.exit("setup.py: no `project(attnlab VERSION x.y.z` in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    """An extension module that a CMake target builds (no sources for setuptools to compile)."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # CMake's tree is BUILD_DIR itself: at the default, one level below the source like
        # the developer's build/, so that ccache (base_dir at the source's parent) sees the
        # same relative paths and the same compile commands, and hits.
        cmake_dir = BUILD_DIR
        configure = ["cmake", "-S", str(ROOT), "-B", str(cmake_dir),
                     "-DCMAKE_BUILD_TYPE=Release",
                     "-DATTNLAB_BUILD_TESTS=OFF", "-DATTNLAB_BUILD_TOOLS=OFF",
                     "-DATTNLAB_STATIC_LIBRARY=ON",
                     f"-DATTNLAB_PYTHON={sys.executable}"]
        if not (cmake_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache") and "CMAKE_CXX_COMPILER_LAUNCHER" not in os.environ:
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(cmake_dir), "--target", ext.target, "-j", jobs], check=True)

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = cmake_dir / "python" / "attnlab" / ("_attnlab" + suffix)
        if not built.is_file():
            sys.exit(f"setup.py: CMake did not produce {built} (is it building for another interpreter "
                     f"than {sys.executable}?)")
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, destination)
        # attnlab.torch's registered operators, where CMake found LibTorch (the target exists then).
        ops = cmake_dir / "python" / "attnlab" / "libattnlab_torch_ops.so"
        if subprocess.run(["cmake", "--build", str(cmake_dir), "--target", "attnlab_torch_ops", "-j", jobs]).returncode:
            print("setup.py: no attnlab_torch_ops (LibTorch not found): attnlab.torch will not import")
        elif ops.is_file():
            shutil.copy2(ops, destination.parent / ops.name)


BUILD_DIR.mkdir(parents=True, exist_ok=True)
setup(
    version=project_version(),
    ext_modules=[CMakeExtension("attnlab._attnlab", target="attnlab_python")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD_DIR / "setuptools")},
             "egg_info": {"egg_base": str(BUILD_DIR)}},
)

"""The CMake side of `pip install .` (pyproject.toml holds the metadata).

The extension tdyn is built by CMake's target tdyn_python (python/bindings/, linked against the library) and copied
where setuptools puts extensions. By default the tree is build-pip/ in the repository, configured for this
interpreter with the tests and benchmarks off (only the module's target is built); TDYN_CMAKE_ARGS adds options
to that configure (e.g. "-G Ninja"), and CMAKE_BUILD_PARALLEL_LEVEL sets the number of compile jobs.
TDYN_BUILD_DIR names an existing, configured CMake tree to build the target in instead, so a tree already built
compiles nothing twice.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE_DIR = Path(__file__).resolve().parent


def project_version():
    """The version is CMakeLists.txt's project(... VERSION x.y.z): one place for the library, CLI and module."""
    match = re.search(r"project\(tdyn VERSION ([0-9.]+)", (SOURCE_DIR / "CMakeLists.txt").read_text())
    if not match:
        sys.exit("setup.py: no 'project(tdyn VERSION x.y.z)' in CMakeLists.txt")
    return match.group(1)


def cmake_tree():
    """TDYN_BUILD_DIR, an existing configured tree, or build-pip/ in the repository, configured here when new."""
    given = os.environ.get("TDYN_BUILD_DIR")
    return (Path(given) if given else SOURCE_DIR / "build-pip").resolve()


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tree = cmake_tree()
        if not os.environ.get("TDYN_BUILD_DIR"):
            self.configure(tree)
        try:
            subprocess.run(["cmake", "--build", str(tree), "--target", "tdyn_python"], check=True)
        except subprocess.CalledProcessError:
            sys.exit(f"setup.py: building the CMake target tdyn_python in {tree} failed. If CMake said "
                     "'Python module skipped', install pybind11-dev and python3-dev (scripts/install-deps.sh).")
        built = tree / "python" / self.get_ext_filename(ext.name)
        if not built.is_file():
            sys.exit(f"setup.py: {built} is missing: the CMake tree was configured for another Python than "
                     f"{sys.executable} (configure it with -DPython3_EXECUTABLE={sys.executable})")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)

    def configure(self, tree):
        args = ["cmake", "-S", str(SOURCE_DIR), "-B", str(tree), "-DCMAKE_BUILD_TYPE=Release", "-DTDYN_BUILD_TESTS=OFF",
                "-DTDYN_BUILD_BENCH=OFF", "-DTDYN_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}"]
        subprocess.run(args + shlex.split(os.environ.get("TDYN_CMAKE_ARGS", "")), check=True)


# setuptools' own files (its build folders, tdyn.egg-info) go inside the CMake tree, so the source tree stays as it is.
SETUPTOOLS_DIR = cmake_tree() / "setuptools"
SETUPTOOLS_DIR.mkdir(parents=True, exist_ok=True)

# The default corpus (NOTICE) goes to PREFIX/share/tdyn, where the module looks for it.
CORPUS = [("share/tdyn/wikitext-2", ["data/wikitext-2/wiki.test.raw"]), ("share/doc/tdyn", ["NOTICE", "LICENSE"])]
setup(version=project_version(), ext_modules=[Extension("tdyn", sources=[])], cmdclass={"build_ext": CMakeBuild}, data_files=CORPUS,
      options={"build": {"build_base": str(SETUPTOOLS_DIR)}, "egg_info": {"egg_base": str(SETUPTOOLS_DIR)}})

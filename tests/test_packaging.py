"""Packaging: the wheel ships every package, and no code imports an engine folder by its bare name.

The four engine folders (graphlib/, eager/, passes/, runtime/) are subpackages of ``duograph``
mapped with setuptools' ``package_dir`` in setup.cfg. ``find:`` cannot see mapped folders, so a
package missing from setup.cfg would silently not ship: these tests build a real wheel and look.
"""
from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The packages every wheel must hold, at least (a new subpackage is found on disk below).
REQUIRED = ("duograph", "duograph.graphlib", "duograph.graphlib.ops", "duograph.eager",
            "duograph.passes", "duograph.runtime", "duograph.runtime.cpu")
# Each top-level folder of the import package -> its import name (setup.cfg's package_dir).
ROOT_FOLDERS = {
    "duograph": "duograph",
    "graphlib": "duograph.graphlib",
    "eager": "duograph.eager",
    "passes": "duograph.passes",
    "runtime": "duograph.runtime",
}
ENGINE_NAMES = ("graphlib", "eager", "passes", "runtime")
# Copying the tree leaves these out: build/ in particular keeps stale copies of deleted modules.
IGNORED = (".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
           ".hypothesis", ".ruff_cache", ".venv", "out")


def _package_folders() -> dict:
    """Every folder of modules in the import package on disk -> its import name."""
    found = {}
    for folder, package in ROOT_FOLDERS.items():
        for path in [ROOT / folder] + sorted(p for p in (ROOT / folder).rglob("*") if p.is_dir()):
            if "__pycache__" in path.parts or not any(path.glob("*.py")):
                continue
            rel = path.relative_to(ROOT / folder).parts
            found[path] = ".".join((package,) + rel)
    return found


def _source_modules() -> dict:
    """Each .py file of every package folder -> the path it must have inside the wheel."""
    wanted = {}
    for folder, package in _package_folders().items():
        for path in sorted(folder.glob("*.py")):
            wanted[path] = package.replace(".", "/") + "/" + path.name
    return wanted


def _listed_packages() -> list:
    """The packages setup.cfg lists under [options] packages."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config.get("options", "packages").split()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built with ``pip wheel . --no-deps`` from a clean copy of the repository."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*IGNORED))
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(out)],
        cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("duograph-*.whl"))
    assert len(wheels) == 1, f"expected one duograph wheel, found {wheels}"
    return wheels[0]


def test_wheel_ships_every_package_init(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(set(REQUIRED) | set(_package_folders().values()))
    missing = [p for p in packages if p.replace(".", "/") + "/__init__.py" not in names]
    assert not missing, (f"packages missing from the wheel: {missing}; list them under "
                         "[options] packages (and package_dir) in setup.cfg")


def test_wheel_ships_every_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f"{src.relative_to(ROOT)} -> {dest}"
               for src, dest in _source_modules().items() if dest not in names]
    assert not missing, "modules missing from the wheel:\n  " + "\n  ".join(missing)


def test_setup_cfg_lists_every_package_folder():
    # `find:` cannot see the mapped folders: a new folder of modules (say duograph/nn/ or
    # graphlib/ops/fused/) must be added to setup.cfg by hand, and must have an __init__.py.
    listed = set(_listed_packages())
    folders = _package_folders()
    unlisted = sorted(p for p in folders.values() if p not in listed)
    assert not unlisted, f"package folders that setup.cfg does not list: {unlisted}"
    no_init = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists())
    assert not no_init, f"package folders without an __init__.py: {no_init}"
    assert set(REQUIRED) <= listed


def test_installed_wheel_runs_and_points_errors_at_user_code(wheel, tmp_path):
    # Installed from a wheel, every engine folder sits under site-packages/duograph/: source
    # locations must still skip duograph's frames and land on the user's line.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np
        import duograph as dg
        assert dg.__file__.startswith({site!r}), dg.__file__
        g = dg.Graph("mlp")
        with g:
            x = dg.placeholder("x", shape=("N", 4))
            w = dg.placeholder("w", shape=(4, 3))
            loss = dg.mean(dg.relu(x @ w) ** 2)
            gw, = dg.grad(loss, [w])
        exe = g.compile(outputs=[loss, gw])
        loss_v, gw_v = exe(x=np.ones((2, 4), np.float32), w=np.ones((4, 3), np.float32))
        assert float(loss_v) == 16.0, loss_v
        lines = {{n.source.lineno for n in g.nodes}}
        files = {{n.source.filename for n in g.nodes}}
        assert files == {{__file__}}, files
        assert lines == {{8, 9}}, lines
        print("wheel ok")
        """).format(site=str(site)))
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wheel ok" in proc.stdout


def _python_files():
    skip = {".git", "build", "dist", ".venv", "__pycache__", ".pytest_cache", ".hypothesis"}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in skip and not d.endswith(".egg-info")]
        for name in filenames:
            if name.endswith(".py"):
                yield Path(dirpath) / name


def test_no_module_imports_an_engine_folder_by_its_bare_name():
    # `import graphlib` is the standard library's graphlib; `eager` and `runtime` are PyPI
    # packages. Inside duograph use relative imports; elsewhere `duograph.graphlib`.
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in ENGINE_NAMES:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    assert not offenders, ("absolute imports of an engine folder's bare name (use relative "
                           "imports or duograph.<name>):\n  " + "\n  ".join(offenders))


def test_the_import_check_sees_this_repository():
    files = {p.relative_to(ROOT).as_posix() for p in _python_files()}
    assert "graphlib/ir.py" in files and "runtime/executable.py" in files
    assert "tests/test_packaging.py" in files


# import name -> the distribution that provides it, where the two differ
_DISTRIBUTIONS = {"cupy": "cupy-cuda12x", "cupyx": "cupy-cuda12x", "cupy_backends": "cupy-cuda12x",
                  "sklearn": "scikit-learn"}
# Imported only when the user asks for them, never declared: PyTorch and JAX are peers that
# ``dg.compare``'s torch and jax modes and the model zoo's twins run against (their builds are
# the user's choice: an unpinned torch requirement would pull gigabytes of CUDA packages).
_PEERS = {"torch", "jax"}


def _declared_requirements() -> dict:
    """Distribution name -> where setup.cfg declares it ('install_requires' or the extra)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = {}

    def names(text):
        for line in text.split("\n"):
            line = line.split("#")[0].strip()
            if line:
                yield line.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip()
    for name in names(config.get("options", "install_requires")):
        declared[name.lower().replace("_", "-")] = "install_requires"
    for extra, text in config.items("options.extras_require"):
        for name in names(text):
            declared.setdefault(name.lower().replace("_", "-"), extra)
    return declared


def test_every_third_party_import_is_a_declared_dependency():
    """A module the package imports (at the top or inside a function) that no requirement
    or extra of setup.cfg provides would fail on a fresh machine (sympy once did: only
    other packages' dependencies installed it here)."""
    declared = _declared_requirements()
    missing = []
    for folder in ROOT_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    top = mod.split(".")[0]
                    if top in sys.stdlib_module_names or top == "duograph" or top in _PEERS:
                        continue
                    dist = _DISTRIBUTIONS.get(top, top).lower().replace("_", "-")
                    if dist not in declared:
                        missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {mod}")
    assert not missing, "imports no requirement of setup.cfg provides:\n" + "\n".join(missing)


def test_the_standard_librarys_graphlib_from_the_repository_root():
    """Run from the repository root (``python -m``, PYTHONPATH), the engine folder
    ``graphlib/`` is found first as the top-level ``graphlib`` that the standard library
    owns; it hands over to the standard library's module (cupy's float16 kernels import
    it: on a GPU they failed with "no attribute 'TopologicalSorter'"), and duograph still
    imports."""
    root = Path(__file__).resolve().parents[1]
    code = ("import graphlib, duograph; ts = graphlib.TopologicalSorter({'b': {'a'}}); "
            "print(list(ts.static_order()), duograph.graphlib.Graph.__name__)")
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["['a',", "'b']", "Graph"]

"""What an installed (non-editable) mschecker needs, checked from the checkout in milliseconds; ci/smoke_installed.sh
runs the real thing (wheel, fresh venv, commands and the pytest plugin outside the repository).

- every file under golden/ is matched by the package-data patterns of pyproject.toml, so it ships in the wheel
  (a new golden file in a deeper directory would otherwise be missing only from installs);
- the package finds its data through importlib.resources (golden_data.path), never through the source tree:
  no module of the package reaches its data with `__file__`.
"""
from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from mschecker import golden_data
from mschecker.commands.demo import DEFAULT_DIR
from mschecker.kernels.goldens import GOLDEN_ROOT
from mschecker.sd.goldens import GOLDEN_DIR

ROOT = Path(__file__).resolve().parents[1]
#: Modules allowed to use __file__, never for data: cli.py names the package's own frames in internal-error
#: messages; commands/kernels.py tells an ImportError raised in mschecker's code from one in a user's --module.
FILE_USERS = {"mschecker/cli.py", "mschecker/commands/kernels.py"}


def _package_data() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["mschecker.golden_data"] == "golden"
    assert "mschecker.golden_data" in config["packages"]
    return config["package-data"]["mschecker.golden_data"]


def test_every_golden_file_is_package_data():
    patterns = _package_data()
    files = [p.relative_to(ROOT / "golden").as_posix() for p in (ROOT / "golden").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.name != "__init__.py"]
    assert files
    # setuptools matches package-data globs per path segment: "*" never crosses a "/"
    unshipped = [f for f in files if not any(f.count("/") == pat.count("/") and fnmatch.fnmatch(f, pat)
                                             for pat in patterns)]
    assert not unshipped, f"not shipped in the wheel (add a pattern to pyproject.toml): {unshipped[:5]}"


def test_data_lookups_go_through_golden_data():
    base = golden_data.path()
    assert (base / "__init__.py").is_file()
    for where in (DEFAULT_DIR, GOLDEN_ROOT, GOLDEN_DIR):
        assert where.is_dir() and base in where.parents


def test_no_module_finds_data_through_its_own_path():
    users = []
    for pkg in ("mschecker", "reference", "optimized_kernels", "golden"):
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            if any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(tree)):
                users.append(path.relative_to(ROOT).as_posix())
    assert set(users) <= FILE_USERS, f"use golden_data.path() / importlib.resources instead of __file__: {users}"

"""Every package under mschecker/ ships: pyproject.toml lists packages by name (include-package-data is off), so a
new package left out installs nowhere and only the installed-package smoke test would notice, minutes in."""
from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport pyproject.toml installs there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mschecker").rglob("__init__.py")}
    assert on_disk - listed == set(), "packages missing from pyproject.toml [tool.setuptools] packages"

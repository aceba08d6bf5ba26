"""OS faults on every write and read path: a full disk (a real tmpfs filled to the last page), a read-only file
system (a tmpfs remounted ro) and permission denied (the CLI run as user `nobody`, a process without
CAP_DAC_OVERRIDE, for which file modes apply). Each is exit 2 with one line naming the path and the OS's reason,
and nothing is left behind: no report, no temp file, no half golden set, the old golden set intact.

Needs root (mount, setpriv); skipped where that is not available."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mschecker.tensors import golden_store

from .support import assert_bad_input, run, run_subprocess, save_x, tiny_model

NOBODY = 65534


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def tmpfs(tmp_path):
    """A 256 KiB tmpfs at tmp_path/fs, unmounted afterwards."""
    if not _can_mount():
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path) -> set[str]:
    """Fill the file system to its last byte; returns the names present afterwards (the filler)."""
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return set(os.listdir(mnt))


def _remount_ro(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)


def _write_commands(model, x, target: Path) -> dict[str, list]:
    """Every write path of the commands, aimed at `target` (a directory on the faulty file system)."""
    return {
        "check --json": ["--model", model, "--input", x, "--golden", x, "--json", target / "r.json"],
        "check --html": ["--model", model, "--input", x, "--golden", x, "--html", target / "r.html"],
        "golden record --out": ["golden", "record", "--model", model, "--input", x, "--out", target / "g"],
        "run --save-outputs": ["run", "--model", model, "--input", x, "--save-outputs", target / "saved"],
        "kernels --json": ["kernels", "--kernel", "exp", "--examples", "1", "--json", target / "k.json"],
    }


WRITE_PATHS = ["check --json", "check --html", "golden record --out", "run --save-outputs", "kernels --json"]


@pytest.mark.parametrize("command", WRITE_PATHS)
def test_disk_full(tmpfs, model, x, command):
    before = _fill(tmpfs)
    res = run(*_write_commands(model, x, tmpfs)[command])
    assert_bad_input(res, str(tmpfs), "No space left on device")
    assert set(os.listdir(tmpfs)) == before  # no report, no temp file, no half golden directory


@pytest.mark.parametrize("command", WRITE_PATHS)
def test_read_only_file_system(tmpfs, model, x, command):
    _remount_ro(tmpfs)
    res = run(*_write_commands(model, x, tmpfs)[command])
    assert_bad_input(res, str(tmpfs), "Read-only file system")
    assert os.listdir(tmpfs) == []


def test_disk_full_during_golden_update_keeps_the_old_set(tmpfs, tmp_path, x):
    """--update of a golden set on a disk that fills up half-way: exit 2, the old set complete and verified."""
    g = tmpfs / "g"
    old = {"a": np.zeros(1000, np.float32), "b": np.ones(1000, np.float32)}
    golden_store.record(g, old, producer="old")
    before = {p.name: p.read_bytes() for p in g.iterdir()}
    m = tiny_model(tmp_path / "big.onnx", shape=(200, 200))
    xb = tmp_path / "xb.npy"
    np.save(xb, np.ones((200, 200), np.float32))
    _fill(tmpfs)
    res = run("golden", "record", "--model", m, "--input", xb, "--out", g, "--update")
    assert_bad_input(res, "No space left on device")
    assert {p.name: p.read_bytes() for p in g.iterdir()} == before
    assert golden_store.verify(g) == []


def _as_nobody_possible() -> bool:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "true"],
                           capture_output=True)
    return probe.returncode == 0


needs_nobody = pytest.mark.skipif(not _as_nobody_possible(), reason="needs root and setpriv to run as nobody")


@pytest.fixture
def world():
    """A directory everyone can enter and read (pytest's tmp root is 0700), holding a model and an input."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="mschecker-world-", dir="/tmp"))
    os.chmod(d, 0o755)
    m, xi = tiny_model(d / "m.onnx"), save_x(d / "x.npy")
    for p in (m, xi):
        os.chmod(p, 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@needs_nobody
@pytest.mark.parametrize("command", ["check --json", pytest.param("golden record --out", marks=pytest.mark.slow),
                                     pytest.param("run --save-outputs", marks=pytest.mark.slow)])
def test_permission_denied_on_write(world, command):
    locked = world / "locked"
    locked.mkdir()
    os.chmod(locked, 0o755)  # root's directory: nobody may not create files in it
    argv = _write_commands(world / "m.onnx", world / "x.npy", locked)[command]
    res = run_subprocess(*argv, user=NOBODY)
    assert_bad_input(res, str(locked), "ermission denied")
    assert os.listdir(locked) == []


@needs_nobody
@pytest.mark.parametrize("what", ["input", "model", pytest.param("golden manifest", marks=pytest.mark.slow),
                                  pytest.param("profile", marks=pytest.mark.slow)])
def test_permission_denied_on_read(world, what):
    m, xi = world / "m.onnx", world / "x.npy"
    g = world / "g"
    golden_store.record(g, {"y": np.zeros((2, 3), np.float32)}, producer="t")
    os.chmod(g, 0o755)
    for p in g.iterdir():
        os.chmod(p, 0o644)
    prof = world / "p.toml"
    prof.write_text('name = "p"\n')
    secret = {"input": xi, "model": m, "golden manifest": g / "manifest.json", "profile": prof}[what]
    os.chmod(secret, 0o600)
    argv = ["--model", m, "--input", xi, "--golden", g]
    if what == "profile":
        argv = ["run", "--model", m, "--input", xi, "--device", "npu", "--profile", prof]
    res = run_subprocess(*argv, user=NOBODY)
    assert_bad_input(res, secret.name, "ermission denied")

"""Golden sets are all-or-nothing: a writer SIGKILLed at ANY point of `golden_store.record` leaves a directory in which
a reader sees the complete old set or the complete new set, never a mix; the leftovers are ignored by readers and
cleaned by the next record; a refused re-record says how to recover.

The points: the writer is a forked child whose file-system calls (mkdir, mkstemp's open, write halves of every
.npy, fsync, rename/replace, unlink, rmdir) each count as one point; for k = 1, 2, ... the child SIGKILLs itself
at point k, until a run completes without reaching k. A real subprocess killed after random delays adds the
timing the counted points cannot model."""
from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mschecker.tensors import golden_store

OLD = {"a": np.arange(300, dtype=np.float32), "b": np.ones((4, 5), np.float16), "c": np.zeros(7, np.int64)}
NEW = {"a": np.arange(300, dtype=np.float32) * 2, "b": np.ones((4, 5), np.float16), "d": np.full(3, 9.5)}
_POINT_CALLS = ("mkdir", "open", "fsync", "replace", "rename", "unlink", "rmdir")


def _same(loaded: dict, expected: dict) -> bool:
    return list(loaded) == list(expected) and all(
        loaded[k].dtype == expected[k].dtype and np.array_equal(np.asarray(loaded[k]), expected[k]) for k in expected)


def _writer_killed_at(k: int, directory, tensors, update: bool) -> bool:
    """Fork a writer that SIGKILLs itself at its k-th file-system point; True when it was killed."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            count = [0]

            def point():
                count[0] += 1
                if count[0] == k:
                    os.kill(os.getpid(), signal.SIGKILL)

            def counted(fn):
                def wrapper(*a, **kw):
                    point()
                    return fn(*a, **kw)
                return wrapper

            for name in _POINT_CALLS:
                setattr(os, name, counted(getattr(os, name)))
            real_save = np.save

            def save(f, arr, **kw):  # a kill between the two halves leaves a half-written temp file
                buf = io.BytesIO()
                real_save(buf, arr, **kw)
                data = buf.getvalue()
                point()
                f.write(data[: len(data) // 2])
                f.flush()
                point()
                f.write(data[len(data) // 2:])

            np.save = save
            golden_store.record(directory, tensors, producer="test", update=update)
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the writer failed without being killed"
    return False


def _reader_view(directory):
    """What a reader sees: the loaded set (verified), or None when there is no golden set at all."""
    if not os.path.lexists(golden_store.manifest_path(directory)):
        return None
    return golden_store.load(directory, verify=True)


def test_update_killed_at_every_point_leaves_old_or_new(tmp_path):
    pristine = tmp_path / "pristine"
    golden_store.record(pristine, OLD, producer="old")
    outcomes, k = {"old": 0, "new": 0}, 0
    while True:
        k += 1
        g = tmp_path / f"g{k}"
        shutil.copytree(pristine, g)
        killed = _writer_killed_at(k, g, NEW, update=True)
        seen = _reader_view(g)
        if _same(seen, OLD):
            outcomes["old"] += 1
        else:
            assert _same(seen, NEW), f"kill at point {k}: a mix of old and new: {sorted(seen)}"
            outcomes["new"] += 1
        problems = golden_store.verify(g)
        assert all(p.startswith(("untracked file", "leftover temp file")) for p in problems), problems
        # the next record cleans up whatever the killed writer left
        golden_store.record(g, NEW, producer="again", update=True)
        assert golden_store.verify(g) == [] and _same(golden_store.load(g), NEW)
        tracked = [e["file"] for e in golden_store.read_manifest(g)["tensors"].values()]
        assert sorted(os.listdir(g)) == sorted(["manifest.json", *tracked])  # no leftover of any kind
        shutil.rmtree(g)
        if not killed:
            break
    assert k > 10 and outcomes["old"] > 3 and outcomes["new"] >= 3, (k, outcomes)


def test_first_record_killed_at_every_point_leaves_nothing_or_new_and_says_how_to_recover(tmp_path):
    k, refused = 0, 0
    while True:
        k += 1
        g = tmp_path / f"first{k}"
        killed = _writer_killed_at(k, g, NEW, update=False)
        seen = _reader_view(g)
        assert seen is None or _same(seen, NEW), f"kill at point {k}"
        if seen is None and g.is_dir() and any(n.endswith(".npy") for n in os.listdir(g)):
            with pytest.raises(golden_store.InputError, match="interrupted first record.*--update"):
                golden_store.record(g, NEW, producer="again")
            refused += 1
        if seen is None:
            golden_store.record(g, NEW, producer="again", update=True)
            assert golden_store.verify(g) == []
        shutil.rmtree(g, ignore_errors=True)
        if not killed:
            break
    assert k > 8 and refused >= 1


def _big_set(n: int) -> dict:
    """The set the writer script records for argument n (one generator drawn in order, as the script does)."""
    rng = np.random.default_rng(n)
    return {f"t{i}": rng.standard_normal(200_000 + i) for i in range(6)}


_SCRIPT = """
import sys, numpy as np
from mschecker.tensors import golden_store
rng = np.random.default_rng(int(sys.argv[2]))
golden_store.record(sys.argv[1], {f"t{i}": rng.standard_normal(200_000 + i) for i in range(6)}, producer="big",
                    update=True)
"""


def test_real_writer_killed_after_random_delays(tmp_path):
    """A real process (imports, page cache, big files) killed at random moments: old or new, never a mix."""
    g = tmp_path / "g"
    subprocess.run([sys.executable, "-c", _SCRIPT, str(g), "0"], check=True, timeout=120)
    old = {k: np.array(v) for k, v in golden_store.load(g).items()}
    assert _same(old, _big_set(0))  # what a writer that finished records: the "new" of the attempts below
    rng = np.random.default_rng(1)
    for attempt in range(1, 4):
        proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(g), str(attempt)])
        time.sleep(float(rng.uniform(0.3, 1.2)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        now = golden_store.load(g)
        if not _same(now, old):  # the writer finished before the kill: the complete new set
            assert _same(now, _big_set(attempt)), f"attempt {attempt}: a mix"
            old = {k: np.array(v) for k, v in now.items()}

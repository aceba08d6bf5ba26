"""File-system access for untrusted paths: every OS fault becomes one InputError line, nothing is left behind.

Why one module: mschecker gates CI, so a full disk, a read-only mount, a missing permission or a FIFO given as a
tensor must end as exit 2 with one line naming the path and the OS reason, never as a traceback (exit 3) and
never as a hang or a half-written file under the final name. Every reader and writer goes through here:

- `check_readable(path, what)`: os.stat BEFORE open, so a FIFO (open would block forever), socket or device is
  refused without touching it; a directory, a missing file and a permission problem are named.
- `read_bytes` / `read_text`: the same check, then the read; OSError and invalid UTF-8 become InputError.
- `atomic_write(path, write)` (+ `_bytes`, `_text`): a temp file next to the target, fsync, os.replace. On any
  failure (ENOSPC, EROFS, EACCES, an exception in `write`, KeyboardInterrupt) the temp file is removed and the
  old file, if any, is untouched. OSError becomes InputError("cannot write PATH: REASON").
- `safe_component(name)`: a file-name component derived from an untrusted name (no separators, no `..`, no
  control characters), for every file whose name comes from a tensor, node or stage name.

The SD images and any future writer should use `atomic_write_bytes` / `atomic_write` from here.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, BinaryIO

from mschecker.errors import InputError

TEMP_SUFFIX = ".tmp"


def os_reason(exc: OSError) -> str:
    """The OS's own words for an OSError ("No space left on device"), without Python's [Errno N] decoration."""
    if exc.strerror:
        return exc.strerror
    if exc.errno is not None:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


def _kind(mode: int) -> str | None:
    """The name of a special file kind that must never be opened as data (None for a regular file)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    return None


def check_readable(path, what: str = "file") -> os.stat_result:
    """os.stat of a file about to be read; InputError (naming `what` and the path) unless it is a regular file.

    Checked with stat, not open: opening a FIFO for reading blocks until a writer appears, i.e. forever in CI."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{what} {os.fspath(path)}: file not found") from None
    except OSError as exc:
        raise InputError(f"{what} {os.fspath(path)}: cannot read ({os_reason(exc)})") from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise InputError(f"{what} {os.fspath(path)}: is {kind}, expected a regular file")
    return st


def read_bytes(path, what: str = "file") -> bytes:
    """The bytes of a regular file; InputError naming the path and the OS reason on any problem."""
    check_readable(path, what)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"{what} {os.fspath(path)}: cannot read ({os_reason(exc)})") from None
    except MemoryError:
        raise InputError(f"{what} {os.fspath(path)}: too large to read into memory") from None


def read_text(path, what: str = "file") -> str:
    """A regular file as UTF-8 text; invalid UTF-8 is an InputError naming the byte offset."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {os.fspath(path)}: not UTF-8 text (invalid byte at offset {exc.start})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_error(path, exc: OSError) -> InputError:
    """The one-line InputError for a failed write of `path`."""
    return InputError(f"cannot write {os.fspath(path)}: {os_reason(exc)}")


def check_write_target(path) -> None:
    """InputError when `path` exists as something a file write must not replace (a directory, FIFO, device)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise write_error(path, exc) from None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError:
            return  # a dangling link: os.replace replaces the link itself
    kind = _kind(st.st_mode)
    if kind is not None:
        raise InputError(f"cannot write {os.fspath(path)}: it is {kind}, expected a regular file path")


def write_temp(path, write: Callable[[BinaryIO], object]) -> Path:
    """A temp file next to `path` (".<name>.<random>.tmp"), filled by `write(fileobj)` and fsynced; the caller
    renames it into place or unlinks it. On failure nothing is left; OSError -> InputError naming `path`."""
    path = Path(path)
    check_write_target(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the permissions open() would
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise write_error(path, exc) from None
    except BaseException:
        unlink_quietly(tmp)
        raise
    return Path(tmp)


def replace_into(tmp, path) -> None:
    """os.replace(tmp, path); on failure the temp file is removed and the OSError becomes an InputError."""
    try:
        os.replace(tmp, path)
    except BaseException as exc:
        unlink_quietly(tmp)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def atomic_write(path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file atomically: `write(fileobj)` fills a temp file in the same directory, fsync, os.replace.

    A crash or kill leaves the old file or the new one under `path`, never a half-written one; a failure removes
    the temp file. OSError (disk full, read-only, permission denied, missing directory) -> InputError."""
    replace_into(write_temp(path, write), path)


def atomic_write_bytes(path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def fsync_directory(directory) -> None:
    """Make renames inside `directory` durable (a power cut after os.replace keeps the new name). Best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_directory(directory) -> list[Path]:
    """mkdir -p that returns the directories it created (deepest last), so a failed write can remove them."""
    directory = Path(directory)
    missing = []
    p = directory
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not os.path.isdir(d):
                remove_directories(created)
                raise InputError(f"cannot create directory {d}: a file of that name exists") from None
            continue
        except OSError as exc:
            remove_directories(created)
            raise InputError(f"cannot create directory {d}: {os_reason(exc)}") from None
        created.append(d)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise InputError(f"{directory}: exists and is not a directory")
    return created


def remove_directories(created: list[Path]) -> None:
    """Remove directories `make_directory` created (only if still empty), deepest first."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            pass


def write_file_set(out, files: dict[str, bytes], *, stale=(), flag: str = "--out",
                   prefix: str = ".mschecker-out-") -> list[Path]:
    """Every file of one output set into the folder `out` (created) as one set; returns their paths.

    Each file is written and fsynced into a hidden folder inside `out` (`prefix` + random: same file system, so
    the moves are renames), and only once every one of them is complete are they renamed into place; then the
    names in `stale` (the tool's own files from an earlier run that this set does not hold, e.g. an old fix next
    to a new PASS report) are removed, so `out` never mixes two runs' files. A failure while writing (disk full,
    read-only, a name taken by a directory) removes the hidden folder and the folders this call created, leaves
    `out` as it was and raises InputError naming `flag`; files in `out` that are not the tool's are never
    touched. Used by `mschecker bisect --out` and `mschecker sd --out`."""
    out = Path(out)
    for name in files:
        try:
            check_write_target(out / name)
        except InputError as exc:
            raise InputError(f"{flag} {exc}") from None
    created = make_directory(out)
    stage = None
    try:
        stage = Path(tempfile.mkdtemp(prefix=prefix, dir=out))
        for name, data in files.items():
            with open(stage / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        paths = []
        for name in files:
            os.replace(stage / name, out / name)
            paths.append(out / name)
        for name in stale:
            if name in files:
                continue
            try:
                mode = os.lstat(out / name).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):  # the tool's own file (or a link in its place)
                os.unlink(out / name)
        fsync_directory(out)
        return paths
    except OSError as exc:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
            stage = None
        remove_directories(created)
        raise InputError(f"{flag} {out}: cannot write ({os_reason(exc)})") from None
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def unlink_quietly(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_external_path(model_dir: Path, location: str, tensor_name: str, model_path: Path) -> Path:
    """The real path of an ONNX external-data file, or InputError when `location` (untrusted: it comes from the
    model file) escapes the model's folder: absolute, `..`, or a symlink out. Checked before any byte is read."""
    where = f"{model_path}: initializer {tensor_name!r} external data location {location!r}"
    if not location:
        raise InputError(f"{where} is empty")
    if os.path.isabs(location) or Path(location).is_absolute() or location.startswith(("/", "\\")) \
            or (len(location) > 1 and location[1] == ":"):
        raise InputError(f"{where} is an absolute path; external data must live inside the model's folder")
    parts = Path(location.replace("\\", "/")).parts
    if ".." in parts:
        raise InputError(f"{where} climbs out of the model's folder through '..'")
    root = model_dir.resolve()
    target = (model_dir / location).resolve()
    if target != root and root not in target.parents:
        raise InputError(f"{where} resolves (through a symlink) to {target}, outside the model's folder {root}")
    if not target.is_file():
        raise InputError(f"{where}: file {target} does not exist")
    return target


def safe_component(name: str, default: str = "tensor") -> str:
    """A file-name component derived from an untrusted name: characters outside [A-Za-z0-9._-] become '_', leading
    dots are dropped (no `..`, no hidden files), at most 200 characters (file systems cap a name at 255 bytes)."""
    stem = _UNSAFE.sub("_", str(name)).lstrip(".")[:200]
    return stem or default


def is_temp_leftover(name: str) -> bool:
    """A temp file of `atomic_write` (".<target>.<random>.tmp") left by a killed writer."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def file_sha256(path, chunk: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, read in chunks (models of several GB hash in bounded memory)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


_LIBC = None


def release_file_pages(x) -> None:
    """madvise(MADV_DONTNEED) the whole pages under a read-only np.memmap (or a view of one): the kernel keeps the
    file in its page cache, the process stops holding the pages, and a later read faults them back in. Used where
    a file-backed array has been read and will not be soon again (the comparison's chunks, weights the executor
    holds converted), so the resident set stays bounded whatever the file size. A no-op for in-memory or
    writeable arrays and off Linux."""
    global _LIBC
    import mmap

    import numpy as np

    if not isinstance(x, np.memmap) or x.flags.writeable or x.nbytes < mmap.PAGESIZE:
        return
    if _LIBC is None:
        import ctypes
        import sys

        try:
            _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else False
        except OSError:
            _LIBC = False
    if not _LIBC:
        return
    import ctypes

    page = mmap.PAGESIZE
    addr = x.ctypes.data
    start = -(-addr // page) * page
    end = (addr + x.nbytes) // page * page
    if end > start:
        _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), mmap.MADV_DONTNEED)


__all__ = ["safe_external_path", "atomic_write", "atomic_write_bytes", "atomic_write_text", "check_readable", "check_write_target",
           "file_sha256", "fsync_directory", "is_temp_leftover", "make_directory", "os_reason", "read_bytes", "read_text",
           "release_file_pages", "remove_directories", "replace_into", "safe_component", "unlink_quietly",
           "write_error", "write_temp"]

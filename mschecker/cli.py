"""mschecker: accuracy verification for NN operators and ONNX models run in reduced precision on NPUs and GPUs.

Usage: mschecker [SUBCOMMAND] [--traceback] ...   (no subcommand: the check command, `mschecker check --help`)
Each subcommand lives in mschecker/commands/<name>.py and exposes `main(argv) -> int`; `mschecker SUBCOMMAND
--help` lists its options. `--traceback` (anywhere on the line) shows the Python traceback of an internal error.

Exit codes (the CLI's API; CI can tell a regression from a broken input from a broken tool):
  0    pass
  1    numerical mismatch / failed check
  2    bad input or usage: one line on stderr naming the file, tensor, node or flag; nothing written
  3    internal error in mschecker: one line "internal error in <where>, rerun with --traceback to see it"
  130  interrupted (Ctrl-C): one line; nothing half-written
  141  stdout closed by its reader (e.g. `| head`), as a shell reports SIGPIPE
"""
from __future__ import annotations

import importlib
import os
import sys
import warnings

from mschecker.blas import pin_one_thread
from mschecker.heap import keep_freed_memory
from mschecker.errors import (EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PASS, ExecutionError,
                     InputError, KnobNote, caused_by_interrupt)

SUBCOMMANDS = {
    "check": "mschecker.commands.check",
    "golden": "mschecker.commands.golden",
    "kernels": "mschecker.commands.kernels",
    "run": "mschecker.commands.run",
    "sd": "mschecker.commands.sd",
    "demo": "mschecker.commands.demo",
    "campaign": "mschecker.commands.campaign",
    "bisect": "mschecker.commands.bisect",
    "plan": "mschecker.commands.plan",
    "rescale": "mschecker.commands.rescale",
    "dump": "mschecker.commands.dump",
}
#: subcommands that run with one BLAS thread unless the user says otherwise (mschecker/blas.py: the SD graphs)
ONE_BLAS_THREAD = ("sd",)

TRACEBACK_FLAG = "--traceback"


def _say(message: str) -> None:
    """One line on stderr: untrusted text made inert (control characters escaped), never more than one line."""
    from mschecker.untrusted import plain  # lazy: start-up (mschecker.untrusted)

    try:
        print(f"mschecker: {plain(message)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the exit code still tells
        pass


def _where(exc: BaseException) -> str:
    """The innermost frame of the traceback inside the mschecker package, as module.function:line."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(root + os.sep)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "mschecker"
    rel = os.path.relpath(os.path.abspath(frame.filename), root) if ours else os.path.basename(frame.filename)
    module = rel[:-3].replace(os.sep, ".") if rel.endswith(".py") else rel
    return f"{module}.{frame.name}:{frame.lineno}"


def _internal(exc: BaseException, show_traceback: bool) -> int:
    if show_traceback:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    detail = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {detail[0][:300]}" if detail else type(exc).__name__
    if isinstance(exc, ExecutionError):  # names the node that failed in one of our ops
        where = "the graph executor"
    else:
        where = _where(exc)
    hint = "" if show_traceback else f", rerun with {TRACEBACK_FLAG} to see it"
    _say(f"internal error in {where} ({detail}){hint}")
    return EXIT_INTERNAL


def _note_collector(notes: list[str]):
    """A warnings.showwarning that keeps KnobNotes for the end of a command that did not fail (printed as
    `note:` lines, so an exit-2 error stays one line) and prints any other warning as Python does."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, KnobNote):
            notes.append(str(message))
        else:
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
    return show


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nsubcommands: " + ", ".join(SUBCOMMANDS))
        return EXIT_PASS
    if argv and argv[0] == "--version":
        return _print_version()
    if argv and argv[0] in SUBCOMMANDS:
        name, rest = argv[0], argv[1:]
    elif argv and not argv[0].startswith("-"):
        raise InputError(f"unknown subcommand {argv[0]!r} (subcommands: {', '.join(SUBCOMMANDS)}; "
                         f"see mschecker --help)")
    else:
        name, rest = "check", argv
    if name in ONE_BLAS_THREAD:
        pin_one_thread()  # before the subcommand imports numpy (mschecker/blas.py says why)
    keep_freed_memory()  # tensors of the same sizes are allocated on every run (mschecker/heap.py says why)
    try:
        module = importlib.import_module(SUBCOMMANDS[name])
    except ModuleNotFoundError as exc:
        if exc.name == SUBCOMMANDS[name]:
            raise InputError(f"subcommand {name!r} is not available in this build") from None
        raise
    return int(module.main(rest))


REDELIVER_S = 0.05  # delay before a swallowed Ctrl-C is sent again (_redelivering_interrupts)


def _redelivering_interrupts(previous):
    """A sys.unraisablehook for the time a command runs: a Ctrl-C whose KeyboardInterrupt was raised inside a
    callback Python cannot propagate from (a garbage-collection callback, such as the one hypothesis registers to
    time the collector, or a __del__) is "ignored" by the interpreter, and the command would run on as if nobody
    had pressed Ctrl-C (the real-SIGINT test met it in CI). The signal is sent again 50 ms later, from a timer
    thread (raised here, its handler would run inside this hook and be swallowed too), so the interrupt arrives
    outside the callback (or, landing in one again, comes back here); any other unraisable exception goes to
    `previous`."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import os
            import signal
            import threading

            timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGINT))
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)
    return hook


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; never lets an exception out (see the exit codes in the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = TRACEBACK_FLAG in argv
    argv = [a for a in argv if a != TRACEBACK_FLAG]
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redelivering_interrupts(previous_hook)
    try:
        try:
            notes: list[str] = []
            with warnings.catch_warnings():
                warnings.simplefilter("default", KnobNote)  # each distinct note once
                warnings.showwarning = _note_collector(notes)
                code = _dispatch(argv)
            for note in notes:  # after the command's own output; an error (one line) discards them
                _say(f"note: {note}")
            return code
        finally:
            sys.unraisablehook = previous_hook
            _flush_stdout()
    except InputError as exc:
        if show_traceback:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        _say(f"error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # a library's own sys.exit / argparse --help
        return exc.code if isinstance(exc.code, int) else (EXIT_PASS if exc.code is None else EXIT_BAD_INPUT)
    except BrokenPipeError:  # the reader of our stdout went away (`| head`): nothing more to say
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # an OS fault on a path some reader did not translate: still about the user's files
        if exc.filename is None:
            return _internal(exc, show_traceback)
        from mschecker.fsio import os_reason  # lazy: start-up (mschecker.fsio)

        _say(f"error: {exc.filename}: {os_reason(exc)}")
        return EXIT_BAD_INPUT
    except BaseException as exc:  # noqa: BLE001 - the exit code is the API: an internal error is exit 3
        if caused_by_interrupt(exc):
            _say("interrupted")
            return EXIT_INTERRUPTED
        return _internal(exc, show_traceback)


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not print a BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _print_version() -> int:
    """The version, which compiled fast paths are active (a missing one only slows runs down: native.py) and the
    machine facts (mschecker/machine.py)."""
    from mschecker import __version__, machine, native  # lazy: start-up (mschecker.machine, mschecker.native)

    print(f"mschecker {__version__}")
    for name, state in native.status().items():
        print(f"  {name}: {state}")
    for line in machine.describe():  # what decides the bits mschecker does not compute itself (BLAS sums)
        print(line)
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())

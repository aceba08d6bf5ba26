"""The two kinds of failure the CLI tells apart, because its exit code is its API.

- InputError: the user's input is wrong (a file, tensor, node, flag). The CLI prints its message as ONE line and
  exits 2; the message names what is wrong.
- ExecutionError: something failed inside mschecker itself while running a model (one of our own ops raised).
  It is NOT the user's fault, so it is not an InputError: the CLI reports it as an internal error, exit 3.
"""


class InputError(Exception):
    """Bad input or usage. The message names the file, tensor or node and says what is wrong."""


class UsageError(InputError):
    """Wrong command-line usage."""


class KnobNote(UserWarning):
    """A setting that runs but does not do what it says (an ATC entry naming a node a fusion consumed, one matching
    no node): atc would only log it; the CLI prints each distinct note once on stderr as `note: ...`."""


class ExecutionError(Exception):
    """A node failed while running inside one of our own ops. Names the node; exit 3 (internal error)."""


# The CLI's exit codes (its API: CI tells a regression from a broken input from a broken tool).
EXIT_PASS = 0  # every check passed
EXIT_FAIL = 1  # a numerical mismatch / failed check
EXIT_BAD_INPUT = 2  # InputError / usage: one line naming the file, tensor, node or flag
EXIT_INTERNAL = 3  # a failure inside mschecker (ExecutionError or any other exception)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_BROKEN_PIPE = 141  # our stdout's reader went away (128 + SIGPIPE, what a shell reports for `| head`)

EXIT_CODES_HELP = ("exit codes: 0 pass, 1 numerical mismatch / failed check, 2 bad input or usage (one line naming "
                   "the file, tensor, node or flag), 3 internal error (rerun with --traceback), 130 interrupted")


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a Ctrl-C is behind exc: a KeyboardInterrupt that landed inside a C extension's module initialisation
    comes back as that import's ImportError("initialization failed") with the interrupt as its cause (pybind11's
    modules, onnx's among them, are imported lazily by the subcommands)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False

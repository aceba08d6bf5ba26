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


class ExecutionError(Exception):
    """A node failed while running inside one of our own ops. Names the node; exit 3 (internal error)."""

"""Errors that mean "the user's input is wrong": the CLI prints their message as one line and exits 2."""


class InputError(Exception):
    """Bad input or usage. The message names the file, tensor or node and says what is wrong."""


class UsageError(InputError):
    """Wrong command-line usage."""

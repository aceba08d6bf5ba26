"""The Rich consoles the commands print through, so terminal, pipe and CI-log output follow one rule.

Why: outside a terminal (CI logs, `| tee`, files) Rich assumes 80 columns and cuts table cells with an ellipsis,
which loses tensor names and numbers exactly where they are read later; and colour escapes in a log file are
noise. Rule: on a terminal, Rich's own width and colours (none under NO_COLOR, https://no-color.org: present and
non-empty; color_system=None drops bold/reverse escapes too, Rich's no_color would keep them); anywhere else no
escape codes at all and a width of WIDE_COLUMNS (or $COLUMNS when set), so rows are not cut.
"""
from __future__ import annotations

import os
import sys

from rich.console import Console

#: Width used when stdout is not a terminal: wide enough for every table the commands print on one row each.
WIDE_COLUMNS = 200


def no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) following the module's rule."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return Console(stderr=stderr, color_system=None if no_color() else "auto")
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else WIDE_COLUMNS
    return Console(stderr=stderr, color_system=None, width=width, force_terminal=False, highlight=False,
                   emoji=False)

"""Untrusted names (tensor, node, file, stage names from models and files) made safe to show.

Why: a model is untrusted input, and its names reach the terminal, CI logs and reports. A name holding Rich markup
(`[/bold]x` raises MarkupError; `[link=...]` plants a hyperlink), a raw ANSI escape (recolours or clears the
terminal, hides lines in CI logs), a newline (breaks the one-line error contract) or a bidi override must show up
as the characters it is, not act. `plain` makes every control character visible as a Python-style escape (so two
names stay distinguishable), `markup` additionally escapes Rich markup for strings Rich will parse, `plot_text`
additionally escapes matplotlib's one markup, `$...$` mathtext (`$\\frac{1}{$` raises ValueError when drawn).
"""
from __future__ import annotations

import re

# C0/C1 controls, DEL, and the Unicode bidi/invisible formatting characters used to disguise text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape_char(m: re.Match) -> str:
    c = m.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def plain(text) -> str:
    """`text` with every control / bidi character written as an escape (`\\x1b`, `\\n`, `\\u202e`): one line, inert."""
    return _CONTROL.sub(_escape_char, str(text))


def markup(text) -> str:
    """`plain(text)` with Rich markup escaped: safe inside a string that Rich parses for markup."""
    from rich.markup import escape

    return escape(plain(text))


def plot_text(text) -> str:
    """`plain(text)` with every `$` escaped: matplotlib draws it as written (no mathtext, no parse error, and no
    "Glyph 27 missing from font" warning for a raw control character)."""
    return plain(text).replace("$", r"\$")

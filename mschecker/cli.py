"""The `mschecker` command: a thin dispatcher over the library.

`mschecker --model ... --input ... --golden ...` (no subcommand) is the check command. Each subcommand lives in
mschecker/commands/<name>.py and exposes `main(argv: list[str]) -> int`; this module only picks one, turns
InputError into one line on stderr with exit code 2, and never shows a traceback for bad input.
Exit codes: 0 pass, 1 a mismatch / failed check, 2 bad input or usage.
"""
from __future__ import annotations

import importlib
import sys

from .errors import InputError

SUBCOMMANDS = {
    "check": "mschecker.commands.check",
    "golden": "mschecker.commands.golden",
    "kernels": "mschecker.commands.kernels",
    "run": "mschecker.commands.run",
    "sd": "mschecker.commands.sd",
    "demo": "mschecker.commands.demo",
}

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        name, rest = argv[0], argv[1:]
    elif argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nsubcommands: " + ", ".join(SUBCOMMANDS))
        return EXIT_PASS
    else:
        name, rest = "check", argv
    try:
        module = importlib.import_module(SUBCOMMANDS[name])
    except ModuleNotFoundError as exc:
        if exc.name == SUBCOMMANDS[name]:
            print(f"mschecker: error: subcommand {name!r} is not available in this build", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
    try:
        return int(module.main(rest))
    except InputError as exc:
        print(f"mschecker: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mschecker: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

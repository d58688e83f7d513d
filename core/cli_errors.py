"""One-line command-line errors: every CLI of the project refuses bad input in one line and exits 2.

argparse prints its whole usage block before the message; with a dozen options that buries the one line that
matters. OneLineParser prints `PROG: MESSAGE (see PROG --help)` instead, exit status 2 as argparse's.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from typing import NoReturn

EXIT_USAGE = 2


# Every line the project's tools print fits this many columns (narrower when the terminal is).
MAX_COLUMNS = 100


def _capped(formatter: type[argparse.HelpFormatter]):
    """`formatter` wrapping --help at MAX_COLUMNS even on a wider terminal (argparse takes the terminal's width)."""
    def make(prog: str) -> argparse.HelpFormatter:
        return formatter(prog, width=min(MAX_COLUMNS, shutil.get_terminal_size((MAX_COLUMNS, 24)).columns))
    return make


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args, formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=_capped(formatter_class), **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def refuse(prog: str, message: str) -> int:
    """Print a refusal the program found after parsing, as one line like the parser's; returns the exit code."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_USAGE


def missing_dependency(prog: str, error: ModuleNotFoundError) -> int:
    """One line instead of a traceback when a tool runs outside the project's virtual environment (a package
    requirements.txt installs is missing); returns the exit code."""
    print(f"{prog}: no {error.name} here; run bash scripts/setup.sh, then .venv/bin/{prog}", file=sys.stderr)
    return EXIT_USAGE

"""One-line command-line errors: every CLI of the project refuses bad input in one line and exits 2.

argparse prints its whole usage block before the message; with a dozen options that buries the one line that
matters. OneLineParser prints `PROG: MESSAGE (see PROG --help)` instead, exit status 2 as argparse's.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def refuse(prog: str, message: str) -> int:
    """Print a refusal the program found after parsing, as one line like the parser's; returns the exit code."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_USAGE

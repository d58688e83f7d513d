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
        self.exit(EXIT_USAGE, fit_columns(f"{self.prog}: {message} (see {self.prog} --help)") + "\n")


def refuse(prog: str, message: str) -> int:
    """Print a refusal the program found after parsing, like the parser's: PROG: MESSAGE, laid out by
    fit_columns (a message's own further lines, e.g. a command to copy, keep their place); returns the exit code."""
    first, *rest = str(message).split("\n")
    print(fit_columns("\n".join([f"{prog}: {' '.join(first.split())}", *rest])), file=sys.stderr)
    return EXIT_USAGE


# A line that starts with one of these is a command to copy: it is wrapped with shell continuations, not as prose.
COMMAND_STARTS = ("python -m ", ".venv/bin/python ", "bash ", "pulumi ", "gcloud ", "kubectl ")
CONTINUATION = " \\"
_HANGING = "    "


def fit_columns(text: str, width: int = MAX_COLUMNS) -> str:
    """`text` laid out within `width` columns, line by line. The first line (`PROG: ...`) and every prose line
    are wrapped at spaces, what overflows indented four columns under it; a later line that is a command
    (COMMAND_STARTS) is wrapped between its arguments with ` \\` continuations, so the wrapped lines still copy
    and paste as the one command (join_command undoes it). A word wider than the line (an image name) is split
    after its '=' if it has one, else left whole."""
    out: list[str] = []
    for number, line in enumerate(text.split("\n")):
        body = line.lstrip(" ")
        lead = line[:len(line) - len(body)]
        if len(line) <= width:
            out.append(line)
        elif number and body.startswith(COMMAND_STARTS):      # the first line is prose (`PROG: ...`)
            out += _wrap_words(_arguments(body.split()), width, lead, lead + _HANGING, suffix=CONTINUATION)
        else:
            out += _wrap_words(_words(body, width - len(lead) - len(_HANGING)), width, lead, lead + _HANGING)
    return "\n".join(out)


def command_apart(text: str, start: str = "python -m preview.compile", indent: str = "      ") -> str:
    """`text` with the command it quotes (from `start` to the next " (" or the end) on a line of its own, where
    fit_columns wraps it as a command, and the prose after it on the line below."""
    before, marker, rest = text.partition(start)
    if not marker:
        return text
    command, opening, after = rest.partition(" (")
    return f"{before.rstrip()}\n{indent}{marker}{command}" + (f"\n{indent}({after}" if opening else "")


def join_command(lines: list[str]) -> str:
    """The command fit_columns wrapped over `lines`, as one line again (what a shell reads)."""
    return " ".join(line.strip().removesuffix(CONTINUATION.strip()).strip() for line in lines)


def _arguments(tokens: list[str]) -> list[str]:
    """A command's tokens with each flag kept beside its value (`--slices 2` is one unit to wrap)."""
    units: list[str] = []
    for token in tokens:
        if units and units[-1].startswith("-") and " " not in units[-1] and not token.startswith("-"):
            units[-1] += " " + token
        else:
            units.append(token)
    return units


def _words(body: str, room: int) -> list[str]:
    words: list[str] = []
    for word in body.split(" "):
        key, equals, value = word.partition("=")
        if len(word) > room and equals and value:
            words += [key + equals, value]       # KEY= then its value: the value stays whole on the next line
        elif word:
            words.append(word)
    return words


def _wrap_words(words: list[str], width: int, first: str, rest: str, suffix: str = "") -> list[str]:
    """Greedy wrap: each line `first` or `rest` then words; every line but the last ends with `suffix`."""
    lines: list[str] = []
    current = first
    for word in words:
        gap = "" if current in (first, rest) and current.strip() == "" else " "
        if current.strip() and len(current) + len(gap) + len(word) + len(suffix) > width:
            key, equals, value = word.partition("=")
            if not suffix and equals and value and len(current) + len(gap) + len(key) + 1 <= width:
                current += gap + key + equals      # KEY= stays on the line it starts (the first names the key)
                word = value
            lines.append(current + suffix)
            current, gap = rest, ""
        current += gap + word
    lines.append(current)
    return lines


def missing_dependency(prog: str, error: ModuleNotFoundError) -> int:
    """One line instead of a traceback when a tool runs outside the project's virtual environment (a package
    requirements.txt installs is missing); returns the exit code."""
    print(f"{prog}: no {error.name} here; run bash scripts/setup.sh, then .venv/bin/{prog}", file=sys.stderr)
    return EXIT_USAGE

"""The local run's driver log: follow it (--verbose) and count the library notices that are not the run's own news.

MaxText on CPU without Google Cloud (DECOUPLE_GCLOUD) logs a no-op line for every cloud feature it skips, the
tokenizer libraries warn about forks and lengths, JAX and Ray announce their platforms: hundreds of lines a run
that bury the steps. The console shows the run's progress lines; the log keeps everything, and the end of the run
says how many notices it left out and where they are.
"""
from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path

# Library notices, by kind: (label, pattern). A line counts once, under the first kind it matches.
NOTICES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("MaxText cloud no-ops", re.compile(r"NO-OP\]|mldiagnostics|gcloud_stub|decoupled stub", re.IGNORECASE)),
    ("tokenizer/transformers notices", re.compile(r"tokenizers|\[transformers\]|Token indices sequence length|"
                                                  r"special tokens", re.IGNORECASE)),
    ("JAX/XLA platform notices", re.compile(r"Platform '[a-z]+' is experimental|Unable to initialize backend|"
                                            r"TPU_WORKER_HOSTNAMES|xla_bridge", re.IGNORECASE)),
    ("Python warnings", re.compile(r"\b\w*Warning: ")),
)


def notice_kind(line: str) -> str | None:
    for label, pattern in NOTICES:
        if pattern.search(line):
            return label
    return None


def count_notices(lines: list[str]) -> Counter[str]:
    return Counter(kind for line in lines if (kind := notice_kind(line)) is not None)


def read_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


class LogFollower:
    """New complete lines of a growing log file since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = ""

    def new_lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        self.offset += len(data)
        text = self.partial + data.decode(errors="replace")
        *lines, self.partial = text.split("\n")
        return lines


def summary(path: Path) -> str:
    """One line: the log's size and the library notices it holds that the console did not show."""
    lines = read_lines(path)
    counts = count_notices(lines)
    if not counts:
        return f"{path} ({len(lines)} lines)"
    kinds = ", ".join(f"{count} {label}" for label, count in counts.most_common())
    # The notices on lines of their own under the path (four kinds with their counts run past 100 columns).
    notices = textwrap.fill(f"not shown here: {kinds}; --verbose prints the log as it comes", 100,
                            initial_indent="    ", subsequent_indent="      ")
    return f"{path} ({len(lines)} lines)\n{notices}"

"""The cluster workers' locked Python environment (worker_env/requirements.lock), read as plain pins.

The lock is made by a real resolver (scripts/lock_worker_env.sh, uv) for CPython 3.12 on linux x86_64; every
backend installs exactly it. This module only reads it: name → version, and the Python it was made for.
"""
from __future__ import annotations

import re
from pathlib import Path

LOCK_PATH = "worker_env/requirements.lock"     # relative to the repository root (and to the shipped code)
PYTHON = (3, 12)                               # what the lock was resolved for (--python-version 3.12)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """PEP 503 name normalisation: the lock's names and the ones we look up compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(text: str) -> dict[str, str]:
    """name → version of every `name==version` line (hash and comment lines skipped)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonical(match.group(1))] = match.group(3)
    return pins


def load_pins(root: Path) -> dict[str, str]:
    return parse_pins((root / LOCK_PATH).read_text())


def requirement_lines(pins: dict[str, str]) -> list[str]:
    """`name==version` for every locked package, sorted: what a runtime environment installs with --no-deps."""
    return [f"{name}=={version}" for name, version in sorted(pins.items())]

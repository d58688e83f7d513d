"""What `python -m preview --json` prints on stdout when it refuses: {"errors": [{key, value, message, allowed}]}.

A program reads the same refusals a person reads on stderr, one row per mistake, from their structured form
(infra/config Problem) rather than from the printed lines; the exit code is the refusal's own (2).
"""
from __future__ import annotations

from typing import Any, Mapping

from infra.config import ConfigError


def error_rows(error: Exception, raw: Mapping[str, Any], option: tuple[str, Any] = (None, None)) -> list[dict]:
    """One row per mistake. A config error: its problems' parts. Anything else (no such stack, a bad --set, a CRD
    copy that is not the pinned one) is one row for the command-line `option` (name, value) it came from."""
    if isinstance(error, ConfigError):
        return error.details(raw)
    key, value = option
    return [{"key": key, "value": value, "message": str(error), "allowed": None}]


def errors_document(rows: list[dict]) -> dict[str, Any]:
    return {"errors": rows}

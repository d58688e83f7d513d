"""What `python -m preview --json` prints on stdout when it refuses: {"errors": [{key, value, message, allowed}]}.

A program reads the same refusals a person reads on stderr, one row per mistake, from their structured form
(infra/config Problem) rather than from the printed lines; the exit code is the refusal's own (2). One schema for
every refusal (ERRORS_SCHEMA, documented in docs/offline-plan.md): `allowed` is a list of strings or null, and
`message` is the refusal's text without the terminal's line wrapping (each line a whole sentence or command).
"""
from __future__ import annotations

from typing import Any, Mapping

from core.cli_errors import COMMAND_STARTS
from infra.config import ConfigError

# JSON Schema (draft 2020-12) of the refusal document; tests/preview/test_errors_document.py validates every
# catalogued refusal against it.
ERRORS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["errors"],
    "additionalProperties": False,
    "properties": {"errors": {"type": "array", "minItems": 1, "items": {
        "type": "object",
        "required": ["key", "value", "message", "allowed"],
        "additionalProperties": False,
        "properties": {
            "key": {"type": ["string", "null"]},
            "value": {},
            "message": {"type": "string", "minLength": 1, "pattern": "^[^ \\n]"},
            "allowed": {"anyOf": [{"type": "null"},
                                  {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}]},
        }}}},
}


def error_rows(error: Exception, raw: Mapping[str, Any], option: tuple[str, Any] = (None, None)) -> list[dict]:
    """One row per mistake. A config error: its problems' parts. Anything else (no such stack, a bad --set, a CRD
    copy that is not the pinned one) is one row for the command-line `option` (name, value) it came from."""
    if isinstance(error, ConfigError):
        rows = error.details(raw)
    else:
        key, value = option
        rows = [{"key": key, "value": value, "message": str(error), "allowed": None}]
    return [{**row, "message": unwrap(row["message"]), "allowed": allowed_list(row["allowed"])} for row in rows]


def allowed_list(allowed: Any) -> list[str] | None:
    """What is allowed as a list of strings: a key's choices, the nearest configurations, or one sentence."""
    if allowed is None or allowed == "" or allowed == []:
        return None
    if isinstance(allowed, (list, tuple)):
        return [str(item) for item in allowed]
    return [str(allowed)]


# The narrowest width the refusals are wrapped at (infra/config/plan_rules.py wraps at 98 and 100 columns).
_WRAPPED_AT = 98


def unwrap(message: str) -> str:
    """`message` without the line wrapping laid out for a terminal. A line is the continuation of the one before
    when it is indented deeper than the line that starts its sentence and its first word would not have fitted
    on the line before (which is how the wrapping broke it); a command quoted on a line of its own, and a
    command's ` \\` continuations, stay one line each (joined into the one command)."""
    lines: list[str] = []
    start_indent = 0
    previous = ""
    for line in message.split("\n"):
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        word = body.split(" ", 1)[0]
        if lines and lines[-1].endswith(" \\"):
            lines[-1] = lines[-1][:-2] + " " + body
        elif (lines and indent > start_indent and not body.startswith(COMMAND_STARTS)
              and len(previous) + 1 + len(word) > _WRAPPED_AT):
            lines[-1] += " " + body
        else:
            lines.append(body)
            start_indent = indent
        previous = line
    return "\n".join(line for line in lines if line)


def errors_document(rows: list[dict]) -> dict[str, Any]:
    return {"errors": rows}

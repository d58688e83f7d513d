"""Step 1 of config build: raw Pulumi strings → typed values, each key checked on its own.

A value that fails its type, its choices or its own check is reported once and replaced by None, so the
cross-key rules that follow never add a second line about the same mistake.
"""
from __future__ import annotations

import difflib
import json
from typing import Any, Mapping

from infra.config.model import Problem
from infra.config.schema import KEYS, KEYS_BY_NAME, NAMESPACE, REQUIRED, Key, show

_TYPE_WORDS = {"integer": "an integer", "boolean": "true or false", "array": "a list of strings", "string": "a string",
               "object": "a map of names to plain values (strings, numbers, true/false)"}


def _setting_text(value: Any) -> str:
    """A map value as MaxText reads it on its command line: true/false, numbers and strings as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(value)


def problem(key: str, value: Any, allowed: str) -> Problem:
    """The one shape of a refusal: the key the user set, the value, what is allowed."""
    return Problem(f"{NAMESPACE}:{key}={value!r} is not valid; {allowed}", key, value, allowed)


def quoted_value(value: Any) -> str:
    """A value as refusals quote it: strings and lists in Python form ('x', ['a']), true/false, numbers."""
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value) if isinstance(value, str) else show(value)


def quoted_setting(key: str, value: Any, raw: Mapping[str, Any]) -> str:
    """KEY=VALUE as a refusal quotes it, marked when the value is the default rather than the user's."""
    text = f"{NAMESPACE}:{key}={quoted_value(value)}"
    return text if key in raw else f"the default {text}"


def _parse_value(key: Key, raw: Any) -> Any:
    """Pulumi hands config values over as strings (arrays as JSON text)."""
    if key.type == "string":
        return str(raw)
    if key.type == "integer":
        if isinstance(raw, bool):
            raise ValueError
        return int(str(raw).strip())
    if key.type == "boolean":
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ValueError
        return text == "true"
    if key.type == "array":
        value = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError
        return tuple(value)
    if key.type == "object":
        # Pulumi hands a map over as JSON text; () is the key's own default (no entries).
        value = json.loads(raw) if isinstance(raw, str) else raw
        if value == () or value == []:
            return ()
        if not isinstance(value, dict):
            raise ValueError
        return tuple((str(name), _setting_text(item)) for name, item in value.items())
    raise AssertionError(key.type)


def parse_values(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Typed values for every key (defaults filled in; DERIVED and refused values left as None)."""
    values: dict[str, Any] = {}
    for name in raw:
        if name not in KEYS_BY_NAME:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(KEYS_BY_NAME))}"
            problems.append(Problem(f"{NAMESPACE}:{name} is not a config key of this stack{hint}", name, raw[name],
                                    f"a config key, e.g. {close[0]}" if close else "a config key of this stack"))
    for key in KEYS:
        if key.name not in raw:
            if key.default is REQUIRED:
                problems.append(Problem(f"{NAMESPACE}:{key.name} is required: {key.description}", key.name, None,
                                        key.description))
            values[key.name] = None if key.default is REQUIRED else key.default
            continue
        try:
            value = _parse_value(key, raw[key.name])
        except (ValueError, TypeError):
            problems.append(Problem(f"{NAMESPACE}:{key.name}={raw[key.name]!r} must be {_TYPE_WORDS[key.type]}",
                                    key.name, raw[key.name], _TYPE_WORDS[key.type]))
            values[key.name] = None
            continue
        if key.choices and value not in key.choices:
            problems.append(Problem(f"{NAMESPACE}:{key.name}={value!r} is not allowed; allowed: "
                                    f"{', '.join(key.choices)}", key.name, value, list(key.choices)))
            value = None
        elif key.check is not None and (allowed := key.check(value)) is not None:
            problems.append(problem(key.name, value, allowed))
            value = None
        values[key.name] = value
    return values

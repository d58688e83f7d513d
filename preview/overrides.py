"""`--set KEY=VALUE` overrides of a stack's config, like `pulumi config set --path KEY VALUE`.

Values stay strings, as Pulumi stores them (infra.config parses and validates them). A path may index
into a list: `dcnSubnets[0]=10.70.0.0/16` replaces the first item, `dcnSubnets[2]=...` on a two-item
list appends (as `pulumi config set --path` does); `maxtextSettings.learning_rate=3e-5` sets one entry of a map
key. A `tpu-multislice:` prefix is accepted and dropped.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from infra.config.schema import KEYS_BY_NAME, NAMESPACE

_PATH = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*)(?P<indexes>(\[\d+\])*)$")
_MAP_ENTRY = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*)\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


class OverrideError(ValueError):
    pass


def _current_list(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        default = KEYS_BY_NAME[key].default if key in KEYS_BY_NAME else None
        value = list(default) if isinstance(default, (list, tuple)) else []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise OverrideError(f"{NAMESPACE}:{key} holds {value!r}, which is not a list") from None
    if not isinstance(value, list):
        raise OverrideError(f"{NAMESPACE}:{key} is not a list; set it without an index")
    return list(value)


def apply_override(raw: Mapping[str, Any], assignment: str) -> dict[str, Any]:
    """A new raw config (key without namespace → value) with one `KEY=VALUE` applied."""
    path, sep, value = assignment.partition("=")
    if not sep:
        raise OverrideError(f"--set {assignment!r}: expected KEY=VALUE, e.g. slices=8")
    path = path.strip()
    if path.startswith(f"{NAMESPACE}:"):
        path = path[len(NAMESPACE) + 1:]
    entry = _MAP_ENTRY.match(path)
    if entry and entry.group("key") in KEYS_BY_NAME and KEYS_BY_NAME[entry.group("key")].type == "object":
        key = entry.group("key")
        current = raw.get(key) or {}
        if isinstance(current, str):
            current = json.loads(current)
        return {**raw, key: {**current, entry.group("name"): value}}
    match = _PATH.match(path)
    if not match:
        raise OverrideError(f"--set {assignment!r}: {path!r} is not a config key or KEY[INDEX] path")
    key, indexes = match.group("key"), [int(i) for i in re.findall(r"\[(\d+)\]", match.group("indexes"))]
    result = dict(raw)
    if not indexes:
        result[key] = value
        return result
    if len(indexes) > 1:
        raise OverrideError(f"--set {assignment!r}: this stack's config has no nested lists")
    items, index = _current_list(raw, key), indexes[0]
    if index < len(items):
        items[index] = value
    elif index == len(items):
        items.append(value)
    else:
        raise OverrideError(f"--set {assignment!r}: index {index} is past the end of {key} ({len(items)} items)")
    result[key] = items
    return result


def apply_overrides(raw: Mapping[str, Any], assignments: list[str]) -> dict[str, Any]:
    result = dict(raw)
    for assignment in assignments:
        result = apply_override(result, assignment)
    return result

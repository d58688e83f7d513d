"""One validation finding (object, field path, message) and how field paths are spelt."""
from __future__ import annotations

import re
from typing import Iterable, NamedTuple

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Finding(NamedTuple):
    object_ref: str     # Kind/namespace/name
    field_path: str     # e.g. spec.workerGroupSpecs[0].numOfHosts; "" for the whole object
    message: str

    def __str__(self) -> str:
        where = f"{self.object_ref} {self.field_path}".rstrip()
        return f"{where}: {self.message}"


def field_path(parts: Iterable[str | int]) -> str:
    """('spec', 'containers', 0, 'resources', 'limits', 'google.com/tpu') →
    spec.containers[0].resources.limits["google.com/tpu"]: indexes in brackets, and keys that are not
    plain identifiers (labels, resource names) quoted, so a path reads unambiguously."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            text += f'["{part}"]'
    return text

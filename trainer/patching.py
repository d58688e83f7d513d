"""How the trainer wraps a MaxText function (its hooks: the notice, the metrics, the phase guards, the elastic
data restore, the local data trace), in one place.

Each wrapper keeps MaxText's own function as `_trainer_original`, so installing a hook again wraps MaxText's
function, not the previous wrapper: every install is idempotent per process (a Ray Train worker may run the
training function more than once).
"""
from __future__ import annotations

from typing import Any, Callable

ORIGINAL = "_trainer_original"


def original(function: Callable) -> Callable:
    """MaxText's own function behind `function` (itself when no wrapper of ours is installed)."""
    return getattr(function, ORIGINAL, function)


def install(owner: Any, name: str, wrapper: Callable, wrapped: Callable) -> None:
    """Put `wrapper` (which calls `wrapped`, MaxText's own function) in place of `owner.name`."""
    setattr(wrapper, ORIGINAL, wrapped)
    setattr(owner, name, wrapper)

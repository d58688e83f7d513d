"""Facts about MaxText releases that both the stack config and the trainer rely on (pure, no imports)."""
from __future__ import annotations

# 0.2.1 and older look for model configs at configs/configs/models/... and silently fall back to MaxText's
# default ~1B model (fixed in maxtext 0.2.2, commit 6f3c5a4).
MIN_MAXTEXT = (0, 2, 2)
# The release that brought elastic_enabled / elastic_max_retries (MaxText's elastic-training guide).
PATHWAYS_MIN_MAXTEXT = (0, 2, 4)
# The MaxText the worker environment pins (worker_env/requirements.in; a test keeps them equal).
PINNED_MAXTEXT = "0.2.5"


def release_tuple(text: str) -> tuple[int, ...] | None:
    """(X, Y, Z) of a plain release 'X.Y.Z'; None for anything else."""
    parts = text.split(".")
    return tuple(int(p) for p in parts) if len(parts) == 3 and all(p.isdigit() for p in parts) else None

"""What to do about a run the planner refuses over HBM: the nearest runs that fit (core/planner.py advise), as the
command-line flags of trainer.entrypoint and trainer.local that ask for them (trainer/cli.py)."""
from __future__ import annotations

import dataclasses
import math

from core.errors import PlanError
from core.planner import Alternative, Plan, PlanRequest, advise, plan

# What each kind of change (core/planner.py _CHANGE_ORDER) sets, as trainer/cli.py flags, from the plan that fits.
def _flags_of(kind: str, alt: Alternative) -> list[str]:
    chosen = alt.plan
    if kind == "batch":
        return [f"--per-device-batch-size {_value(chosen.per_device_batch_size)}"]
    if kind == "dcn_fsdp":
        return [f"--dcn-data {chosen.dcn_data}", f"--dcn-fsdp {chosen.dcn_fsdp}"]
    if kind == "offload":
        return [f"--remat-policy {chosen.remat_policy}", f"--remat-offload {_value(tuple(chosen.remat_offload))}"]
    if kind == "weight_dtype":
        return [f"--weight-dtype {chosen.weight_dtype}"]
    if kind == "min_slices":
        return [f"--elastic {chosen.min_slices},{chosen.slices}"]
    if kind == "slices":
        return [f"--slices {chosen.slices}"]
    raise ValueError(f"unknown kind of change {kind!r}")


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def flags_for(alternative: Alternative) -> str:
    """The flags that ask for the alternative: only what it changes (the planner chooses the rest again)."""
    flags = [flag for kind in alternative.kinds for flag in _flags_of(kind, alternative)]
    if any(flag.startswith("--elastic") for flag in flags):
        flags = [flag for flag in flags if not flag.startswith("--slices ")]   # --elastic carries the slices
    extra = f" (+{alternative.extra_chips} chips)" if alternative.extra_chips else ""
    return " ".join(flags) + extra


def nearest_flags(request: PlanRequest, limit: int = 2) -> str:
    """The nearest runs that fit, as flags, nearest first ("" when no change of shape fits)."""
    options = [flags_for(alt) for alt in advise(request, limit=limit).alternatives]
    return ", or ".join(option for option in options if option)


def next_smaller_batch(chosen: Plan) -> float | None:
    """For a planned run XLA refused (the estimate said it fits, the compiler ran out of HBM): the largest
    per-device batch below the plan's that still lays out and fits the estimate, everything else as planned, or
    None. It is the nearest run to compile next, not a proven fit."""
    request = PlanRequest(
        model=chosen.model.name, generation=chosen.shape.generation.name, topology=chosen.shape.topology,
        slices=chosen.slices, min_slices=chosen.min_slices if chosen.min_slices != chosen.slices else None,
        ici_fsdp=chosen.ici_fsdp, ici_tensor=chosen.ici_tensor, dcn_data=chosen.dcn_data, dcn_fsdp=chosen.dcn_fsdp,
        max_target_length=chosen.max_target_length, remat_policy=chosen.remat_policy,
        remat_offload=chosen.remat_offload, weight_dtype=chosen.weight_dtype, attention=chosen.attention)
    current = chosen.per_device_batch_size
    candidates = [float(b) for b in range(math.ceil(current) - 1, 0, -1) if b < current] + [0.5, 0.25]
    for batch in candidates:
        if batch >= current:
            continue
        try:
            plan(dataclasses.replace(request, per_device_batch_size=batch))
        except PlanError:
            continue
        return batch
    return None

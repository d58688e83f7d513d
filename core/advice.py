"""What to do about a run the planner refuses over HBM: the nearest runs that fit (core/nearest_fits.py advise), as the
command-line flags of trainer.entrypoint and trainer.local that ask for them (trainer/cli.py)."""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from core.errors import PlanError
from core.memory import GIB
from core.nearest_fits import Alternative, advise, nearest_fits, request_for
from core.planner import Plan, PlanRequest, plan

# What each kind of change (core/nearest_fits.py _CHANGE_ORDER) sets, as trainer/cli.py flags, from the plan that fits.
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
    request = request_for(chosen)
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


def out_of_hbm(chosen: Plan) -> str:
    """The line an out-of-HBM failure ends with (core/exit_codes.py OUT_OF_HBM): XLA needed more than the chip
    has for this plan's step and a retry would compile the same step, so: the nearest runs the planner accepts
    that need fewer bytes per device than this one (core/nearest_fits.py nearest_fits, nearest first), as the trainer's
    flags, and the compile that checks one before it runs."""
    request = request_for(chosen)
    # step_memory: the worse of the train and eval steps (the eval step when the run evaluates at a batch of its own).
    smaller = [alt for alt in nearest_fits(request, chosen, limit=8)
               if alt.plan.step_memory.total < chosen.step_memory.total]
    options = ", or ".join(flags_for(alt) for alt in smaller[:2])
    return (f"XLA ran out of HBM on this step (estimated {chosen.step_memory.total / GIB:.1f} GiB per device); "
            + (f"nearest that fits: {options}" if options else "no nearby change fits the estimate")
            + "; compile it first: python -m preview --stack NAME --compile, or python -m preview.compile")


def plan_of_maxtext_keys(keys: Mapping[str, str], generation: str, topology: str) -> Plan | None:
    """The plan behind a MaxText argv's keys (core/planner.py Plan.overrides wrote them) on `generation` and
    `topology` (a pod knows its slice from GKE's TPU_ACCELERATOR_TYPE/TPU_TOPOLOGY), or None when they do not
    describe a plan the planner can place (a model without a preset, a key missing)."""
    from core.presets import PRESETS
    from core.tpu_catalog import CATALOG

    models = [name for name, model in PRESETS.items() if model.maxtext_model_name == keys.get("model_name")]
    names = [name for name, g in CATALOG.items() if generation in (name, g.pod_type_prefix)]
    if len(models) != 1 or len(names) != 1:
        return None
    try:
        dcn_data, dcn_fsdp = int(keys["dcn_data_parallelism"]), int(keys["dcn_fsdp_parallelism"])
        request = PlanRequest(
            model=models[0], generation=names[0], topology=topology, slices=dcn_data * dcn_fsdp,
            ici_fsdp=int(keys["ici_fsdp_parallelism"]), ici_tensor=int(keys["ici_tensor_parallelism"]),
            dcn_data=dcn_data, dcn_fsdp=dcn_fsdp, per_device_batch_size=float(keys["per_device_batch_size"]),
            max_target_length=int(keys["max_target_length"]), remat_policy=keys["remat_policy"],
            remat_offload=tuple(sorted(k for k, v in keys.items() if v == "offload")),
            weight_dtype=keys["weight_dtype"], attention=keys.get("attention"), memory_check=False,
            # A run with an eval split (grain_eval_files) also runs the eval step, at its own batch if set.
            evaluates=bool(keys.get("grain_eval_files")),
            eval_per_device_batch_size=float(keys["eval_per_device_batch_size"])
            if keys.get("eval_per_device_batch_size") else None)
        return plan(request)
    except (KeyError, ValueError, PlanError):
        return None

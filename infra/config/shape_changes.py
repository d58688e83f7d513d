"""Changes of the run's shape the user did not ask for, as data on the built config.

Two decisions of config build change what a stack runs without any key saying so: a Spot run on the Ray backend
is made elastic by default (it trains on as few slices as the model fits on while reclaimed slices come back),
and a batch that fits only on the whole group turns that run into a fixed-size one; and a stack that sets no TPU
size gets the schema's defaults (2 x v6e 4x4 on demand: the prod size). Each is a ShapeChange naming the key that
keeps what the user wanted; the offline plan prints them at its top and `pulumi up` as warnings (__main__.py),
both from StackConfig.shape_changes, never from a component.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import PlanError
from core.planner import Plan, PlanRequest, largest_batch, plan
from infra.config.model import Capacity
from infra.config.schema import KEYS_BY_NAME, NAMESPACE, show

ELASTIC_TURNED_FIXED = "elastic turned fixed"
SIZE_DEFAULT = "size by default"
# The keys that size the run (and so its price): a stack that leaves one out runs the schema's default for it.
SIZE_KEYS = ("tpuGeneration", "tpuTopology", "slices")


@dataclass(frozen=True)
class ShapeChange:
    kind: str          # ELASTIC_TURNED_FIXED or SIZE_DEFAULT
    key: str           # the config key that keeps what the user wanted
    message: str       # one line, unwrapped (the terminal wraps it; --json keeps it whole)


def spot_elastic_default(v: Mapping[str, Any]) -> bool:
    """Whether config build makes the run elastic by itself: capacity=spot on the Ray backend with no
    elasticMinSlices (infra/config/plan_rules.py plan_workload chooses the fewest slices the step fits on)."""
    return (v["workloadBackend"] == "rayjob" and v["elasticMinSlices"] is None
            and v["capacity"] == Capacity.SPOT.value)


def elastic_turned_fixed(v: Mapping[str, Any], raw: Mapping[str, Any], request: PlanRequest,
                         chosen: Plan) -> ShapeChange | None:
    """The run spot_elastic_default made elastic that came out fixed (its step fits only on the whole group),
    with the batch that keeps it elastic: the planner's largest that fits on one slice (`request` is the
    planner's own, maxtextSettings included)."""
    if chosen.elastic or chosen.slices < 2 or not spot_elastic_default(v):
        return None
    slices = chosen.slices
    why = (f"perDeviceBatchSize={show(v['perDeviceBatchSize'])} fits only on all {slices} slices"
           if "perDeviceBatchSize" in raw else f"{chosen.model.name}'s step fits only on all {slices} slices")
    keep = None
    try:
        # The planner's layout on 1..slices, then the largest batch it takes without a warning.
        one = plan(dataclasses.replace(request, min_slices=1, per_device_batch_size=None, memory_check=True))
        keep = largest_batch(one, near_limit=False) or one.per_device_batch_size
    except PlanError:
        pass
    elastic = (f"{NAMESPACE}:perDeviceBatchSize={keep:g} keeps it elastic (1..{slices} slices)" if keep
               else f"no batch of {chosen.model.name} fits on 1 slice of {chosen.shape.pod_type}")
    message = (f"{ELASTIC_TURNED_FIXED}: this Spot run would shrink while slices are reclaimed, but {why}: it "
               f"runs on {slices} slices or waits for them; {elastic}; {NAMESPACE}:elasticMinSlices={slices} "
               "says a fixed run is meant (and ends this warning)")
    return ShapeChange(ELASTIC_TURNED_FIXED, "perDeviceBatchSize" if keep else "elasticMinSlices", message)


def size_default(v: Mapping[str, Any], raw: Mapping[str, Any], chosen: Plan | None) -> ShapeChange | None:
    """A stack that leaves a size key out runs the schema's default for it (the prod size, unasked)."""
    defaulted = [key for key in SIZE_KEYS if key not in raw]
    return _size_default(v, defaulted, chosen) if defaulted and chosen is not None else None


def _size_default(v: Mapping[str, Any], defaulted: list[str], chosen: Plan) -> ShapeChange:
    taken = ", ".join(f"{key}={show(KEYS_BY_NAME[key].default)}" for key in defaulted)
    shape = chosen.shape
    message = (f"{SIZE_DEFAULT}: the stack sets no {', '.join(defaulted)}, so the run takes the default "
               f"{taken}: {chosen.slices} x {shape.generation.name} {shape.topology}, "
               f"{chosen.slices * shape.chips} chips, {v['capacity']}; set "
               + " and ".join(f"{NAMESPACE}:{key}" for key in defaulted) + " to the size you want")
    return ShapeChange(SIZE_DEFAULT, defaulted[0], message)

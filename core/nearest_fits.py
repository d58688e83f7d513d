"""Advice: the best shape of a run that fits, the nearest shape that fits for one that does not (the planner's
search; core/advice.py says it as the trainer's flags, infra/config/plan_rules.py as config keys)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.errors import PlanError
from core.planner import DoesNotFit, Plan, PlanRequest, _number, largest_batch, plan, plan_with_bounds

# Each alternative is the user's request with as few settings changed as possible, planned by plan() itself (so
# it lays out and fits by the same rules). Nearest first: no more chips before more chips, one change before two,
# then in this order of what a change costs the run (what the recipes do to fit first):
#   dcn_fsdp        FSDP across slices: weights are gathered over DCN every layer (slower steps, same chips);
#   offload         remat offload of the tensors kept between forward and backward to host memory (the recipes'
#                   custom policy; host transfers overlap compute);
#   batch           a smaller per-device batch (fewer tokens per step);
#   weight_dtype    bfloat16 weights and Adam moments (half the bytes; less precise updates);
#   min_slices      an elastic run that keeps more slices while preempted;
#   slices          more slices of the same shape (more chips: costs money).

_CHANGE_ORDER = ("dcn_fsdp", "offload", "batch", "weight_dtype", "min_slices", "slices")


@dataclass(frozen=True)
class Alternative:
    """A configuration that plans, close to a request that did not."""

    change: str                 # what differs from the request, one line ("per_device_batch_size 2 -> 1")
    kinds: tuple[str, ...]      # which of _CHANGE_ORDER it changes
    request: PlanRequest        # the request that plans (give it to plan() or turn it into flags/config keys)
    plan: Plan
    extra_chips: int            # chips beyond the request's (more slices)


@dataclass(frozen=True)
class Advice:
    """plan: the request's plan (None when refused); refusal: why not (the PlanError's one line); largest_batch:
    for a plan, the largest per-device batch that still fits with everything else as planned; alternatives: for
    a refusal over memory, the nearest configurations that fit, nearest first (empty for a refusal no change of
    shape can fix, e.g. an unknown model)."""

    request: PlanRequest
    plan: Plan | None
    refusal: str | None = None
    largest_batch: float | None = None
    alternatives: tuple[Alternative, ...] = ()

    @property
    def fits(self) -> bool:
        return self.plan is not None


def request_for(chosen: Plan) -> PlanRequest:
    """The request that plans exactly `chosen`: every choice the planner made written in (_pinned), with the
    slice range and the MaxText keys it was planned with (so one change at a time is one change)."""
    base = PlanRequest(
        model=chosen.model.name, generation=chosen.shape.generation.name, topology=chosen.shape.topology,
        slices=chosen.slices, min_slices=chosen.min_slices if chosen.min_slices != chosen.slices else None,
        ici_context=chosen.ici_context, ici_sequence=chosen.ici_sequence,
        num_vocab_tiling=chosen.num_vocab_tiling, mu_dtype=chosen.mu_dtype or None, unmodeled=chosen.unmodeled,
        evaluates=chosen.evaluates, eval_per_device_batch_size=chosen.eval_per_device_batch_size)
    return _pinned(base, chosen)


def _pinned(request: PlanRequest, chosen: Plan) -> PlanRequest:
    """The request with the planner's choices for it written in (so one change at a time is one change)."""
    return dataclasses.replace(
        request, ici_fsdp=chosen.ici_fsdp, ici_tensor=chosen.ici_tensor, dcn_data=chosen.dcn_data,
        dcn_fsdp=chosen.dcn_fsdp, per_device_batch_size=chosen.per_device_batch_size,
        max_target_length=chosen.max_target_length, remat_policy=chosen.remat_policy,
        remat_offload=chosen.remat_offload, weight_dtype=chosen.weight_dtype, attention=chosen.attention,
        memory_check=True)


def _single_changes(base: PlanRequest, closest: Plan, max_slices: int) -> list[tuple[str, str, PlanRequest]]:
    """(kind, text, request) for each one-setting change that could lower the bytes per device."""
    out: list[tuple[str, str, PlanRequest]] = []
    if closest.slices > 1 and closest.dcn_fsdp < closest.slices:
        out.append(("dcn_fsdp", f"FSDP across slices (dcn_fsdp_parallelism {closest.dcn_fsdp} -> {closest.slices}, "
                                f"dcn_data_parallelism {closest.dcn_data} -> 1)",
                    dataclasses.replace(base, dcn_data=1, dcn_fsdp=closest.slices)))
    from core.memory import saved_tensors
    kept = saved_tensors(closest.remat_policy, closest.remat_offload)
    if kept:
        offload = tuple(sorted(set(closest.remat_offload) | set(kept)))
        out.append(("offload", f"remat_policy {closest.remat_policy} -> custom offloading {','.join(offload)} to "
                               "host memory", dataclasses.replace(base, remat_policy="custom", remat_offload=offload)))
    step = 1 / closest.ici_batch_free
    k = int(round(closest.per_device_batch_size / step)) - 1
    while k >= 1:
        smaller = k * step
        out.append(("batch", f"per_device_batch_size {_number(closest.per_device_batch_size)} -> {_number(smaller)}",
                    dataclasses.replace(base, per_device_batch_size=smaller)))
        k -= 1
    if closest.weight_dtype == "float32":
        out.append(("weight_dtype", "weight_dtype float32 -> bfloat16 (weights and Adam moments)",
                    dataclasses.replace(base, weight_dtype="bfloat16")))
    if closest.min_slices < closest.slices:
        for n in range(closest.min_slices + 1, closest.slices + 1):
            out.append(("min_slices", f"elastic minimum {closest.min_slices} -> {n} slices",
                        dataclasses.replace(base, min_slices=n)))
    for n in range(closest.slices + 1, max_slices + 1):
        # The planner lays the DCN axis out again (data parallel first, FSDP across slices if that is what fits).
        out.append(("slices", f"slices {closest.slices} -> {n}",
                    dataclasses.replace(base, slices=n, dcn_data=None, dcn_fsdp=None)))
    return out


def _try(request: PlanRequest) -> Plan | None:
    try:
        return plan(request)
    except PlanError:
        return None


def nearest_fits(request: PlanRequest, closest: Plan, *, max_slices: int | None = None,
                 limit: int = 3) -> tuple[Alternative, ...]:
    """Up to `limit` configurations that fit, nearest first (see _CHANGE_ORDER), each at most two changes from the
    request (with more slices: FSDP across them too when that is what fits). `closest`: the candidate the refusal
    described (DoesNotFit.closest)."""
    max_slices = max_slices or max(4, 2 * closest.slices)
    base = _pinned(request, closest)
    base = dataclasses.replace(base, slices=closest.slices, min_slices=request.min_slices)
    singles = _single_changes(base, closest, max_slices)
    found: dict[tuple, Alternative] = {}

    def add(kinds: tuple[str, ...], text: str, req: PlanRequest) -> None:
        chosen = _try(req)
        if chosen is None:
            return
        key = (chosen.slices, chosen.min_slices, chosen.dcn_data, chosen.dcn_fsdp, chosen.per_device_batch_size,
               chosen.remat_policy, chosen.remat_offload, chosen.weight_dtype)
        extra = (chosen.slices - request.slices) * chosen.shape.chips
        alt = Alternative(change=text, kinds=kinds, request=req, plan=chosen, extra_chips=max(extra, 0))
        if key not in found or _rank(alt) < _rank(found[key]):
            found[key] = alt

    seen_kinds: set[str] = set()
    for kind, text, req in singles:
        if kind in seen_kinds and kind in ("batch", "min_slices", "slices"):
            continue          # the largest batch / fewest slices that fits is the nearest of its kind
        before = len(found)
        add((kind,), text, req)
        if len(found) > before:
            seen_kinds.add(kind)
    if len(found) < limit:
        for i, (kind_a, text_a, req_a) in enumerate(singles):
            for kind_b, text_b, req_b in singles[i + 1:]:
                if kind_a == kind_b or {kind_a, kind_b} & seen_kinds:
                    continue
                merged = _merge(base, req_a, req_b)
                if merged is not None:
                    add(tuple(sorted((kind_a, kind_b), key=_CHANGE_ORDER.index)), f"{text_a}; {text_b}", merged)
    return tuple(sorted(found.values(), key=_rank))[:limit]


def _merge(base: PlanRequest, a: PlanRequest, b: PlanRequest) -> PlanRequest | None:
    """Both requests' changes to `base` together (None if they change the same setting differently)."""
    changes: dict[str, object] = {}
    for other in (a, b):
        for f in dataclasses.fields(PlanRequest):
            value = getattr(other, f.name)
            if value != getattr(base, f.name):
                if f.name in changes and changes[f.name] != value:
                    return None
                changes[f.name] = value
    if "slices" in changes:
        changes.update(dcn_data=None, dcn_fsdp=None)     # the planner lays the slices out (see _single_changes)
    return dataclasses.replace(base, **changes)


def _rank(alt: Alternative) -> tuple:
    return (alt.extra_chips, len(alt.kinds), [_CHANGE_ORDER.index(k) for k in alt.kinds],
            -alt.plan.per_device_batch_size)


def advise(request: PlanRequest, *, max_slices: int | None = None, limit: int = 3) -> Advice:
    """The plan with the largest per-device batch it could take, or the refusal with the nearest configurations
    that fit (only for a refusal over memory: a layout or input error has no nearest shape)."""
    try:
        chosen, bounds = plan_with_bounds(request)
    except DoesNotFit as err:
        return Advice(request=request, plan=None, refusal=str(err),
                      alternatives=nearest_fits(request, err.closest, max_slices=max_slices, limit=limit))
    except PlanError as err:
        return Advice(request=request, plan=None, refusal=str(err))
    # The plan's own scan (its notes were written from it); a plan kept over the limit scans here.
    best = bounds[1] if bounds is not None else largest_batch(chosen)
    return Advice(request=request, plan=chosen, largest_batch=best)

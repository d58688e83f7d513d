"""Parallelism and memory planner: model + TPU slices -> MaxText mesh, batch and remat settings (pure).

Choices, in order, when the request leaves them open:
- ICI (inside a slice): full FSDP, tensor 1 — what the tuned Trillium recipes use (`ici_fsdp_parallelism=-1`;
  see trainer/presets.py for the sources). Explicit values must multiply to the JAX devices of one slice
  (chips x devices per chip: TPU7x has two devices per chip, see core/tpu_catalog.py).
- DCN (across slices): data parallelism first (one gradient all-reduce per step crosses DCN), FSDP across
  slices only when one slice cannot hold the weights and optimizer state (then weights are all-gathered over
  DCN every layer: slower, but it runs). Explicit values must multiply to the number of slices.
- Batch: the preset's tuned per-device batch, halved until the estimate fits (only when not given).
Elastic runs (min_slices < slices) keep the one DCN axis and resize it; the plan must fit at both ends.
All parallelism values are passed to MaxText explicitly (never -1) so MaxText cannot pick another mesh.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from core.tpu_catalog import CatalogError, SliceShape, slice_shape
from core.errors import PlanError
from core.memory import MemoryEstimate, estimate
from core.presets import ModelPreset, preset


@dataclass(frozen=True)
class PlanRequest:
    """What the caller asks for; None means "let the planner choose"."""

    model: str
    generation: str = "v6e"
    topology: str = "4x4"
    slices: int = 1
    min_slices: int | None = None          # elastic lower bound in whole slices; None = fixed size
    ici_fsdp: int | None = None
    ici_tensor: int | None = None
    dcn_data: int | None = None
    dcn_fsdp: int | None = None
    per_device_batch_size: float | None = None
    max_target_length: int | None = None
    remat_policy: str | None = None
    remat_offload: tuple[str, ...] | None = None
    weight_dtype: str | None = None
    attention: str | None = None


@dataclass(frozen=True)
class Plan:
    model: ModelPreset
    shape: SliceShape
    slices: int
    min_slices: int
    ici_fsdp: int
    ici_tensor: int
    dcn_data: int
    dcn_fsdp: int
    per_device_batch_size: float
    max_target_length: int
    remat_policy: str
    remat_offload: tuple[str, ...]
    weight_dtype: str
    attention: str
    memory: MemoryEstimate
    notes: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        """JAX devices of the whole run (what jax.device_count() reports and the mesh spans)."""
        return self.shape.devices * self.slices

    @property
    def workers(self) -> int:
        """Ray Train workers: one per TPU VM host."""
        return self.shape.hosts * self.slices

    @property
    def min_workers(self) -> int:
        return self.shape.hosts * self.min_slices

    @property
    def elastic(self) -> bool:
        return self.min_slices < self.slices

    @property
    def global_batch_size(self) -> float:
        return self.per_device_batch_size * self.devices

    @property
    def dcn_axis(self) -> str:
        """The mesh axis that spans slices (the one an elastic run resizes)."""
        return "fsdp" if self.dcn_fsdp > 1 else "data"

    def at_slices(self, slices: int) -> "Plan":
        """The same plan on another number of slices (elastic resize): the DCN axis takes the new count."""
        if slices == self.slices:
            return self
        if not 1 <= slices <= self.slices:
            raise PlanError(f"cannot run on {slices} slices: plan allows {self.min_slices}..{self.slices}")
        dcn = {"dcn_data": slices, "dcn_fsdp": 1} if self.dcn_axis == "data" else {"dcn_data": 1, "dcn_fsdp": slices}
        resized = dataclasses.replace(self, slices=slices, min_slices=min(self.min_slices, slices), **dcn)
        return dataclasses.replace(resized, memory=_estimate(resized))

    def overrides(self) -> dict[str, str]:
        """MaxText keys that this plan decides (model, mesh, batch, memory policy)."""
        keys: dict[str, str] = {"model_name": self.model.maxtext_model_name, **self.model.dimension_overrides}
        keys.update({
            "ici_fsdp_parallelism": str(self.ici_fsdp),
            "ici_tensor_parallelism": str(self.ici_tensor),
            "ici_data_parallelism": "1",
            "dcn_data_parallelism": str(self.dcn_data),
            "dcn_fsdp_parallelism": str(self.dcn_fsdp),
            "per_device_batch_size": _number(self.per_device_batch_size),
            "max_target_length": str(self.max_target_length),
            "remat_policy": self.remat_policy,
            "weight_dtype": self.weight_dtype,
            "attention": self.attention,
        })
        keys.update({tensor: "offload" for tensor in self.remat_offload})
        return keys

    def describe(self) -> str:
        return (f"{self.model.name} on {self.slices} x {self.shape.pod_type} ({self.shape.topology}): "
                f"ici fsdp {self.ici_fsdp} x tensor {self.ici_tensor}, dcn data {self.dcn_data} x fsdp {self.dcn_fsdp}, "
                f"per_device_batch_size {_number(self.per_device_batch_size)} (global {_number(self.global_batch_size)}), "
                f"seq {self.max_target_length}, remat {self.remat_policy}"
                + (f" offload {'/'.join(self.remat_offload)}" if self.remat_offload else "")
                + f", weights {self.weight_dtype}; {self.memory.describe()}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _estimate(plan: Plan) -> MemoryEstimate:
    return estimate(
        plan.model,
        weight_shards=plan.ici_fsdp * plan.dcn_fsdp * plan.ici_tensor,
        per_device_batch_size=plan.per_device_batch_size,
        seq_len=plan.max_target_length,
        remat_policy=plan.remat_policy,
        remat_offload=plan.remat_offload,
        weight_dtype=plan.weight_dtype,
        attention=plan.attention,
        hbm_gib_per_device=plan.shape.generation.hbm_gib_per_chip / plan.shape.generation.devices_per_chip,
    )


def resolve_shape(generation: str, topology: str) -> SliceShape:
    try:
        return slice_shape(generation, topology)
    except CatalogError as err:
        allowed = ", ".join(err.allowed)
        what = "generation" if err.key == "tpuGeneration" else "topology"
        raise PlanError(f"TPU {what} {err.value!r} unknown for {generation}; allowed: {allowed}") from None


def _split(total: int, first: int | None, second: int | None, names: tuple[str, str], unit: str,
           default_first: bool = True) -> tuple[int, int]:
    """Two factors whose product is `total`; fill whichever is missing."""
    for name, value in zip(names, (first, second)):
        if value is not None and value < 1:
            raise PlanError(f"{name}={value} must be >= 1")
    if first is not None and second is not None:
        if first * second != total:
            raise PlanError(f"{names[0]}={first} x {names[1]}={second} = {first * second}, but {unit} = {total}")
        return first, second
    given, name = (first, names[0]) if first is not None else (second, names[1])
    if given is None:
        return (total, 1) if default_first else (1, total)
    if total % given:
        raise PlanError(f"{name}={given} does not divide {unit} = {total}")
    return (given, total // given) if first is not None else (total // given, given)


def _check_batch(pdbs: float, shape: SliceShape, slices: int, tensor: int) -> str | None:
    """Why this per-device batch cannot be laid out on `slices` slices, or None if it can."""
    devices = shape.devices * slices
    global_batch = pdbs * devices
    batch_shards = devices // tensor        # every mesh axis except tensor splits the batch
    if pdbs <= 0 or not float(global_batch).is_integer():
        return (f"per_device_batch_size={_number(pdbs)} x {devices} devices = {global_batch:g} sequences "
                f"is not a whole number")
    if int(global_batch) % batch_shards:
        return (f"global batch {int(global_batch)} (per_device_batch_size={_number(pdbs)} x {devices} devices) "
                f"does not divide over {batch_shards} data/fsdp shards on {slices} x {shape.pod_type}")
    return None


def _batch_candidates(default: float, shape: SliceShape, slice_counts: set[int], tensor: int) -> list[float]:
    """The tuned batch, then halvings while the global batch still splits into whole shards."""
    out, pdbs = [], default
    while all(_check_batch(pdbs, shape, n, tensor) is None for n in slice_counts):
        out.append(pdbs)
        pdbs = pdbs / 2
    if not out:
        raise PlanError(_check_batch(default, shape, min(slice_counts), tensor) or "no valid batch")
    return out


def plan(request: PlanRequest) -> Plan:
    """Validate a request and return the plan, or raise PlanError naming the values that do not work."""
    model = preset(request.model)
    shape = resolve_shape(request.generation, request.topology)
    if request.slices < 1:
        raise PlanError(f"slices={request.slices} must be >= 1")
    min_slices = request.slices if request.min_slices is None else request.min_slices
    if not 1 <= min_slices <= request.slices:
        raise PlanError(f"elastic bounds {min_slices},{request.slices} slices: need 1 <= min <= max")

    ici_fsdp, ici_tensor = _split(shape.devices, request.ici_fsdp, request.ici_tensor,
                                  ("ici_fsdp_parallelism", "ici_tensor_parallelism"),
                                  f"devices per {shape.pod_type} slice")
    if model.num_query_heads % ici_tensor:
        raise PlanError(f"ici_tensor_parallelism={ici_tensor} does not divide {model.name}'s "
                        f"{model.num_query_heads} attention heads")

    if request.dcn_data is not None or request.dcn_fsdp is not None or request.slices == 1:
        dcn_options = [_split(request.slices, request.dcn_data, request.dcn_fsdp,
                              ("dcn_data_parallelism", "dcn_fsdp_parallelism"), "slices")]
    else:
        dcn_options = [(request.slices, 1), (1, request.slices)]
    # MaxText shards the embedding dimension of every weight over all FSDP axes.
    divisible = [(d, f) for d, f in dcn_options if model.emb_dim % (ici_fsdp * f) == 0]
    if not divisible:
        f = dcn_options[0][1]
        raise PlanError(f"FSDP ici {ici_fsdp} x dcn {f} = {ici_fsdp * f} ways does not divide "
                        f"{model.name}'s embedding dimension {model.emb_dim}")
    dcn_options = divisible
    if min_slices < request.slices and all(d > 1 and f > 1 for d, f in dcn_options):
        raise PlanError(f"elastic run needs one DCN axis; got dcn_data_parallelism={dcn_options[0][0]} "
                        f"x dcn_fsdp_parallelism={dcn_options[0][1]}")

    base = dict(
        model=model, shape=shape, slices=request.slices, min_slices=min_slices,
        ici_fsdp=ici_fsdp, ici_tensor=ici_tensor,
        max_target_length=request.max_target_length or model.max_target_length,
        remat_policy=request.remat_policy or model.remat_policy,
        remat_offload=(request.remat_offload if request.remat_offload is not None
                       else (model.remat_offload if request.remat_policy in (None, "custom") else ())),
        weight_dtype=request.weight_dtype or model.weight_dtype,
        attention=request.attention or model.attention,
    )
    if base["max_target_length"] < 1:
        raise PlanError(f"max_target_length={base['max_target_length']} must be >= 1")

    if request.per_device_batch_size is not None:
        for slices in sorted({request.slices, min_slices}):
            reason = _check_batch(request.per_device_batch_size, shape, slices, ici_tensor)
            if reason:
                raise PlanError(reason)
        batches = [request.per_device_batch_size]
    else:
        batches = _batch_candidates(model.per_device_batch_size, shape, {request.slices, min_slices}, ici_tensor)

    tried: list[Plan] = []
    for dcn_data, dcn_fsdp in dcn_options:
        for pdbs in batches:
            candidate = Plan(dcn_data=dcn_data, dcn_fsdp=dcn_fsdp, per_device_batch_size=pdbs,
                             memory=None, **base)  # type: ignore[arg-type]
            candidate = dataclasses.replace(candidate, memory=_estimate(candidate))
            # Fewest slices = fewest weight shards (FSDP over DCN) = most bytes per chip: check there.
            worst = candidate.at_slices(min_slices)
            tried.append(worst)
            if worst.memory.fits:
                return dataclasses.replace(candidate, notes=_notes(request, candidate, model))
    best = min(tried, key=lambda p: p.memory.total)
    elastic = f" (elastic minimum of {min_slices}..{request.slices} slices)" if min_slices < request.slices else ""
    raise PlanError(f"{model.name} does not fit on {best.slices} x {shape.pod_type}{elastic}"
                    f" (dcn data {best.dcn_data} x fsdp {best.dcn_fsdp}, ici fsdp {best.ici_fsdp} x tensor {best.ici_tensor},"
                    f" per_device_batch_size {_number(best.per_device_batch_size)}, seq {best.max_target_length},"
                    f" remat {best.remat_policy}, weights {best.weight_dtype}): {best.memory.describe()}")


def _notes(request: PlanRequest, chosen: Plan, model: ModelPreset) -> tuple[str, ...]:
    notes = []
    if request.per_device_batch_size is None and chosen.per_device_batch_size != model.per_device_batch_size:
        notes.append(f"per_device_batch_size lowered from {_number(model.per_device_batch_size)} "
                     f"to {_number(chosen.per_device_batch_size)} to fit HBM")
    if request.dcn_fsdp is None and chosen.dcn_fsdp > 1:
        notes.append("FSDP across slices: one slice cannot hold weights + optimizer state")
    return tuple(notes)


def worker_bounds(plan_: Plan) -> int | tuple[int, int]:
    """Ray Train num_workers: fixed, or (min, max) whole slices of hosts when elastic."""
    return (plan_.min_workers, plan_.workers) if plan_.elastic else plan_.workers


def check_overrides_free(planned: Mapping[str, str], extra: Mapping[str, str]) -> None:
    clash = sorted(set(planned) & set(extra))
    if clash:
        raise PlanError(f"extra MaxText overrides {', '.join(clash)} would replace planned values; "
                        f"use the planner's options instead")

"""Parallelism and memory planner: model + TPU slices -> MaxText mesh, batch and remat settings (pure).

Choices, in order, when the request leaves them open:
- ICI (inside a slice): full FSDP, tensor 1 — what the tuned Trillium recipes use (`ici_fsdp_parallelism=-1`;
  see trainer/presets.py for the sources). Explicit values must multiply to the JAX devices of one slice
  (chips x devices per chip: TPU7x has two devices per chip, see core/tpu_catalog.py).
- DCN (across slices): data parallelism first (one gradient all-reduce per step crosses DCN), at every batch;
  FSDP across slices only when data parallelism fits at no batch (then weights are all-gathered over DCN every
  layer: slower, but it runs). Explicit values must multiply to the number of slices. llama3-70b on 2 x v6e-32
  is the case (core/xla_calibration.json): data parallel it is 32-way FSDP, which needs 31.2 GiB per device at
  the recipe's batch 2 and 29.8 at batch 1, both over the 29.7 GiB where XLA starts recomputing; FSDP over both
  slices (64-way) compiles the recipe's batch 2 at 23.9 GiB of 31.25, nothing recomputed.
- Batch (only when not given): the preset's tuned per-device batch, else the largest smaller one that lays out and
  fits. Every per-device batch that lays out is tried, not only halvings: with tensor parallelism t the global
  batch must split into whole sequences over the devices/t data+FSDP shards, i.e. per_device_batch_size x t must
  be a whole number (3, 2, 1 with t = 1; 3, 2.5, 2, ... with t = 2).
Shapes MaxText would refuse or pad are refused here: FSDP ways (ICI x DCN) must divide the embedding width
(every weight's `embed` axis is FSDP-sharded), tensor parallelism must divide the query and KV heads, the MLP
width and the vocabulary (the axes MaxText's logical rules put on `tensor`).
Memory: core/memory.py's estimate (held to XLA's figures by tests/core/test_xla_calibration.py) against XLA's
limit: over it a plan is refused (only XLA's compile of the exact step can accept it; the refusal names the
command), near it (past XLA's recompute point within the estimate's error) accepted with a warning naming the
compile. At one batch a layout that fits outright is preferred to one near the limit.
Elastic runs (min_slices < slices) keep the one DCN axis and resize it. Every slice count from min to max must
lay out and fit, not only the two ends (70B with FSDP over 2..4 slices of 16 chips: 48-way FSDP at 3 slices does
not divide its 8192-wide embedding). On a resize per_device_batch_size stays what it was, so the global batch
follows the slices (per_device_batch_size x devices: a 2-slice run that drops to 1 trains on half the sequences
per step; MaxText's step count and learning-rate schedule do not change, so the run sees fewer tokens in total).
All parallelism values are passed to MaxText explicitly (never -1) so MaxText cannot pick another mesh.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from core.tpu_catalog import CatalogError, SliceShape, slice_shape
from core.errors import PlanError
from core.maxtext_memory_keys import maxtext_keys_of
from core.memory import ESTIMATE_ERROR, FITS, GIB, NEAR_LIMIT, MemoryEstimate, estimate
from core.presets import ModelPreset, preset
from core.recipes import expected_step


class DoesNotFit(PlanError):
    """A request that lays out but whose estimate is over what XLA can fit (core/memory.py); `closest` is the
    candidate that came nearest (the one the message describes)."""

    def __init__(self, message: str, closest: "Plan"):
        super().__init__(message)
        self.closest = closest


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
    # False: keep a plan whose estimate is over the limit (the compile, not the estimate, decides).
    memory_check: bool = True
    # MaxText settings the published recipes use beyond the mesh/batch/remat/dtype above (see with_maxtext_keys):
    ici_context: int = 1                   # ici_context_parallelism: sequence split over devices inside a slice
    ici_sequence: int = 1                  # ici_sequence_parallelism (laid out, not estimated)
    num_vocab_tiling: int | None = None    # loss computed in this many chunks of the tokens (MaxText >= 0.2)
    mu_dtype: str | None = None            # AdamW first moment's dtype (MaxText: weight_dtype when unset)
    # Other MaxText keys the run sets that change memory but that the estimate does not model (quantization ...):
    # passed through to MaxText, named in the plan's notes; the compile decides.
    unmodeled: tuple[tuple[str, str], ...] = ()
    # The run evaluates on an eval split (grain_eval_files): its eval step is planned too, at this per-device batch
    # (MaxText eval_per_device_batch_size; None: MaxText 0.2.5 configs/types.py takes per_device_batch_size).
    evaluates: bool = False
    eval_per_device_batch_size: float | None = None


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
    ici_context: int = 1
    ici_sequence: int = 1
    num_vocab_tiling: int = 1
    mu_dtype: str = ""                     # "" = MaxText's default (weight_dtype)
    unmodeled: tuple[tuple[str, str], ...] = ()
    evaluates: bool = False                # the run also runs MaxText's eval step (PlanRequest.evaluates)
    eval_per_device_batch_size: float | None = None

    @property
    def eval_batch(self) -> float:
        """The largest per-device batch an eval step of this run is compiled at. MaxText 0.2.5 uses two: at start
        it compiles the eval step ahead of time at eval_per_device_batch_size (trainers/pre_train/train.py, the
        `p_eval_step.lower(...)` after the train step's, on utils/maxtext_utils.py get_shaped_batch(is_eval=True):
        global_batch_size_to_load_eval; unset or 0 = per_device_batch_size, configs/types.py); then every eval
        pass runs on Grain's batches, which are built at the train batch whatever that key says
        (input_pipeline/grain_data_processing.py batches at data_processing_utils.get_local_batch_size:
        global_batch_size_to_load // process count), compiled at that shape on the pass's first step if it
        differs. Both must fit, so the larger is planned. Grain is the only eval the stacks run."""
        return max(self.eval_per_device_batch_size or self.per_device_batch_size, self.per_device_batch_size)

    @property
    def eval_batches(self) -> tuple[float, ...]:
        """The per-device batches of the run's distinct eval steps (see eval_batch), largest first: the one MaxText
        compiles at start and Grain's at the train batch, one batch when they are equal; () without eval."""
        if not self.evaluates:
            return ()
        start = self.eval_per_device_batch_size or self.per_device_batch_size
        return tuple(sorted({start, self.per_device_batch_size}, reverse=True))

    @property
    def eval_memory(self) -> MemoryEstimate | None:
        """The eval step's estimate (forward only, core/memory.py), or None when the run does not evaluate."""
        return _estimate(self, forward_only=True) if self.evaluates else None

    @property
    def step_memory(self) -> MemoryEstimate:
        """The estimate that decides the verdict: the larger of the train and eval steps (same limit, so the
        larger estimate has the worse verdict)."""
        evaluated = self.eval_memory
        return evaluated if evaluated is not None and evaluated.total > self.memory.total else self.memory

    @property
    def ici_batch_free(self) -> int:
        """ICI ways that do not split the batch (tensor, context, sequence)."""
        return self.ici_tensor * self.ici_context * self.ici_sequence

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
        # Only when asked for, so plans without them launch exactly as before.
        for key, value, default in (("ici_context_parallelism", self.ici_context, 1),
                                    ("ici_sequence_parallelism", self.ici_sequence, 1),
                                    ("num_vocab_tiling", self.num_vocab_tiling, 1), ("mu_dtype", self.mu_dtype, "")):
            if value != default:
                keys[key] = str(value)
        if self.eval_per_device_batch_size:
            keys["eval_per_device_batch_size"] = _number(self.eval_per_device_batch_size)
        keys.update({tensor: "offload" for tensor in self.remat_offload})
        return keys

    def describe(self) -> str:
        return (f"{self.model.name} on {self.slices} x {self.shape.pod_type} ({self.shape.topology}): "
                f"ici fsdp {self.ici_fsdp} x tensor {self.ici_tensor}, dcn data {self.dcn_data} x fsdp {self.dcn_fsdp}, "
                f"per_device_batch_size {_number(self.per_device_batch_size)} (global {_number(self.global_batch_size)}), "
                f"seq {self.max_target_length}, remat {self.remat_policy}"
                + (f" offload {'/'.join(self.remat_offload)}" if self.remat_offload else "")
                + f", weights {self.weight_dtype}; {self.memory.describe()}"
                + (f"; eval step (forward only, per_device_batch_size {_number(self.eval_batch)}): "
                   f"{self.eval_memory.total / GIB:.1f} GiB per device, estimated"
                   if self.eval_memory is not None else ""))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _estimate(plan: Plan, forward_only: bool = False) -> MemoryEstimate:
    generation = plan.shape.generation
    return estimate(
        plan.model,
        # MaxText's logical rules shard every weight's embed axis over fsdp and context (base.yml
        # logical_axis_rules: ['embed', ['fsdp', 'fsdp_transpose', 'context', ...]]), not over sequence.
        fsdp=plan.ici_fsdp * plan.ici_context * plan.dcn_fsdp,
        tensor=plan.ici_tensor,
        num_vocab_tiling=plan.num_vocab_tiling,
        mu_dtype=plan.mu_dtype or None,
        slices=plan.slices,
        per_device_batch_size=plan.eval_batch if forward_only else plan.per_device_batch_size,
        forward_only=forward_only,
        seq_len=plan.max_target_length,
        remat_policy=plan.remat_policy,
        remat_offload=plan.remat_offload,
        weight_dtype=plan.weight_dtype,
        attention=plan.attention,
        generation=generation.name,
        hbm_gib_per_device=generation.hbm_gib_per_chip / generation.devices_per_chip,
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


def _batch_candidates(default: float, shape: SliceShape, slice_counts: range, tensor: int) -> list[float]:
    """The tuned batch, then every smaller per-device batch that lays out at every slice count, largest first:
    multiples of 1/tensor (see the module docstring)."""
    steps = int(default * tensor)
    out = [default] + [k / tensor for k in range(steps, 0, -1) if k / tensor < default]
    out = [b for b in out if all(_check_batch(b, shape, n, tensor) is None for n in slice_counts)]
    if not out:
        raise PlanError(_check_batch(default, shape, slice_counts[0], tensor) or "no valid batch")
    return out


def _tensor_problem(model: ModelPreset, tensor: int) -> str | None:
    """Why `tensor`-way tensor parallelism cannot split this model's axes, or None (MaxText's logical rules shard
    heads, kv heads, the MLP width and the vocabulary over `tensor`: maxtext base.yml logical_axis_rules)."""
    for what, size in (("attention heads", model.num_query_heads), ("KV heads", model.num_kv_heads),
                       ("MLP width", model.mlp_dim), ("vocabulary", model.vocab_size)):
        if size % tensor:
            return f"ici_tensor_parallelism={tensor} does not divide {model.name}'s {size} {what}"
    return None


def _layout_problem(model: ModelPreset, ici_fsdp: int, dcn_fsdp: int, slices: int, elastic: bool) -> str | None:
    """Why FSDP over ici_fsdp x dcn_fsdp ways cannot shard the model's embedding width, or None."""
    ways = ici_fsdp * dcn_fsdp
    if model.emb_dim % ways:
        at = f" (at {slices} slices of the elastic range)" if elastic else ""
        return (f"FSDP ici {ici_fsdp} x dcn {dcn_fsdp} = {ways} ways does not divide {model.name}'s embedding "
                f"dimension {model.emb_dim}{at}")
    return None


def _compile_hint(request: PlanRequest, chosen: "Plan") -> str:
    """The command that asks XLA instead of the estimate (preview/compile/: MaxText's AOT compile)."""
    flags = [f"--model {chosen.model.name}", f"--generation {chosen.shape.generation.name}",
             f"--topology {chosen.shape.topology}", f"--slices {chosen.slices}",
             f"--dcn-data {chosen.dcn_data}", f"--dcn-fsdp {chosen.dcn_fsdp}", f"--ici-tensor {chosen.ici_tensor}",
             f"--per-device-batch-size {_number(chosen.per_device_batch_size)}"]
    for flag, value, default in (("--max-target-length", request.max_target_length, None),
                                 ("--remat-policy", request.remat_policy, None),
                                 ("--weight-dtype", request.weight_dtype, None),
                                 ("--attention", request.attention, None)):
        if value is not None and value != default:
            flags.append(f"{flag} {value}")
    if request.remat_offload is not None:
        flags.append(f"--remat-offload {','.join(request.remat_offload) or ''}")
    for key, value in maxtext_keys_of(chosen).items():
        flags.append(f"--set {key}={value}")
    return "python -m preview.compile " + " ".join(flags)


def plan(request: PlanRequest) -> Plan:
    """Validate a request and return the plan, or raise PlanError naming the values that do not work."""
    return plan_with_bounds(request)[0]


def plan_with_bounds(request: PlanRequest) -> tuple[Plan, tuple[float, float] | None]:
    """plan(), with the batch bounds its notes were written from (batch_bounds of the plan; None for a plan kept
    over the limit with the memory check off, whose notes scan nothing): core/nearest_fits.py advise() answers
    from the same scan."""
    model = preset(request.model)
    shape = resolve_shape(request.generation, request.topology)
    if request.slices < 1:
        raise PlanError(f"slices={request.slices} must be >= 1")
    min_slices = request.slices if request.min_slices is None else request.min_slices
    if not 1 <= min_slices <= request.slices:
        raise PlanError(f"elastic bounds {min_slices},{request.slices} slices: need 1 <= min <= max")
    elastic = min_slices < request.slices
    counts = range(min_slices, request.slices + 1)

    for name, ways in (("ici_context_parallelism", request.ici_context),
                       ("ici_sequence_parallelism", request.ici_sequence)):
        if ways < 1 or shape.devices % ways:
            raise PlanError(f"{name}={ways} must be >= 1 and divide the {shape.devices} devices of a "
                            f"{shape.pod_type} slice")
    others = request.ici_context * request.ici_sequence
    if shape.devices % others:
        raise PlanError(f"ici_context_parallelism={request.ici_context} x ici_sequence_parallelism="
                        f"{request.ici_sequence} does not divide the {shape.devices} devices of a {shape.pod_type} slice")
    if request.num_vocab_tiling is not None and request.num_vocab_tiling < 1:
        raise PlanError(f"num_vocab_tiling={request.num_vocab_tiling} must be >= 1")
    if request.mu_dtype not in (None, "", "float32", "bfloat16"):
        raise PlanError(f"mu_dtype={request.mu_dtype!r} unknown; allowed: float32, bfloat16")
    ici_fsdp, ici_tensor = _split(shape.devices // others, request.ici_fsdp, request.ici_tensor,
                                  ("ici_fsdp_parallelism", "ici_tensor_parallelism"),
                                  f"devices per {shape.pod_type} slice" + (
                                      f" / (context x sequence parallelism {others})" if others > 1 else ""))
    problem = _tensor_problem(model, ici_tensor)
    if problem:
        raise PlanError(problem)

    if request.dcn_data is not None or request.dcn_fsdp is not None or request.slices == 1:
        dcn_options = [_split(request.slices, request.dcn_data, request.dcn_fsdp,
                              ("dcn_data_parallelism", "dcn_fsdp_parallelism"), "slices")]
    else:
        dcn_options = [(request.slices, 1), (1, request.slices)]
    if elastic and all(d > 1 and f > 1 for d, f in dcn_options):
        raise PlanError(f"elastic run needs one DCN axis; got dcn_data_parallelism={dcn_options[0][0]} "
                        f"x dcn_fsdp_parallelism={dcn_options[0][1]}")
    # MaxText shards the embedding dimension of every weight over all FSDP axes, at every slice count the run
    # may have (an elastic resize changes the DCN FSDP ways when that is the axis across slices).
    problems: dict[tuple[int, int], str] = {}
    for d, f in dcn_options:
        for n in counts:
            reason = _layout_problem(model, ici_fsdp * request.ici_context, n if f > 1 else 1, n, elastic)
            if reason:
                problems[(d, f)] = reason
                break
    dcn_options = [option for option in dcn_options if option not in problems]
    if not dcn_options:
        raise PlanError("; ".join(dict.fromkeys(problems.values())))

    base = dict(
        model=model, shape=shape, slices=request.slices, min_slices=min_slices,
        ici_fsdp=ici_fsdp, ici_tensor=ici_tensor,
        max_target_length=request.max_target_length or model.max_target_length,
        remat_policy=request.remat_policy or model.remat_policy,
        remat_offload=(request.remat_offload if request.remat_offload is not None
                       else (model.remat_offload if request.remat_policy in (None, "custom") else ())),
        weight_dtype=request.weight_dtype or model.weight_dtype,
        attention=request.attention or model.attention,
        ici_context=request.ici_context, ici_sequence=request.ici_sequence,
        num_vocab_tiling=request.num_vocab_tiling or 1, mu_dtype=request.mu_dtype or "",
        unmodeled=tuple(request.unmodeled), evaluates=request.evaluates,
        eval_per_device_batch_size=request.eval_per_device_batch_size,
    )
    batch_free = ici_tensor * others
    if base["max_target_length"] < 1:
        raise PlanError(f"max_target_length={base['max_target_length']} must be >= 1")

    if request.per_device_batch_size is not None:
        for slices in counts:
            reason = _check_batch(request.per_device_batch_size, shape, slices, batch_free)
            if reason:
                raise PlanError(reason)
        batches = [request.per_device_batch_size]
    else:
        batches = _batch_candidates(model.per_device_batch_size, shape, counts, batch_free)

    tried: list[Plan] = []
    host_problems: list[str] = []
    # With the memory check off and nothing fitting: the first (requested or largest) batch's layout that needs the
    # fewest bytes per device (FSDP across slices where that is what comes closest), as a compile would check it.
    kept: tuple[Plan, Plan] | None = None
    # The largest batch first; at one batch a fit on any DCN layout before one near the limit (data parallel across
    # slices first within each).
    for pdbs in batches:
        candidates = []
        for dcn_data, dcn_fsdp in dcn_options:
            candidate = Plan(dcn_data=dcn_data, dcn_fsdp=dcn_fsdp, per_device_batch_size=pdbs,
                             memory=None, **base)  # type: ignore[arg-type]
            candidate = dataclasses.replace(candidate, memory=_estimate(candidate))
            # Every slice count the run may have (the fewest slices hold the most bytes per device), and at each
            # the worse of the train and eval steps.
            worst = max((candidate.at_slices(n) for n in counts), key=lambda p: p.step_memory.total)
            tried.append(worst)
            candidates.append((candidate, worst))
        if kept is None:
            kept = min(candidates, key=lambda pair: pair[1].step_memory.total)
        for wanted in (FITS, NEAR_LIMIT):
            for candidate, worst in candidates:
                if worst.step_memory.verdict == wanted:
                    host = _host_problem(worst)
                    if host:
                        host_problems.append(host)
                        continue
                    bounds = batch_bounds(candidate)
                    return (dataclasses.replace(candidate, notes=_notes(request, candidate, model, bounds, worst)),
                            bounds)
    if not request.memory_check:
        assert kept is not None
        first, worst = kept
        return dataclasses.replace(first, notes=(
            f"memory check off: estimated {worst.step_memory.total / GIB:.1f} GiB per device, over the "
            f"{worst.step_memory.usable / GIB:.2f} GiB XLA compiles against; run it only if XLA's compile fits it "
            f"({_compile_hint(request, worst)})",)), None     # an elastic run's compile: at its fewest slices
    best = min(tried, key=lambda p: p.step_memory.total)
    resized = f" (elastic: at {best.slices} of {min_slices}..{request.slices} slices)" if elastic else ""
    hint = _compile_hint(request, best)
    raise DoesNotFit(f"{model.name} does not fit on {best.slices} x {shape.pod_type}{resized}"
                    f" (dcn data {best.dcn_data} x fsdp {best.dcn_fsdp}, ici fsdp {best.ici_fsdp} x tensor {best.ici_tensor},"
                    f" per_device_batch_size {_number(best.per_device_batch_size)}, seq {best.max_target_length},"
                    f" remat {best.remat_policy}, weights {best.weight_dtype})"
                    + (" in its eval step (forward only, per_device_batch_size "
                       f"{_number(best.eval_batch)}, estimated)"
                       if best.step_memory is not best.memory else "")
                    + f": {best.step_memory.describe()}."
                    f" This is an estimate (core/xla_calibration.json: within {ESTIMATE_ERROR:.0%} of XLA near the"
                    f" limit, above it elsewhere); only a compile of this exact step that fits accepts it: {hint}"
                    " --no-memory-check (if it fits, the trainer's --no-memory-check or a stack's"
                    " memoryCheck: false runs it)"
                    + "".join(f". Not tried: {reason}" for reason in dict.fromkeys(problems.values()))
                    + (f". Host memory: {host_problems[0]}" if host_problems else ""), best)


def _host_problem(candidate: Plan) -> str | None:
    """Why the TPU host cannot hold what this plan offloads to it (core/pod_sizing.py sizes the pod; imported
    here lazily: it reads plans), or None."""
    from core.pod_sizing import tpu_pod_size
    try:
        tpu_pod_size(candidate, ray=True)
    except PlanError as err:
        return str(err)
    return None


def _notes(request: PlanRequest, chosen: Plan, model: ModelPreset, bounds: tuple[float, float],
           worst: Plan | None = None) -> tuple[str, ...]:
    notes = []
    warning = (worst or chosen).step_memory.near_limit_warning()
    if warning:
        at = f" (at {worst.slices} slices)" if worst is not None and worst.slices != chosen.slices else ""
        notes.append(f"memory{at}: {warning}")
    outright, best = bounds
    # Fits outright only if it does at every slice count the run may have (the worst of them).
    clean = outright if (worst or chosen).step_memory.verdict == FITS else None
    if clean is None:
        shape = (f"shape: per_device_batch_size {_number(chosen.per_device_batch_size)} is near the limit"
                 + (f", as is every batch up to {_number(best)}" if best > chosen.per_device_batch_size else "")
                 + "; compile before you pay")
    elif best > chosen.per_device_batch_size:
        shape = (f"shape: per_device_batch_size up to {_number(clean)} fits with this mesh, sequence and remat"
                 + (f" ({_number(best)} near the limit: compile it first)" if best > clean else ""))
    else:
        shape = "shape: this is the largest per_device_batch_size that fits with this mesh, sequence and remat"
    expected = expected_step(model.name, chosen.shape.generation.name, chosen.max_target_length,
                             chosen.per_device_batch_size)
    notes.append(shape + (f"; {expected}" if expected else ""))
    not_estimated = [f"{key}={value}" for key, value in chosen.unmodeled]
    if chosen.ici_sequence > 1:
        not_estimated.append(f"ici_sequence_parallelism={chosen.ici_sequence} (laid out; its memory effect is not)")
    if not_estimated:
        notes.append(f"memory: the estimate does not cover {', '.join(not_estimated)}: passed to MaxText as set; "
                     "python -m preview.compile (or --compile in the offline plan) decides whether it fits")
    if chosen.evaluates:
        fewest = chosen.at_slices(chosen.min_slices)
        evaluated = fewest.eval_memory
        notes.append(
            f"eval step: forward only at per_device_batch_size {_number(chosen.eval_batch)}, estimated "
            f"{evaluated.total / GIB:.1f} GiB per device on {fewest.slices} slice(s) (train step "
            f"{fewest.memory.total / GIB:.1f}): {evaluated.verdict}; planned at every slice count; MaxText compiles "
            "it at the run's start, so a step that does not fit ends the run there (exit 6): compileCheck "
            "compiles it first (aot/eval_compile.py), as it compiles the train step")
    if chosen.elastic:
        low = chosen.at_slices(chosen.min_slices)
        notes.append(f"elastic: per_device_batch_size stays {_number(chosen.per_device_batch_size)} on a resize, so "
                     f"the global batch follows the slices ({_number(low.global_batch_size)} sequences per step on "
                     f"{chosen.min_slices} slice(s) .. {_number(chosen.global_batch_size)} on {chosen.slices}); the "
                     f"step count and learning-rate schedule do not change")
    if request.per_device_batch_size is None and chosen.per_device_batch_size != model.per_device_batch_size:
        notes.append(f"per_device_batch_size lowered from {_number(model.per_device_batch_size)} "
                     f"to {_number(chosen.per_device_batch_size)} to fit HBM")
    if request.dcn_fsdp is None and chosen.dcn_fsdp > 1:
        notes.append("FSDP across slices: with data parallelism across slices each slice holds the whole model's "
                     "weights, gradients and optimizer state, which does not fit (or only near the limit) at this "
                     "batch")
    return tuple(notes)


def worker_bounds(plan_: Plan) -> int | tuple[int, int]:
    """Ray Train num_workers: fixed, or (min, max) whole slices of hosts when elastic."""
    return (plan_.min_workers, plan_.workers) if plan_.elastic else plan_.workers


def check_overrides_free(planned: Mapping[str, str], extra: Mapping[str, str]) -> None:
    clash = sorted(set(planned) & set(extra))
    if clash:
        raise PlanError(f"extra MaxText overrides {', '.join(clash)} would replace planned values; "
                        f"use the planner's options instead")


def batch_bounds(chosen: Plan, ceiling: float = 64) -> tuple[float, float]:
    """(largest batch that fits outright, largest accepted: fitting or near the limit, with a warning), each the
    largest per-device batch that lays out and fits (HBM and the host's memory for offloads) with every other
    choice of `chosen` kept (mesh, sequence, remat, dtype, slice range), from one scan upward from the plan's own
    batch in steps of 1/tensor. Never one whose estimate is over XLA's limit: that is refused unless a compile
    fits it. The estimate grows with the batch, so the outright bound is the last batch before the first near the
    limit."""
    step = 1 / chosen.ici_batch_free
    clean = best = chosen.per_device_batch_size
    clean_open = True
    counts = range(chosen.min_slices, chosen.slices + 1)
    k = int(round(best / step)) + 1
    while k * step <= ceiling:
        candidate = k * step
        if all(_check_batch(candidate, chosen.shape, n, chosen.ici_batch_free) is None for n in counts):
            trial = dataclasses.replace(chosen, per_device_batch_size=candidate)
            trial = dataclasses.replace(trial, memory=_estimate(trial))
            sized = [trial.at_slices(n) for n in counts]
            if not all(p.step_memory.verdict in (FITS, NEAR_LIMIT) and _host_problem(p) is None for p in sized):
                break
            clean_open = clean_open and all(p.step_memory.verdict == FITS for p in sized)
            if clean_open:
                clean = candidate
            best = candidate
        k += 1
    return clean, best


def largest_batch(chosen: Plan, ceiling: float = 64, near_limit: bool = True) -> float:
    """The largest accepted per-device batch (batch_bounds); `near_limit=False`: the largest that fits outright."""
    clean, best = batch_bounds(chosen, ceiling)
    return best if near_limit else clean

"""Config build, step 2: the run's step. The planner places the model on the slices or refuses it with the
nearest configurations that fit (as config keys), XLA's kept verdicts accept or refuse the planned step, and the
TPU pod is sized for it; one line per mistake, as rules.py, laid out for a terminal."""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Any, Mapping

from core.errors import PlanError
from core.maxtext_memory_keys import with_maxtext_keys
from core.nearest_fits import Alternative, advise
from core.planner import Plan, PlanRequest, plan
from core.pod_sizing import TpuPodSize, tpu_pod_size
from core.presets import PRESETS
from core.tpu_catalog import SliceShape
from core.worker_lock import load_pins
from infra.config.model import Capacity, Problem
from infra.config.parse import problem, quoted_setting
from infra.config.schema import NAMESPACE
from infra.config.shape_changes import ShapeChange, elastic_turned_fixed
from infra.config.worker_env_rules import REPO_ROOT

# What the planner's verdict depends on, in the order a refusal blames them.
_PLAN_KEYS = ("perDeviceBatchSize", "model", "elasticMinSlices", "slices", "tpuTopology", "tpuGeneration",
              "tpuMachineType")


def plan_workload(v: dict[str, Any], raw: Mapping[str, Any], shape: SliceShape | None,
                  problems: list[str], maxtext_settings: Mapping[str, str] | None = None,
                  changes: list[ShapeChange] | None = None) -> Plan | None:
    """Run the planner on the config: unknown models, batches that do not divide and models that do not fit
    in HBM are refused here, before anything is registered. maxtextSettings that change memory are taken in
    (core/maxtext_memory_keys.py with_maxtext_keys: estimated, or named in the plan as not estimated). A Spot run made
    elastic here that comes out fixed is added to `changes` (shape_changes.py: the user did not ask for it)."""
    if shape is None or v["slices"] is None:
        return None
    model = v["model"]
    if model not in PRESETS or PRESETS[model].cpu_only:
        allowed = ", ".join(name for name, p in PRESETS.items() if not p.cpu_only)
        problems.append(problem("model", model, f"allowed: {allowed}"))
        return None
    batch = float(v["perDeviceBatchSize"]) if v["perDeviceBatchSize"] is not None else None
    # elasticMinSlices only means something on the Ray backend (elsewhere check_applies refuses it). An elastic
    # Pathways run trains on as few as slices - pathwaysElasticSlices (every shape it takes is planned).
    slices = v["slices"]
    min_slices = v["elasticMinSlices"] if v["workloadBackend"] == "rayjob" else None
    lost = v.get("pathwaysElasticSlices") if v["workloadBackend"] == "pathways" else None
    if lost and slices is not None and 0 < lost < slices:
        min_slices = slices - lost
    if min_slices is not None and not 1 <= min_slices <= slices:
        problems.append(problem("elasticMinSlices", min_slices, f"whole slices from 1 to slices={slices}"))
        return None
    # None: memoryCheck was not a boolean (refused on its own); a batch that did not parse is refused on its own too.
    memory_check = v["memoryCheck"] is not False
    if not memory_check and "perDeviceBatchSize" not in raw:
        # Without a batch the planner would keep its own largest candidate over the limit: not a step any
        # compile checked.
        problems.append(f"{NAMESPACE}:memoryCheck=false keeps the exact step a compile fitted: set "
                        f"{NAMESPACE}:perDeviceBatchSize too (the batch that compile used)")
        return None
    # A run with an eval split (evalDatasetPath) also runs MaxText's eval step, which is planned too.
    request = PlanRequest(model=model, generation=shape.generation.name, topology=shape.topology, slices=slices,
                          min_slices=min_slices, per_device_batch_size=batch, memory_check=memory_check,
                          evaluates=bool(v.get("evalDatasetPath")))
    if maxtext_settings:
        try:
            request = with_maxtext_keys(request, maxtext_settings)[0]
        except PlanError as error:
            problems.append(f"{NAMESPACE}:maxtextSettings is refused by the planner: {error}")
            return None
    def decided(chosen: Plan) -> Plan:
        change = elastic_turned_fixed(v, raw, request, chosen)
        if change is not None and changes is not None:
            changes.append(change)
        return chosen

    if min_slices is None and v["capacity"] == Capacity.SPOT.value:
        # Spot: keep training on as few slices as the model fits on while preempted slices come back.
        # The fewest that fit by the estimate (memoryCheck=false would keep the first); none: a fixed-size run.
        fewer: PlanError | None = None
        for candidate in range(1, slices + 1):
            try:
                chosen = plan(dataclasses.replace(request, min_slices=candidate, memory_check=True))
            except PlanError as error:
                fewer = error
                continue
            if fewer is not None:
                # Say why the run cannot shrink further (dev at batch 12 does not fit on one slice).
                below = (f"elastic: keeps at least {candidate} slices while Spot slices are reclaimed: on "
                         f"{candidate - 1} the step does not fit ({str(fewer).split(': ', 1)[0]}); a smaller "
                         f"perDeviceBatchSize lets it shrink further")
                chosen = dataclasses.replace(chosen, notes=chosen.notes + (below,))
            return decided(chosen)
    try:
        return decided(plan(request))
    except PlanError as error:
        keys = f"model={model!r} on {shape.pod_type} x {slices} slices"
        elastic_key = (f"pathwaysElasticSlices={lost}" if v["workloadBackend"] == "pathways"
                       else f"elasticMinSlices={min_slices}")
        if min_slices is not None:
            keys += f", {elastic_key}"
        # Name the key the user set that the planner could not place: the batch first, then the model, then the
        # shape; the model (default or not) when the user set none of them.
        blamed = next((key for key in _PLAN_KEYS if key in raw), "model")
        value = shape.topology if blamed == "tpuTopology" else v[blamed]
        options = nearest_configs(request, on_ray=v["workloadBackend"] == "rayjob")
        nearest = ", or ".join(options)
        where = f"{model} on {slices} x {shape.pod_type}" + (
            f", {elastic_key}" if min_slices is not None else "")
        problems.append(Problem(hbm_refusal(quoted_setting(blamed, value, raw), where, nearest, str(error)), blamed,
                                value, options or None))
        return None


def check_xla_verdicts(v: dict[str, Any], workload_plan: Plan | None, problems: list[str],
                       compiled=None) -> Plan | None:
    """XLA decides where the program's compiler has a verdict on the run's steps (infra/config/compile_check.py
    CompileOutcome `compiled`: kept under the step's complete key in compile-verdicts.json, or compiled by this
    build): a step XLA refused at any slice count the run takes is refused here, before anything registers,
    naming the batch, what failed and the nearest batch XLA compiled. A step XLA did not decide is named once in
    the plan's notes (a warning where the Pulumi program shows it) with why: a compile that ran out of time (kept
    as undecided) or no compiler here; compileCheck=always refuses it. `compiled` None: this build had no
    compiler (the offline plan compiles after it, preview/cli.py) and says nothing of XLA."""
    from core import compile_verdicts
    from core.advice import next_smaller_batch

    if workload_plan is None or v["compileCheck"] == "off" or compiled is None:
        return workload_plan
    undecided = [count for count, kept in sorted(compiled.verdicts.items()) if kept.undecided]
    undecided_evals = [at for at, kept in sorted(compiled.eval_verdicts.items()) if kept.undecided]
    not_decided = compiled.not_decided
    if not_decided is None and (undecided or undecided_evals):
        first = compiled.verdicts[undecided[0]] if undecided else compiled.eval_verdicts[undecided_evals[0]]
        seconds = first.undecided_after_s
        fresh = set(undecided) <= set(compiled.compiled_now) and set(undecided_evals) <= set(
            compiled.eval_compiled_now)
        retried = "" if fresh else " (kept; not compiled again"
        not_decided = (f"undecided after {seconds:.0f} s, the compile ran out of time{retried}"
                       + (f": {compile_verdicts.RETRY_ENV}=1 compiles it again)" if retried else ""))
    if not_decided is not None and v["compileCheck"] == "always":
        problems.append("\n".join(textwrap.wrap(
            f"{NAMESPACE}:compileCheck=always needs XLA's verdict on every step and got none: {not_decided}; "
            "or set compileCheck=auto (a warning instead) or off", 98, subsequent_indent=_INDENT)))
        return None
    for count, kept in compiled.verdicts.items():
        if kept.compiled or kept.undecided:
            continue
        nearest = compiled.nearest.get(count)
        batch = f"{workload_plan.per_device_batch_size:g}"
        lines = [f"{NAMESPACE}:perDeviceBatchSize={batch} is refused by XLA on {count} x "
                 f"{workload_plan.shape.pod_type}: {kept.what_failed()}"]
        if nearest:
            lines.append(f"nearest that compiled: {NAMESPACE}:perDeviceBatchSize={nearest:g} (kept: no compile)")
        else:
            # None compiled yet: the largest smaller batch the planner lays out, which the next preview compiles.
            retry = next_smaller_batch(workload_plan)
            lines.append(f"nearest to try: {NAMESPACE}:perDeviceBatchSize={retry:g} (not compiled yet: choosing it "
                         "means a compile)" if retry
                         else f"nearest to try: a smaller {NAMESPACE}:perDeviceBatchSize (none lays out)")
        lines.append(f"(XLA's verdict, libtpu {kept.libtpu}, MaxText {kept.maxtext}, kept in "
                     f"{compile_verdicts.COMPILE_VERDICTS} on {kept.date})")
        problems.append(_refusal_lines(lines))
        return None
    for (count, batch), kept in compiled.eval_verdicts.items():
        if not (kept.compiled or kept.undecided):
            problems.append(_refusal_lines(_eval_refusal(workload_plan, count, batch, kept,
                                                         compiled.eval_nearest.get((count, batch)))))
            return None
    notes = []
    if compiled.file_note:
        notes.append(f"memory: {compiled.file_note}")
    if compiled.not_kept:
        notes.append(f"memory: XLA's verdict was not kept ({compiled.not_kept}): the next preview compiles it again")
    if not_decided is not None:
        counts = ", ".join(map(str, undecided)) if undecided and compiled.not_decided is None else "the run's"
        what = f"{counts} slice(s)"
        if undecided_evals and not undecided and compiled.not_decided is None:
            what = "the eval step on " + ", ".join(f"{n} slice(s) at eval batch {b:g}" for n, b in undecided_evals)
        notes.append(f"memory: XLA did not decide {what}: {not_decided}")
    elif compiled.verdicts:
        decided = next(iter(compiled.verdicts.values()))
        notes.append(f"memory: XLA compiled the run's step at {', '.join(map(str, sorted(compiled.verdicts)))} "
                     f"slice(s) (libtpu {decided.libtpu}, MaxText {decided.maxtext}, jax {decided.jax or '?'})")
        if compiled.eval_verdicts:
            # aot/eval_compile.py: MaxText's eval step built and lowered as trainers/pre_train/train.py does at start.
            steps = ", ".join(f"{n} slice(s) at {b:g}" for n, b in sorted(compiled.eval_verdicts))
            notes.append(f"memory: XLA compiled the run's eval step too, as MaxText compiles it at start (per-device "
                         f"eval batch): {steps}")
        notes.append(_front_end_assumption(decided))
        if any(verdict.mode == compile_verdicts.MODE_MEMORY_KERNELS for verdict in compiled.verdicts.values()):
            # aot/kernel_check.py: what the faster mode decides, and what only the full compile would.
            notes.append("assumption: XLA decided by the attention kernels alone (scoped VMEM) and the step "
                         "memory-only (HBM), not a full compile: other Pallas kernels and code generation's other "
                         "refusals are not compiled (TPU_MULTISLICE_FULL_COMPILE=1 compiles in full)")
        # The notes follow the compile that ran: the estimate's "compile it first" advice is answered.
        kept_notes = tuple(_answered(note) for note in workload_plan.notes)
        workload_plan = dataclasses.replace(workload_plan, notes=tuple(note for note in kept_notes if note))
    return dataclasses.replace(workload_plan, notes=workload_plan.notes + tuple(notes)) if notes else workload_plan


def _refusal_lines(lines: list[str]) -> str:
    # 98: ConfigError lays each problem out two columns in (within 100 as pulumi up prints it).
    return "\n".join(textwrap.wrap(lines[0], 98, subsequent_indent=_INDENT + "  ") + [
        piece for line in lines[1:] for piece in textwrap.wrap(
            line, 98, initial_indent=_INDENT, subsequent_indent=_INDENT + "  ")])


TRAIN_BATCH_KEY = "perDeviceBatchSize"
EVAL_BATCH_KEY = "maxtextSettings.eval_per_device_batch_size"


def eval_batch_key(workload_plan: Plan, eval_batch: float | None) -> tuple[str, float]:
    """The config key that set the per-device batch of the run's eval step compiled at `eval_batch`, and its value:
    maxtextSettings.eval_per_device_batch_size for the step MaxText compiles at start at the user's own eval batch,
    else perDeviceBatchSize (MaxText 0.2.5 takes it when that key is unset, and Grain's eval passes batch at it:
    core/planner.py Plan.eval_batch). An own eval batch equal to the train batch is one step with both keys; it is
    named perDeviceBatchSize, since lowering the eval key alone would leave Grain's eval at the train batch.
    The one rule for the config build's refusal (_eval_refusal, `eval_batch` the batch it compiled) and the offline
    plan's (preview/cli.py _batch_key, the batch the step's argv loads: the same number, eval_target set it). The
    train batch is the plan's: only the plan's own steps are named here; a nearest batch XLA compiled (a step at a
    smaller train batch) is named with the key of the step it stands in for, never through this rule.
    """
    own = workload_plan.eval_per_device_batch_size
    if own and eval_batch == own and own != workload_plan.per_device_batch_size:
        return EVAL_BATCH_KEY, own
    return TRAIN_BATCH_KEY, workload_plan.per_device_batch_size


def _eval_refusal(workload_plan: Plan, count: int, batch: float, kept, nearest: float | None) -> list[str]:
    """An eval step XLA refused, naming the key that set its batch (eval_batch_key); evalDatasetPath turns the
    eval step on."""
    from core import compile_verdicts
    from core.advice import next_smaller_batch

    key, value = eval_batch_key(workload_plan, batch)
    if key == EVAL_BATCH_KEY:
        step = 1 / workload_plan.ici_batch_free
        retry = batch - step if batch - step > 0 else None
    else:
        retry = next_smaller_batch(workload_plan)
    lines = [f"{NAMESPACE}:{key}={value:g} is refused by XLA in the eval step ({NAMESPACE}:evalDatasetPath is "
             f"set) on {count} x {workload_plan.shape.pod_type}: {kept.what_failed()}"]
    if nearest:
        lines.append(f"nearest that compiled: {NAMESPACE}:{key}={nearest:g} (kept: no compile)")
    else:
        lines.append(f"nearest to try: {NAMESPACE}:{key}={retry:g} (not compiled yet: choosing it means a compile)"
                     if retry else f"nearest to try: a smaller {NAMESPACE}:{key}, or unset evalDatasetPath")
    lines.append(f"(XLA's verdict on MaxText's eval step, libtpu {kept.libtpu}, MaxText {kept.maxtext}, kept in "
                 f"{compile_verdicts.COMPILE_VERDICTS} on {kept.date})")
    return lines


def _front_end_assumption(verdict) -> str:
    """Which front end decided, and what the verdict assumes of the workers' XLA: the jax that traced the step here
    may not be the workers' (their jax needs Python >= 3.12, worker_env/requirements.lock; a Python that has it
    compiles through TPU_MULTISLICE_COMPILE_PYTHON, aot/compile_python.py), and the libtpu is theirs only when
    fetched (aot/workers_libtpu.py)."""
    pins = load_pins(REPO_ROOT)
    libtpu = (f"the workers' libtpu {verdict.libtpu}" if verdict.libtpu == pins["libtpu"] else
              f"libtpu {verdict.libtpu}, not the workers' {pins['libtpu']} (python -m aot.workers_libtpu --fetch)")
    if verdict.jax == pins["jax"]:
        return f"XLA's verdict came from the workers' own front end, jax {verdict.jax}, with {libtpu}"
    return (f"assumption: XLA's verdict came from jax {verdict.jax or '?'}'s front end here (the workers run jax "
            f"{pins['jax']}; TPU_MULTISLICE_COMPILE_PYTHON names a Python that has it) with {libtpu}: the same "
            "step is assumed to compile the same (docs/planner.md measures the difference)")


def _answered(note: str) -> str | None:
    """A plan note once XLA compiled every step of the run: the estimate's near-limit warning (which asks for the
    compile, core/memory.py COMPILE_FIRST) goes; the shape note's request to compile says it was compiled."""
    from core.memory import COMPILE_FIRST

    if note.startswith("memory") and COMPILE_FIRST in note:
        return None
    return note.replace("; compile before you pay", "; XLA compiled it")


# Continuation lines of a multi-line refusal: indented under the first, wrapped so each fits 100 columns.
_INDENT = "    "


def hbm_refusal(setting: str, where: str, nearest: str, why: str) -> str:
    """A refusal over HBM laid out for a terminal: the first line says what is wrong, the second the nearest
    configuration that fits, then the planner's reasoning wrapped on the lines after."""
    lines = [f"{setting} is over HBM: {where}"]
    if nearest:
        lines += textwrap.wrap(f"nearest that fits: {nearest}", 100, initial_indent=_INDENT,
                               subsequent_indent=_INDENT + "  ", break_on_hyphens=False)
    # A command to copy stays whole, on a line of its own.
    why, marker, command = why.partition(_COMPILE_COMMAND)
    lines += textwrap.wrap(f"why: {why.strip()}", 100, initial_indent=_INDENT, subsequent_indent=_INDENT + "  ",
                           break_on_hyphens=False, break_long_words=False)
    if marker:
        # The command alone on its line (what to copy); what follows it is prose, wrapped below.
        command, opening, rest = command.partition(" (")
        lines.append(_INDENT + "  " + marker + command)
        if opening:
            lines += textwrap.wrap("(" + rest, 100, initial_indent=_INDENT + "  ", subsequent_indent=_INDENT + "  ",
                                   break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


_COMPILE_COMMAND = "python -m preview.compile"


# The planner's changes a stack's config can express, and the key that expresses each (core/nearest_fits.py
# _CHANGE_ORDER; the mesh, remat and weight dtype of a stack are the planner's and the preset's, not config keys).
_CONFIG_CHANGES = ("batch", "min_slices", "slices")


def _config_keys(alt: Alternative, on_ray: bool) -> str | None:
    """The config keys to set for a planner alternative, or None when config cannot express it."""
    if not set(alt.kinds) <= set(_CONFIG_CHANGES) or ("min_slices" in alt.kinds and not on_ray):
        return None
    sets = []
    if "batch" in alt.kinds:
        batch = alt.plan.per_device_batch_size
        sets.append(f"{NAMESPACE}:perDeviceBatchSize={int(batch) if batch == int(batch) else batch}")
    if "slices" in alt.kinds:
        sets.append(f"{NAMESPACE}:slices={alt.plan.slices}")
    if "min_slices" in alt.kinds:
        sets.append(f"{NAMESPACE}:elasticMinSlices={alt.plan.min_slices}")
    extra = f" (+{alt.extra_chips} chips)" if alt.extra_chips else ""
    return " and ".join(sets) + extra


def nearest_config(request: PlanRequest, on_ray: bool, limit: int = 2) -> str:
    """The nearest configurations that fit, as the config keys to set, nearest first ("" when none can)."""
    return ", or ".join(nearest_configs(request, on_ray, limit))


def nearest_configs(request: PlanRequest, on_ray: bool, limit: int = 2) -> list[str]:
    """nearest_config's options one by one (a refusal's `allowed` in the plan's --json)."""
    options = [keys for alt in advise(request, limit=8).alternatives
               if (keys := _config_keys(alt, on_ray)) is not None]
    return options[:limit]


def check_pod_size(v: dict[str, Any], raw: Mapping[str, Any], workload_plan: Plan | None,
                   problems: list[str]) -> TpuPodSize | None:
    """What each TPU pod requests and may use (core/pod_sizing.py; Ray pods also hold Ray's own processes and
    object store); the host memory a planned run needs on each TPU VM must fit what a pod can have."""
    if workload_plan is None:
        return None
    try:
        return tpu_pod_size(workload_plan, ray=v["workloadBackend"] == "rayjob")
    except PlanError as error:
        blamed = next((key for key in _PLAN_KEYS if key in raw), "model")
        value = workload_plan.shape.topology if blamed == "tpuTopology" else v[blamed]
        problems.append(f"{quoted_setting(blamed, value, raw)} is refused for {workload_plan.model.name} on "
                        f"{workload_plan.shape.pod_type}: {error}")
        return None

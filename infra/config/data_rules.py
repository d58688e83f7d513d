"""Config rules of what a run trains on: datasetType/datasetPath/evalDatasetPath/evalInterval, loadParametersPath,
maxtextSettings and runName. Each appends one line per mistake to `problems`, naming the key the user set, its
value and what is allowed; values refused in step 1 (parse) arrive as None and are skipped.

What only Cloud Storage can answer (does the glob match files, does the run have checkpoints, are the weights the
model's) is looked up at `pulumi up` before anything registers (infra/data_lookups.py).
"""
from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from core import data
from core.errors import PlanError
from core.maxtext_args import STACK_KEYS
from core.maxtext_memory_keys import LIFTED_KEYS
from core.planner import Plan
from core.preemption import MAX_POD_GRACE_S, ShutdownBudget, eval_step_seconds, eval_steps_within_grace
from infra import naming
from infra.config.model import TrainingRun
from infra.config.parse import problem
from infra.config.schema import NAMESPACE

BASE_KEYS_FILE = Path(__file__).with_name("maxtext_base_keys.txt")
# Where each backend's default run name comes from (the job's name key), as before runName existed.
_JOB_NAME_KEYS = {"rayjob": "rayJobName", "jobset": "jobsetName", "pathways": "pathwaysJobName"}


@lru_cache(maxsize=1)
def maxtext_base_keys() -> frozenset[str]:
    """The keys MaxText 0.2.5's base.yml defines (a snapshot the tests compare with the installed MaxText)."""
    lines = BASE_KEYS_FILE.read_text().splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _setting(name: str, value: str) -> str:
    return f"{NAMESPACE}:maxtextSettings.{name}={value!r}"


def accepted_maxtext_settings(v: dict[str, Any], problems: list[str]) -> dict[str, str]:
    """maxtextSettings that may be launched. Unknown keys, keys the stack sets itself and keys another config key
    owns are refused, one line each. The planner takes in the ones that change memory (core/maxtext_memory_keys.py
    with_maxtext_keys): estimated, or named in the plan as not estimated."""
    settings = v["maxtextSettings"]
    if not settings:
        return {}
    known = maxtext_base_keys()
    accepted: dict[str, str] = {}
    for name, value in settings:
        if name in STACK_KEYS:
            problems.append(f"{_setting(name, value)} is set by the stack: {name} comes from "
                            f"{STACK_KEYS[name]}; set that instead")
        elif name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see MaxText's configs/base.yml"
            problems.append(f"{_setting(name, value)} is not a MaxText 0.2.5 setting (not in its base.yml); "
                            f"{hint}")
        else:
            accepted[name] = value
    return accepted


def passed_on(accepted: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The settings launched as they are: all but those the plan emits itself (LIFTED_KEYS)."""
    return tuple((name, value) for name, value in accepted.items() if name not in LIFTED_KEYS)


def default_run_name(v: dict[str, Any]) -> str | None:
    """runName, or what the backend named its run before runName existed: its job's name and the model."""
    if v["runName"] is not None:
        return v["runName"]
    key = _JOB_NAME_KEYS.get(v["workloadBackend"] or "")
    if key is None or v[key] is None or v["model"] is None:
        return None
    return f"{v[key]}-{v['model']}"


def pathways_job_name(v: dict[str, Any], raw: Mapping[str, Any]) -> str:
    """The Pathways JobSet's name: pathwaysJobName when set, else the run's name (so another run is another
    JobSet), else pathwaysJobName's default."""
    if "pathwaysJobName" not in raw and v["runName"] is not None:
        return v["runName"]
    return v["pathwaysJobName"]


def check_data(v: dict[str, Any], raw: Mapping[str, Any], workload_plan: Plan | None,
               maxtext_settings: Mapping[str, str], problems: list[str]) -> None:
    """Grain needs files; an eval interval needs an eval split; the backend must be able to run the data type
    and keep its position; the run's name must fit where it becomes a Kubernetes name."""
    kind, path = v["datasetType"], v["datasetPath"]
    if kind == "grain" and path == "" and "datasetPath" not in raw:
        problems.append(f"{NAMESPACE}:datasetType='grain' needs {NAMESPACE}:datasetPath: a gs:// glob of "
                        "ArrayRecord or Parquet files, e.g. gs://my-data/c4/train-*.array_record")
    if kind == "grain" and "evalInterval" in raw and v["evalInterval"] is not None and v["evalDatasetPath"] == "":
        problems.append(f"{NAMESPACE}:evalInterval={v['evalInterval']} needs {NAMESPACE}:evalDatasetPath (the "
                        "eval split it evaluates on); set it, or unset evalInterval")
    # Several JAX processes, each reading its own share of the eval split (Grain: host i reads ds[i::n]) with no
    # end agreed between them: without a fixed number of steps a host whose share runs out leaves the eval loop
    # while the others enter the next eval step and wait for it (a hang). MaxText 0.2.5 pads a host that ran out
    # (generate_padding_batch_eval, input_pipeline/multihost_dataloading.py) only with eval_steps > 0
    # (configs/types.py: "`eval_steps` must be > 0 when `generate_padding_batch_eval` is True"), so a run on
    # several hosts needs evalSteps. Pathways runs one JAX client for every slice: one reader, no skew.
    processes = workload_plan.shape.hosts * workload_plan.slices if workload_plan is not None else 0
    if v["evalDatasetPath"] and v["evalSteps"] is None and "evalSteps" not in raw and processes > 1 \
            and v["workloadBackend"] != "pathways":
        problems.append(problem("evalSteps", None, f"evalDatasetPath on {processes} hosts needs evalSteps >= 1 "
                                "(batches per eval pass; hosts whose share of the split runs out pad, so all "
                                "run the same steps)"))
    if v["workloadBackend"] == "pathways" and v["runName"] is not None and "pathwaysJobName" not in raw \
            and len(v["runName"]) > naming.PATHWAYS_NAME_MAX:
        problems.append(problem("runName", v["runName"], f"at most {naming.PATHWAYS_NAME_MAX} characters with "
                                "workloadBackend=pathways, where it names the Pathways JobSet (whose coordinator "
                                "address JobSet's webhook limits to 63 characters); or set pathwaysJobName"))
    if kind == "grain" and path:
        _check_backend_runs_grain(v, raw, workload_plan, maxtext_settings, problems)


def _check_backend_runs_grain(v: dict[str, Any], raw: Mapping[str, Any], workload_plan: Plan | None,
                              maxtext_settings: Mapping[str, str], problems: list[str]) -> None:
    backend = v["workloadBackend"]
    if backend == "pathways":
        # Without colocated Python, MaxText's Pathways client loads every batch on the head and sends it through
        # the proxy (maxtext 0.2.5 common/grain_utility.py: "McJax and Pathways through controller cases"); its
        # one process saves one Grain state, which a restore reads back. An elastic Pathways run sizes the batch
        # it loads by the devices of one TPU host (utils/elastic_utils.py get_local_batch_size), which only the
        # colocated-Python loader (a Python process on every TPU host) matches; the stack runs no such sidecar.
        elastic = v["pathwaysElasticSlices"]
        if elastic:
            problems.append(f"{NAMESPACE}:datasetType='grain' cannot run with {NAMESPACE}:pathwaysElasticSlices="
                            f"{elastic}: an elastic Pathways run loads data through MaxText's colocated-Python "
                            "loader on the TPU hosts, which this stack does not run; set pathwaysElasticSlices=0 "
                            "or datasetType=synthetic")
        return
    if workload_plan is None:
        return
    elastic = ""
    if workload_plan.elastic:
        elastic = ("an elastic run (" + ("elasticMinSlices" if "elasticMinSlices" in raw else
                                          f"elastic by default on capacity={v['capacity']}") +
                   f": {workload_plan.min_slices}..{workload_plan.slices} slices)")
        fixed = f"elasticMinSlices={workload_plan.slices} (a fixed-size run)"
        fmt = data.dataset_format(v["datasetPath"])
        if fmt not in data.ELASTIC_FORMATS:
            # What is refused is the format, not Grain: an elastic run reads ArrayRecord (core/data.py).
            problems.append(f"{NAMESPACE}:datasetPath={v['datasetPath']!r} is {fmt} data, refused on {elastic}: "
                            f"convert it to {', '.join(sorted(data.ELASTIC_FORMATS))} (*.array_record files, "
                            f"whose position Grain keeps through a resize), or set {fixed}")
            return
    try:
        # The one place that decides whether an elastic run can keep Grain's position (core/data.py).
        data.check_dataset(workload_plan.model.name, "grain", v["datasetPath"], "", dict(maxtext_settings),
                           elastic=workload_plan.elastic)
    except PlanError as error:
        if elastic:
            problems.append(f"{NAMESPACE}:datasetType='grain' on {elastic}: {error}; or set {fixed}")
        else:
            problems.append(problem("datasetPath", v["datasetPath"], str(error)))


def eval_pass_steps(v: dict[str, Any]) -> int:
    """The batches of one eval pass; 0 without an eval split, or for the whole split (evalSteps unset)."""
    return (v["evalSteps"] or 0) if v["evalDatasetPath"] else 0


def training_run(v: dict[str, Any], accepted: Mapping[str, str], checkpoint_period: int) -> TrainingRun:
    """The validated run; evalInterval defaults to the checkpoint period when an eval split is given."""
    interval = 0
    if v["evalDatasetPath"]:
        interval = v["evalInterval"] if v["evalInterval"] is not None else checkpoint_period
    return TrainingRun(
        run_name=default_run_name(v) or "", dataset_type=v["datasetType"], dataset_path=v["datasetPath"],
        eval_dataset_path=v["evalDatasetPath"], eval_interval=interval,
        eval_steps=eval_pass_steps(v),
        load_parameters_path=v["loadParametersPath"], maxtext_settings=passed_on(accepted),
        data_cache_gib=v["dataCacheGiB"] if v["datasetType"] == "grain" else 0)


def check_eval_pass(v: dict[str, Any], workload_plan: Plan, budget: ShutdownBudget) -> list[str]:
    """An eval pass short enough that a notice at its start is still saved: MaxText 0.2.5 acts on a notice only
    at the next train step's checkpoint call, after the pass (core/preemption.py eval_steps_within_grace). On
    Spot the node's notice bounds it; off Spot the pods' grace is sized to the pass, up to its own cap."""
    limit = eval_steps_within_grace(budget, workload_plan)
    steps = v["evalSteps"]
    if not v["evalDatasetPath"] or steps is None or limit is None or steps <= max(1, limit):
        return []
    per_step = eval_step_seconds(workload_plan)
    notice, room = (("a Spot notice", f"the {budget.notice_s} s pods get") if budget.spot else
                    ("a drain's SIGTERM", f"the longest grace a pod is given ({MAX_POD_GRACE_S} s)"))
    return [problem("evalSteps", steps, f"at most {max(1, limit)}: MaxText saves at {notice} only after the "
                    f"eval pass, which must fit with the save ({budget.needed_s} s) in {room} "
                    f"(an eval step about {per_step:.2g} s at 10 % MFU)")]


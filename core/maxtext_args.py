"""The one MaxText pre-training command line, shared by every launcher (pure).

Ray Train (trainer.entrypoint), JobSet and Pathways manifests all call `maxtext_overrides` / `pre_train_argv`
so the same plan produces the same MaxText run whichever way it is launched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from core import data
from core.errors import PlanError
from core.memory import OFFLOADABLE
from core.planner import Plan, check_overrides_free
from core.recipes import recipe_kernel_settings

# `python -m PRE_TRAIN_MODULE <base.yml> key=value ...` is MaxText's pre-training entry point (maxtext 0.2.x).
PRE_TRAIN_MODULE = "maxtext.trainers.pre_train.train"

# The dataset types offered, and which were removed and why: core/data.py.
DATASET_TYPES = data.DATASET_TYPES
HARDWARE = ("tpu", "cpu")

# MaxText's goodput keys (maxtext 0.2.5 configs/base.yml "Goodput parameters"; maxtext/common/goodput.py):
# record job/step events to Cloud Logging, and on process 0 compute goodput from them and upload it, with the
# step-time deviation, to Cloud Monitoring, which the stack's dashboard (infra/dashboard.py) charts. The
# recording and the monitor default to false, so a run without these keys leaves the goodput charts empty.
# The two enable_gcp_* keys default to true; they are set anyway so that the dashboard does not depend on a
# default. Not set: enable_checkpoint_cloud_logger (0.2.5 ignores it and only logs a deprecation warning,
# maxtext/common/checkpointing.py setup_checkpoint_logger) and report_performance_metric_for_gcp_monitoring
# (it switches the step-deviation upload off, maxtext/common/goodput.py maybe_monitor_goodput).
GOODPUT_OVERRIDES = {
    "enable_goodput_recording": "true",
    "monitor_goodput": "true",
    "enable_gcp_goodput_metrics": "true",
    "enable_gcp_step_deviation_metrics": "true",
}


DEFAULT_CHECKPOINTS_TO_KEEP = 3


@dataclass(frozen=True)
class RunSettings:
    """Per-run settings that are not the planner's business."""

    run_name: str                    # checkpoints live in <base_output_directory>/<run_name>/checkpoints
    base_output_directory: str       # gs://bucket/path on GKE, a local directory in local mode
    steps: int                       # total steps; a resumed run continues up to this number
    checkpoint_period: int           # MaxText's default (10000) means "only step 0" for short runs
    # MaxText keeps every checkpoint unless told (base.yml max_num_checkpoints_to_keep: None); one llama3-8b
    # checkpoint with its optimizer state is ~100 GB, so runs keep the last few (the newest is what resumes).
    checkpoints_to_keep: int = DEFAULT_CHECKPOINTS_TO_KEEP
    dataset_type: str = "synthetic"
    dataset_path: str = ""           # grain_train_files (a file pattern) for dataset_type=grain
    dataset_format: str = ""         # grain_file_type: arrayrecord or parquet (default: from the path's suffix)
    pretokenized: bool = False       # the files hold token ids, not text (tokenize_train_data=false)
    eval_dataset_path: str = ""      # grain_eval_files, same format; evaluated every eval_interval steps
    eval_interval: int = 0           # 0: no eval (MaxText's -1)
    eval_steps: int = 0              # batches per evaluation (0: MaxText reads the eval files to their end)
    # MaxText load_parameters_path: Orbax parameters (.../checkpoints/<step>/items) a new run starts from; a run
    # that has checkpoints of its own resumes from them instead (MaxText restores its own checkpoint first).
    load_parameters_path: str = ""
    tokenizer_path: str = ""
    jax_cache_dir: str = ""          # default: <base_output_directory>/jax_cache, shared across restarts
    hardware: str = "tpu"            # "cpu": local mode, JAX on CPU pretending to be the TPU hosts
    metrics_file: str = ""
    # MaxText goodput recording and upload (GOODPUT_OVERRIDES). None: on for hardware=tpu (a cluster launch),
    # off for cpu (the local run: no Cloud credentials, and MaxText stubs goodput under DECOUPLE_GCLOUD).
    goodput: bool | None = None
    extra: Mapping[str, str] = field(default_factory=dict)   # further MaxText keys, never planned ones

    @property
    def records_goodput(self) -> bool:
        return self.hardware == "tpu" if self.goodput is None else self.goodput

    def validate(self) -> None:
        if not self.run_name or any(c in self.run_name for c in " =/"):
            raise PlanError(f"run_name={self.run_name!r} must be non-empty without spaces, '=' or '/'")
        if not self.base_output_directory:
            raise PlanError("base_output_directory is required (checkpoints and compile cache live there)")
        if self.steps < 1:
            raise PlanError(f"steps={self.steps} must be >= 1")
        if self.checkpoints_to_keep < 1:
            raise PlanError(f"checkpoints_to_keep={self.checkpoints_to_keep} must be >= 1 (the newest checkpoint "
                            "is what a restarted run resumes from)")
        if not 1 <= self.checkpoint_period <= self.steps:
            raise PlanError(f"checkpoint_period={self.checkpoint_period} must be within 1..steps={self.steps}"
                            " (otherwise no checkpoint after step 0)")
        data.check_dataset_type(self.dataset_type, self.dataset_path)
        if self.eval_dataset_path and self.dataset_type != "grain":
            raise PlanError(f"eval_dataset_path={self.eval_dataset_path!r} needs dataset_type=grain")
        if self.eval_dataset_path and self.eval_interval < 1:
            raise PlanError(f"eval_dataset_path={self.eval_dataset_path!r} needs eval_interval >= 1 (steps between "
                            "evaluations)")
        if self.eval_interval and not self.eval_dataset_path:
            raise PlanError(f"eval_interval={self.eval_interval} needs eval_dataset_path (the files to evaluate on)")
        if self.eval_steps < 0:
            raise PlanError(f"eval_steps={self.eval_steps} must be >= 0 (0: the eval files to their end)")
        if self.load_parameters_path and self.hardware == "tpu" and not self.load_parameters_path.startswith("gs://"):
            raise PlanError(f"load_parameters_path={self.load_parameters_path!r} must be a gs:// Orbax checkpoint "
                            "(the workers cannot read this machine's files)")
        if self.hardware not in HARDWARE:
            raise PlanError(f"hardware={self.hardware!r} unknown; allowed: {', '.join(HARDWARE)}")
        if self.goodput and self.hardware == "cpu":
            raise PlanError("goodput needs Cloud Logging and Cloud Monitoring; the local CPU run has neither "
                            "(leave goodput unset there)")


# The entrypoint's default without --checkpoint-period, as its --help and docs/trainer.md state it
# (tests/docs/test_docs_defaults.py checks the words against the function).
CHECKPOINT_PERIOD_RULE = "steps/10, at least 1, at most 100"


def default_checkpoint_period(steps: int) -> int:
    """At least ten checkpoints per run and never more than 100 steps of work at risk (CHECKPOINT_PERIOD_RULE)."""
    return max(1, min(100, steps // 10))


def _mesh_for_hardware(plan: Plan, hardware: str) -> dict[str, str]:
    if hardware == "tpu":
        return {}
    # CPU devices carry no `slice_index`, so MaxText's hybrid (ICI x DCN) mesh cannot be built and MaxText
    # treats CPU as one slice. Folding each DCN axis into the same ICI axis gives the identical device
    # layout: JAX orders devices by process, Ray Train ranks fill slices in order, so the outer part of each
    # axis is still the slice.
    return {
        "ici_data_parallelism": str(plan.dcn_data),
        "ici_fsdp_parallelism": str(plan.ici_fsdp * plan.dcn_fsdp),
        "dcn_data_parallelism": "1",
        "dcn_fsdp_parallelism": "1",
        "num_slices": "1",
        "hardware": "cpu",
    }


def _jax_cache_dir(run: RunSettings) -> str:
    if run.hardware == "cpu":
        # Off in local mode: processes that hit the persistent cache race ahead of those that miss it, and
        # on CPU the first collective between them is a gloo context whose setup times out after a fixed
        # 30 s (seen as "Gloo context initialization failed: DEADLINE_EXCEEDED" after every resume).
        return ""
    # Default next to the checkpoints, so a restarted pod finds it (MaxText's default is pod-local, docs/platform-notes.md §6).
    return run.jax_cache_dir or f"{run.base_output_directory.rstrip('/')}/jax_cache"


def recipe_settings(plan: Plan, hardware: str) -> dict[str, str]:
    """MaxText kernel settings of the tuned recipe the plan's model follows on its TPU generation
    (core/recipes.py: splash-attention blocks and fused backward kernel with flash attention, iota embedding).
    None on CPU: the local run has no splash kernel, and its tiny model no recipe."""
    if hardware != "tpu":
        return {}
    return recipe_kernel_settings(plan.model.name, plan.shape.generation.name, plan.attention)


def maxtext_overrides(plan: Plan, run: RunSettings, elastic_run: bool | None = None) -> list[str]:
    """MaxText `key=value` overrides for pre-training `plan` with `run` settings.

    Args:
      plan: from core.planner.plan(); decides model, mesh, batch, remat and weight dtype.
      run: run name, output directory, steps, checkpoint period, dataset, hardware, extra keys.
    Returns:
      The list of "key=value" strings to pass after the base config path. Order is stable (planned keys, the
      recipe's kernel settings on TPU, run keys, then `run.extra`), so manifests built from it diff cleanly.
    Raises:
      PlanError: invalid run settings, or `run.extra` trying to replace a planned key.
    """
    run.validate()
    elastic = plan.elastic if elastic_run is None else elastic_run
    data.check_dataset(plan.model.name, run.dataset_type, run.dataset_path, run.tokenizer_path, dict(run.extra),
                       elastic=elastic, file_format=run.dataset_format, pretokenized=run.pretokenized,
                       eval_dataset_path=run.eval_dataset_path)
    planned = plan.overrides()
    planned.update(_mesh_for_hardware(plan, run.hardware))
    if plan.model.cpu_only and run.hardware != "cpu":
        raise PlanError(f"model {plan.model.name} is a CPU test model; it needs hardware=cpu (local mode)")
    keys = dict(planned)
    keys.update(recipe_settings(plan, run.hardware))
    keys.update({
        "run_name": run.run_name,
        "base_output_directory": run.base_output_directory,
        "steps": str(run.steps),
        "enable_checkpointing": "true",
        # Save at the step all hosts agree on when a preemption notice comes (JAX's preemption sync point on
        # SIGTERM; under Ray Train the trainer adds Ray's notice, trainer/notice.py), instead of only stopping.
        "enable_autocheckpoint": "true",
        "checkpoint_period": str(run.checkpoint_period),
        # Orbax deletes older checkpoints past this many (MaxText checkpointing.create_orbax_checkpoint_manager).
        "max_num_checkpoints_to_keep": str(run.checkpoints_to_keep),
        "jax_cache_dir": _jax_cache_dir(run),
        "dataset_type": run.dataset_type,
    })
    if run.dataset_type == "grain":
        # The files, their format, the model's own tokenizer (a mismatched one was refused above) and, on an
        # elastic run, Grain's global position (core/data.py); the position is restored with the model.
        keys.update(data.data_overrides(plan.model.name, run.dataset_path, run.dataset_format, run.tokenizer_path,
                                        run.pretokenized, run.eval_dataset_path, elastic))
        if run.eval_dataset_path:
            keys["eval_interval"] = str(run.eval_interval)
            if run.eval_steps:
                keys["eval_steps"] = str(run.eval_steps)
                # A host whose share of the split (Grain: ds[i::n]) runs out before eval_steps pads with empty
                # batches instead of leaving the loop while the others wait in the eval step
                # (input_pipeline/multihost_dataloading.py MultiHostDataLoadIterator); MaxText 0.2.5 allows it
                # only with eval_steps > 0 (configs/types.py).
                keys["generate_padding_batch_eval"] = "true"
    if run.load_parameters_path:
        keys["load_parameters_path"] = run.load_parameters_path
    if run.metrics_file:
        keys["metrics_file"] = run.metrics_file
    if run.records_goodput:
        keys.update(GOODPUT_OVERRIDES)
    # The recipe's kernel settings are tuning defaults, not planned values: `run.extra` may replace them.
    check_overrides_free({key: value for key, value in keys.items() if key not in recipe_settings(plan, run.hardware)},
                         run.extra)
    keys.update(run.extra)
    return [f"{key}={value}" for key, value in keys.items()]


# MaxText keys every run's command sets from the stack (maxtext_overrides and the backends' own keys) → the
# config key or part of the stack that decides each. A run's further MaxText settings (maxtextSettings, --set)
# may not replace them: the launchers, the planner's memory estimate and the data position depend on them.
STACK_KEYS: dict[str, str] = {
    "model_name": "model", "run_name": "runName", "base_output_directory": "bucketName",
    "steps": "trainSteps", "checkpoint_period": "checkpointPeriod",
    "max_num_checkpoints_to_keep": "checkpointsToKeep", "enable_checkpointing": "checkpointPeriod",
    "enable_autocheckpoint": "the preemption handling (checkpoints at a notice)",
    "jax_cache_dir": "bucketName (the compile cache sits beside the checkpoints)",
    "jax_distributed_initialization_timeout": "the late-slice wait (core/slice_wait.py, sized from the slice start-up)",
    "dataset_type": "datasetType", "grain_train_files": "datasetPath", "grain_file_type": "datasetPath",
    "grain_eval_files": "evalDatasetPath", "eval_interval": "evalInterval", "eval_steps": "evalSteps",
    "generate_padding_batch_eval": "evalSteps (hosts pad their eval share to it)",
    "load_parameters_path": "loadParametersPath",
    "tokenizer_path": "model (each model's own tokenizer)", "tokenizer_type": "model (each model's own tokenizer)",
    "per_device_batch_size": "perDeviceBatchSize", "max_target_length": "model (the planner's preset)",
    "remat_policy": "model (the planner's preset)", "weight_dtype": "model (the planner's preset)",
    "attention": "model (the planner's preset)",
    "ici_fsdp_parallelism": "the planner (tpuTopology, slices)",
    "ici_tensor_parallelism": "the planner (tpuTopology, slices)",
    "ici_data_parallelism": "the planner (tpuTopology, slices)",
    "dcn_data_parallelism": "the planner (slices)", "dcn_fsdp_parallelism": "the planner (slices)",
    "num_slices": "slices", "hardware": "the backend (TPU)", "metrics_file": "the backend",
    **{key: "the dashboard (goodput charts)" for key in GOODPUT_OVERRIDES},
    # MaxText names the goodput series by it (run_name when unset), which the dashboard filters on.
    "goodput_job_name": "runName (the dashboard's goodput filter)",
    "enable_single_controller": "workloadBackend=pathways", "enable_pathways_goodput": "workloadBackend=pathways",
    "elastic_enabled": "pathwaysElasticSlices", "elastic_backup_kind": "pathwaysElasticSlices",
    "elastic_timeout_seconds": "pathwaysElasticTimeoutSeconds", "elastic_max_retries": "pathwaysElasticMaxRetries",
    "profiler": "pathwaysProfiling",
    # The custom remat policy's tensors (key=offload|remat|device): the planner's memory policy.
    **{tensor: "model (the planner's remat policy)" for tensor in OFFLOADABLE},
}


def settings_of(argv: Sequence[str]) -> dict[str, str]:
    """The MaxText key=value settings of an argv, as a map (items without "=", e.g. a module or a base config
    file, are not settings)."""
    return dict(item.split("=", 1) for item in argv if "=" in item)


def pre_train_argv(plan: Plan, run: RunSettings, base_config: str, elastic_run: bool | None = None) -> list[str]:
    """argv for MaxText's `main(argv)` (argv[0] is the program name, argv[1] the base config)."""
    return [PRE_TRAIN_MODULE, base_config, *maxtext_overrides(plan, run, elastic_run)]

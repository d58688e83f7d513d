"""Ray Train entrypoint: MaxText pre-training on TPU slices with JaxTrainer (what the RayJob runs).

    python -m trainer.entrypoint --model llama3-8b --topology 4x4 --slices 2 \
        --run-name llama3-8b-1 --base-output-directory gs://BUCKET/runs --steps 1000

Settings are validated and planned (core.planner) before Ray is touched; bad input exits 2 with one line.
Exit codes (core/exit_codes.py): 2 settings, 3 software (MaxText missing or too old, an import error, a model
MaxText builds differently, a worker runtime environment that cannot be set up), 4 data, 6 XLA out of HBM
(with the nearest batch that fits), 7 no progress and 8 interrupted without progress (the watchdog,
trainer/watchdog.py), 1 anything a retry may
fix once Ray Train's own retries are spent.
`--local-cpu` is the same program on fake TPU hosts (trainer.local starts them): the scaling config is
unchanged (use_tpu=True, TPU resources per host), only the workers' JAX runs on CPU devices.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from core import advice, exit_codes
from core.maxtext_facts import PINNED_MAXTEXT
from trainer import cli, elastic_control, failed_launch, failures, grow, maxtext_runtime, watchdog
from core.data import check_dataset
from core.errors import PlanError
from core.cli_errors import OneLineParser, command_apart, fit_columns
from core.maxtext_args import RunSettings
from core.planner import DoesNotFit, Plan, plan, worker_bounds
from trainer.worker import request_to_dict, run_to_dict, train_loop_per_worker, worker_plan_and_argv

# The MaxText release this project runs and tests (requirements-trainer.txt, scripts/install_maxtext.sh).
ENTRYPOINT_DEFAULTS = {"model": "llama3-8b", "generation": "v6e", "topology": "4x4", "slices": 2, "steps": 1000}
EXIT_BAD_INPUT = exit_codes.CONFIG_ERROR
# Ray Train's drain watcher polls every 5 s by default (ray/train/v2/_internal/constants.py
# DEFAULT_PREEMPTION_POLL_INTERVAL_S); GKE gives a Spot pod 15 s of its 30 s notice, so 5 s of it would go to
# noticing. The driver's value reaches the controller (constants.py ENV_VARS_TO_PROPAGATE).
PREEMPTION_POLL_INTERVAL_S = "1"
# Real failures (a worker error that is not a node going away) Ray Train recovers from before the run fails: a
# deterministic bug fails within a few attempts instead of retrying on every capacity type forever.
DEFAULT_MAX_FAILURES = 3
UNLIMITED = -1


def failure_config_kwargs(max_failures: int) -> dict[str, int]:
    """FailureConfig arguments (ray.train.v2.api.config.FailureConfig, Ray 2.60): `max_failures` bounds real
    failures. Interruptions (a drained, preempted or SIGTERM-killed node: a Spot reclaim, a maintenance event, an
    eviction) never reach Ray's budgets: the trainer's failure policy retries them uncounted and the watchdog ends
    a run after N attempts in a row without progress (trainer/elastic_control.py, trainer/watchdog.py), so Ray's
    `max_preemption_failures` stays at its default."""
    return {"max_failures": max_failures}


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: use 1 or more")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g}: use more than 0 seconds")
    return value


def _max_failures(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < UNLIMITED:
        raise argparse.ArgumentTypeError(f"{value}: use 0 or more, or -1 for unlimited")
    return value


def scaling_kwargs(plan_: Plan, resize_interval_s: float | None = None) -> dict[str, Any]:
    """ScalingConfig arguments: one worker per TPU host, whole slices, TPU chips per host (pure)."""
    kwargs: dict[str, Any] = dict(
        use_tpu=True,
        topology=plan_.shape.topology,
        accelerator_type=plan_.shape.generation.ray_accelerator_type,
        num_workers=worker_bounds(plan_),
        resources_per_worker={"TPU": plan_.shape.chips_per_host},
        placement_strategy="SPREAD",
    )
    if plan_.elastic and resize_interval_s is not None:
        kwargs["elastic_resize_monitor_interval_s"] = resize_interval_s
    return kwargs


def worker_env(plan_: Plan, local_cpu: bool, maxtext_version: str) -> dict[str, str]:
    """Environment of every training worker."""
    env = {"TRAINER_MAXTEXT_VERSION": maxtext_version}
    if local_cpu:
        env.update({
            # Ray's TPU backend calls jax.distributed.initialize on whatever platform JAX_PLATFORMS names
            # (docs/platform-notes.md §5); one CPU device per TPU device (two per TPU7x chip) makes the host look
            # like its TPU VM to MaxText's mesh.
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={plan_.shape.devices_per_host}",
            # Keep MaxText away from Google Cloud services (no credentials locally).
            "DECOUPLE_GCLOUD": "TRUE",
        })
    return env


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m trainer.entrypoint", description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    cli.add_plan_arguments(parser, ENTRYPOINT_DEFAULTS)
    cli.add_run_arguments(parser, ENTRYPOINT_DEFAULTS)
    g = parser.add_argument_group("Ray")
    g.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"), help="cluster to join (default: auto)")
    g.add_argument("--storage-path", default=cli._env("storage_path", None),
                   help="Ray Train storage (default: <base-output-directory>/ray)")
    g.add_argument("--max-failures", type=_max_failures,
                   default=_max_failures(cli._env("max_failures", str(DEFAULT_MAX_FAILURES))),
                   help="worker failures other than preemptions Ray Train recovers from (-1: unlimited); "
                        "interruptions are never counted there (--attempts-without-progress)")
    g.add_argument("--attempts-without-progress", type=_count, default=cli._env("attempts_without_progress", None),
                   help="attempts in a row that train no new step (each ended by a reclaim, an eviction, a "
                        "failure...) before the run ends with exit 8 (default: from the plan, core/run_bounds.py)")
    g.add_argument("--capacity-wait", type=_seconds, default=cli._env("capacity_wait", None),
                   help="seconds the run may wait with no worker group running (a reclaimed slice, an elastic run "
                        "below its minimum) before it ends (default: no bound)")
    g.add_argument("--startup-timeout", type=float, default=cli._env("startup_timeout", None),
                   help="seconds a (re)started worker group may take to its first step before the run ends "
                        "(default: from the plan, trainer/watchdog.py)")
    g.add_argument("--stall-timeout", type=float, default=cli._env("stall_timeout", None),
                   help="seconds without a step in a running group before the run ends (default: from the plan)")
    g.add_argument("--resize-interval", type=float, default=float(cli._env("resize_interval", 60)),
                   help="elastic runs: seconds between checks for more slices")
    g.add_argument("--maxtext-version", default=cli._env("maxtext_version", PINNED_MAXTEXT),
                   help="exact MaxText release the workers must have")
    g.add_argument("--progress-dir", default=cli._env("progress_dir", None),
                   help="directory (shared with worker 0) for the progress log")
    g.add_argument("--print-argv", action="store_true",
                   help="print, as JSON, the plan and the MaxText argv every worker of the full worker group "
                        "would run, and exit without starting Ray (preview/compile/ compiles it)")
    g.add_argument("--local-cpu", action="store_true", default=bool(cli._env("local_cpu", "")),
                   help="fake TPU hosts on this machine (see trainer.local): JAX on CPU, hardware=cpu")
    return parser


def prepare(argv: list[str] | None) -> tuple[argparse.Namespace, Plan, RunSettings]:
    """Parse and validate everything; raise PlanError on bad input (nothing started yet)."""
    args = build_parser().parse_args(argv)
    if args.run_name is None:
        args.run_name = f"{args.model}-{args.topology}"
    request = cli.plan_request(args, ENTRYPOINT_DEFAULTS["slices"])
    try:
        plan_ = plan(request)
    except DoesNotFit as err:
        nearest = advice.nearest_flags(request)
        # The compile command on its own line (what to copy; fit_columns wraps it with continuations).
        raise PlanError(command_apart(f"nearest that fits: {nearest}; why: {err}" if nearest else str(err))) \
            from None
    run = cli.run_settings(args, "cpu" if args.local_cpu else "tpu")
    check_dataset(plan_.model.name, run.dataset_type, run.dataset_path, run.tokenizer_path, dict(run.extra),
                  elastic=plan_.elastic, file_format=run.dataset_format, pretokenized=run.pretokenized,
                  eval_dataset_path=run.eval_dataset_path)
    if plan_.model.cpu_only and not args.local_cpu:
        raise PlanError(f"model {plan_.model.name} is a CPU test model; use trainer.local (or --local-cpu)")
    maxtext_runtime.require_version(args.maxtext_version)
    return args, plan_, run


def fit(args: argparse.Namespace, plan_: Plan, run: RunSettings):
    import ray
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig

    os.environ.setdefault("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", PREEMPTION_POLL_INTERVAL_S)
    ray.init(address=args.ray_address or "auto", logging_level="WARNING")
    storage = args.storage_path or f"{run.base_output_directory.rstrip('/')}/ray"
    if "://" not in storage:
        Path(storage).mkdir(parents=True, exist_ok=True)
    runtime_env: dict[str, Any] = {"env_vars": worker_env(plan_, args.local_cpu, args.maxtext_version)}
    limits = watchdog_limits(args, plan_, run)
    print(f"trainer: recovers from {args.max_failures} failure(s); interruptions are not failures", flush=True)
    print(f"trainer: {limits.describe()}", flush=True)
    trainer_cls = trainer_class(plan_, run, limits.stall_s)
    seam = elastic_control.check_seam(trainer_cls)
    if seam:
        raise failures.EnvironmentImportError(seam)
    trainer = trainer_cls(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config=_train_loop_config(args, plan_, run),
        scaling_config=ScalingConfig(**scaling_kwargs(plan_, args.resize_interval)),
        run_config=RunConfig(name=run.run_name, storage_path=storage,
                             failure_config=FailureConfig(**failure_config_kwargs(args.max_failures)),
                             callbacks=run_callbacks(plan_, run),
                             worker_runtime_env=runtime_env),
    )
    dog = watchdog.start(run.run_name, limits)
    try:
        return trainer.fit()
    finally:
        dog.stop()


def watchdog_limits(args: argparse.Namespace, plan_: Plan, run: RunSettings) -> watchdog.Limits:
    derived = watchdog.limits_for(plan_, run.checkpoint_period, args.capacity_wait)
    given = {"startup_s": args.startup_timeout, "stall_s": args.stall_timeout,
             "attempts_without_progress": args.attempts_without_progress}
    return dataclasses.replace(derived, **{key: value for key, value in given.items() if value is not None})


def run_callbacks(plan_: Plan, run: RunSettings) -> list:
    """Fail at once on a worker error no retry can fix (trainer.failures); tell the watchdog of schedulings, of
    the group's running state and of waits for capacity (trainer.watchdog); shut down a group whose launch failed
    before the next one starts (trainer.failed_launch)."""
    return [failures.fail_fast_callback(lambda: advice.out_of_hbm(plan_)),
            watchdog.controller_callback(run.run_name), failed_launch.cleanup_callback()]


def trainer_class(plan_: Plan, run: RunSettings, stall_s: float | None = None):
    """JaxTrainer with the trainer's policies (trainer.elastic_control), fixed and elastic runs alike: an
    interruption is never a failure; an elastic run's running group also saves before it is re-formed
    (trainer.resize), with the save bounded below the stall limit."""
    from trainer import resize

    stall_s = stall_s if stall_s is not None else watchdog.limits_for(plan_).stall_s

    def policies(trainer) -> dict:
        chosen = {"failure_policy": elastic_control.interruption_failure_policy(
            trainer.run_config.failure_config, run.run_name)}
        if plan_.elastic:
            chosen["scaling_policy"] = resize.save_first_scaling_policy(
                trainer.scaling_config, run.run_name, timeout_s=resize.save_timeout_s(stall_s))
        return chosen

    return elastic_control.policy_trainer(policies)


def _train_loop_config(args: argparse.Namespace, plan_: Plan, run: RunSettings) -> dict[str, Any]:
    return {"plan_request": request_to_dict(_request_of(args, plan_)), "run": run_to_dict(run),
            "progress_dir": args.progress_dir, "elastic": plan_.elastic, "run_name": run.run_name}


def print_argv(args: argparse.Namespace, plan_: Plan, run: RunSettings) -> None:
    """The workers' argv at full size, from the function the workers run (trainer.worker.worker_plan_and_argv)."""
    import json

    current, argv = worker_plan_and_argv(_train_loop_config(args, plan_, run), plan_.workers,
                                         maxtext_runtime.base_config_path())
    shape = current.shape
    print(json.dumps({"argv": argv, "plan": current.describe(), "model": current.model.name,
                      "generation": shape.generation.name,
                      "topology": shape.topology, "devices_per_slice": shape.devices, "slices": current.slices,
                      "min_slices": current.min_slices, "workers": plan_.workers,
                      "estimate_bytes": current.memory.total}))


def _request_of(args: argparse.Namespace, plan_: Plan):
    # Workers re-plan from the request (not the resolved plan) so an elastic resize re-derives the mesh.
    return cli.plan_request(args, plan_.slices)


def main(argv: list[str] | None = None) -> int:
    try:
        args, plan_, run = prepare(argv)
    except (PlanError, maxtext_runtime.MaxTextVersionError) as err:   # the latter: --maxtext-version too old
        print(fit_columns(f"trainer: {err}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.print_argv:
        print_argv(args, plan_, run)
        return 0
    print(f"trainer: {plan_.describe()}", flush=True)
    for note in plan_.notes:
        print(f"trainer: note: {note}", flush=True)
    if plan_.elastic:
        # The job started on the slices KubeRay had to wait for (elasticMinSlices); ask for the rest now.
        print(f"trainer: {grow.request_slices(plan_.slices)}", flush=True)
    try:
        result = fit(args, plan_, run)
    except Exception as err:  # Ray raises TrainingFailedError subclasses; report and fail the job
        return _failed(err, plan_)
    if getattr(result, "error", None):
        return _failed(result.error, plan_)
    # MaxText's train loop only returns once it has run `steps` steps (resumed runs included).
    print(f"trainer: finished {run.steps} steps of {run.run_name}", flush=True)
    return 0


def _failed(err: BaseException, plan_: Plan) -> int:
    code = failures.exit_code_of(err)
    print(f"trainer: training failed ({exit_codes.describe(code)}): {type(err).__name__}: {err}", file=sys.stderr)
    if code == exit_codes.OUT_OF_HBM and "nearest" not in str(err):   # FailFast adds it when it saw the worker's
        print(f"trainer: {advice.out_of_hbm(plan_)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

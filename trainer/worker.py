"""The function every Ray Train worker runs: plan for the slices it actually got, then MaxText pre-training.

The config dict crosses the driver/worker boundary, so it holds plain data (PlanRequest and RunSettings as
dicts). The plan is recomputed here from the worker-group size: an elastic run that lost a slice resumes
with the DCN axis shrunk to the slices it has, from MaxText's own last checkpoint.
"""
from __future__ import annotations

import os
import time
import uuid

from trainer import deferred_imports, maxtext_runtime, notice, progress, watchdog
from core.maxtext_args import RunSettings, pre_train_argv
from core.planner import Plan, PlanRequest, plan


def request_to_dict(request: PlanRequest) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in request.__dict__.items()}


def request_from_dict(data: dict) -> PlanRequest:
    data = dict(data)
    if data.get("remat_offload") is not None:
        data["remat_offload"] = tuple(data["remat_offload"])
    return PlanRequest(**data)


def run_to_dict(run: RunSettings) -> dict:
    return {**run.__dict__, "extra": dict(run.extra)}


def plan_for_world(full_plan: Plan, world_size: int) -> Plan:
    hosts = full_plan.shape.hosts
    if world_size % hosts:
        raise RuntimeError(f"{world_size} workers is not a whole number of {hosts}-host {full_plan.shape.pod_type} slices")
    return full_plan.at_slices(world_size // hosts)


def worker_plan_and_argv(config: dict, world: int, base_config: str) -> tuple[Plan, list[str]]:
    """What a worker group of `world` workers runs: the plan for the slices it has and MaxText's argv.
    train_loop_per_worker runs exactly this; `python -m trainer.entrypoint ... --print-argv` prints it for the
    full worker group (preview/compile/ compiles that argv ahead of time)."""
    full = plan(request_from_dict(config["plan_request"]))
    current = plan_for_world(full, world)
    # The group's size changes, the run's elasticity does not (the data iterator's checkpoint format follows it).
    return current, pre_train_argv(current, RunSettings(**config["run"]), base_config, elastic_run=full.elastic)


def asks_for_scale_up(config: dict, current: Plan) -> bool:
    """Whether this group polls for a scale-up each step: an elastic run's group below its maximum. A group at
    its maximum cannot grow, so it asks nothing; after a lost slice the smaller group is a new group whose workers
    start here again, and ask."""
    return bool(config.get("elastic") and config.get("run_name")
                and current.slices < config["plan_request"]["slices"])


# The local run's long eval pass (trainer.local --slow-eval S): every eval step takes S seconds more.
SLOW_EVAL_ENV = "TRAINER_LOCAL_SLOW_EVAL_S"


def train_loop_per_worker(config: dict) -> None:
    deferred_imports.install()          # before anything imports MaxText: every group start imports it again
    import ray.train

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    version = maxtext_runtime.require_version()
    maxtext_runtime.pin_assets_root()
    pinned = os.environ.get("TRAINER_MAXTEXT_VERSION")
    if pinned and version != pinned:
        raise maxtext_runtime.MaxTextVersionError(f"worker has maxtext {version}, the job pins {pinned}")
    current, argv = worker_plan_and_argv(config, world, maxtext_runtime.base_config_path())

    progress_dir = config.get("progress_dir")
    attempt = uuid.uuid4().hex[:8]
    if progress_dir:
        progress.write_worker(progress_dir, rank, {"attempt": attempt, "node": os.environ.get("TPU_NAME", "")})
        if rank == 0:
            progress.append(progress_dir, {"event": "attempt", "attempt": attempt, "workers": world,
                                           "slices": current.slices, "maxtext_version": version,
                                           "plan": current.describe()})
    last = {}
    # Rank 0 tells the driver's watchdog of every step (trainer/watchdog.py); never waits, never raises.
    beat = watchdog.StepBeat(config["run_name"], attempt) if rank == 0 and config.get("run_name") else None
    if beat is not None:
        beat.hello()        # this group is the controller's newest scheduling (trainer/watchdog.py)

    def on_step(step: int, loss: float, step_time: float) -> None:
        last.update(step=step, loss=loss)
        if beat is not None:
            beat(step)
        if progress_dir and rank == 0:
            progress.append(progress_dir, {"event": "step", "attempt": attempt, "step": step, "loss": loss,
                                           "step_time_s": step_time, "workers": world})

    def on_params(count: int) -> None:
        if progress_dir and rank == 0:
            progress.append(progress_dir, {"event": "model", "attempt": attempt, "params": count,
                                           "expected": current.model.param_count})

    def on_notice(step: int, reason: str) -> None:
        if progress_dir and rank == 0:
            progress.append(progress_dir, {"event": "notice", "attempt": attempt, "step": step, "reason": reason})

    # An elastic group hears a coming scale-up through the controller's notice actor (trainer/resize.py); only rank
    # 0 asks, and a lost actor reads as "no scale-up" (resize.ScaleUpPoll), never as a failed step.
    scale_up_requested = None
    if asks_for_scale_up(config, current):
        from trainer import resize

        scale_up_requested = resize.ScaleUpPoll(config["run_name"])
    watch = notice.NoticeWatch(notice.ray_poll(scale_up_requested), on_notice)
    notice.require_autocheckpoint(argv)
    notice.install(watch)
    def on_eval_start() -> None:
        if beat is not None:
            beat.eval_started()
        if scale_up_requested is not None and rank == 0:
            scale_up_requested.eval_began()      # a save asked for waits for the pass (trainer/resize.py)
        if progress_dir and rank == 0:
            progress.append(progress_dir, {"event": "eval-start", "attempt": attempt, "after_step": last.get("step")})

    slow_eval_s = float(os.environ.get(SLOW_EVAL_ENV, "0") or 0)

    def on_eval_step(count: int) -> None:
        if slow_eval_s:
            time.sleep(slow_eval_s)          # every host, so they stay in step
        if beat is not None:
            beat.eval_step(count)
        if progress_dir and rank == 0:
            progress.append(progress_dir, {"event": "eval-step", "attempt": attempt, "count": count,
                                           "after_step": last.get("step")})

    maxtext_runtime.install_hooks(current.model.param_count, current.model.name, on_params=on_params, on_step=on_step,
                                  on_eval_start=on_eval_start, on_eval_step=on_eval_step)
    maxtext_runtime.run_pre_train(argv)
    if watch.stopped:
        # MaxText saved at the notice step and returned; returning too would end the run as finished.
        if rank == 0:
            print(f"trainer: saved at step {watch.notice_step} on notice ({watch.reason}); waiting to be replaced",
                  flush=True)
            if progress_dir:
                progress.append(progress_dir, {"event": "saved-at-notice", "attempt": attempt,
                                               "step": watch.notice_step})
            if scale_up_requested is not None:
                resize.mark_saved(config["run_name"], watch.notice_step)
        wait_to_be_replaced()
    if rank == 0:
        print(f"trainer: worker group of {world} finished at step {last.get('step')} loss {last.get('loss')}")


# Longest a worker that saved at a notice waits for Ray Train to tear its group down: past the drain deadline
# (GKE's budget is at most a few minutes) or the resize, something is wrong and the run should fail loudly.
REPLACEMENT_WAIT_S = 900.0


def wait_to_be_replaced(limit_s: float = REPLACEMENT_WAIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
    raise RuntimeError(f"saved at a notice but the worker group was not replaced within {limit_s:.0f}s")

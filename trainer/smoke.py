"""Multislice smoke test: do all slices form one JAX system, and does a collective cross the slices?

Checks, on every process, failing loudly (exit 5 = core.exit_codes.SMOKE_FAILED, a `SMOKE FAILED:` line on stderr)
when one does not hold:
1. `jax.device_count()` equals slices x JAX devices per slice (every host of every slice joined; a device is a
   chip, except on TPU7x with two per chip — core/tpu_catalog.py devices_per_chip);
2. `jax.process_count()` is a whole number of processes per slice;
3. an all-reduce over every device of ones gives the device count, and of each device's process index gives
   the sum computed from the device list (every process took part);
4. an all-reduce over the slice axis only (the one that crosses DCN) of each device's slice id gives
   0 + 1 + ... + (slices - 1) on every device.
On success each process prints one `SMOKE PASSED {json}` line.

Under Ray (`--ray`) an error that kept the checks from running to a verdict is reported as what it is, not as a
failed smoke test (exit 5 ends a run as "look at the nodes"): the worker group not being placed or started, a
node or worker process dying (`infrastructure_error`) exits 1 (RUNTIME_FAILURE: a retry may fix it) with a
`SMOKE NOT RUN (infrastructure):` line; the workers' runtime env not installing is the environment's fault, as in
training (trainer/failures.py: exit 3, `SMOKE NOT RUN (import/environment error):`), and so is a configuration,
import or data error inside a worker, each with its own code; anything else a check raised is a failed smoke
test.

A smoke test that reaches no verdict within its deadline (`--deadline`; by default: on Ray, the start-up allowance
a run gets, core/run_time.STARTUP_ALLOWANCE_S, since Ray Train retries a worker group that cannot start without
limit; with `--distributed`, the join's own timeout plus core/run_bounds.STALL_FLOOR_S for the collectives) exits 1
with `SMOKE NOT RUN (infrastructure): no verdict within N s`: a hung join or collective must not hold every slice
(on Spot no job deadline would end it), and a restart on new pods may fix it.

Modes:
    python -m trainer.smoke --expect-devices 32 --expect-slices 2 --distributed   # JobSet pod (TPU, GKE env)
    python -m trainer.smoke --ray --model llama3-8b --topology 4x4 --slices 2     # RayJob driver (JaxTrainer)
    python -m trainer.smoke --ray ... --elastic 1,2    # elastic: checks the whole slices it gets, at least MIN
    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
      python -m trainer.smoke --expect-devices 8 --expect-slices 2                # locally, one process
    ... --coordinator localhost:12355 --num-processes 2 --process-id 0|1           # locally, several processes
Never imports Pulumi; JAX and Ray are imported only when a mode needs them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, Sequence

from core import exit_codes
from core.cli_errors import OneLineParser
from trainer.failures import errors_in, exit_code_of

# Distinct from a runtime failure: the JobSet's failure policy ends the run on it instead of restarting onto the
# same nodes, and the RayJob's driver stops before training (core/exit_codes.py).
EXIT_FAILED = exit_codes.SMOKE_FAILED
EXIT_BAD_INPUT = exit_codes.CONFIG_ERROR
# The checks never ran to a verdict because of the cluster (runtime env, placement, a dead node): what a retry
# may fix, like any runtime failure; never the retry-proof SMOKE_FAILED.
EXIT_INFRASTRUCTURE = exit_codes.RUNTIME_FAILURE
# jax.distributed.initialize's own default initialization_timeout (jax/_src/distributed.py), when --init-timeout
# is not given.
JAX_INIT_TIMEOUT_S = 300


class SmokeFailure(RuntimeError):
    """A check did not hold; the message says which and by how much."""


def slice_of_devices(devices: Sequence[Any], slices: int) -> list[int]:
    """Slice id of each device, in the given order.

    TPU devices carry `slice_index` (set by libtpu from MEGASCALE_SLICE_ID). CPU devices report 0: there the
    devices, ordered by process and id, are split evenly — the same order in which JAX numbers the processes
    of a multislice job (process id = slice id x processes per slice + id in slice)."""
    if all(d.platform == "tpu" and getattr(d, "slice_index", None) is not None for d in devices):
        return [int(d.slice_index) for d in devices]
    if len(devices) % slices:
        raise SmokeFailure(f"{len(devices)} devices cannot be split into {slices} equal slices")
    ordered = sorted(range(len(devices)), key=lambda i: (devices[i].process_index, devices[i].id))
    per_slice = len(devices) // slices
    ids = [0] * len(devices)
    for position, index in enumerate(ordered):
        ids[index] = position // per_slice
    return ids


def check(expected_devices: int, expected_slices: int) -> dict[str, Any]:
    """Run the checks in this process (jax.distributed, if any, already initialised). Raises SmokeFailure."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices, processes = jax.devices(), jax.process_count()
    if len(devices) != expected_devices:
        raise SmokeFailure(f"jax.device_count()={len(devices)} but slices x devices per slice = {expected_devices}: "
                           f"{processes} process(es) joined; a host or a slice is missing")
    if processes > 1 and processes % expected_slices:
        raise SmokeFailure(f"{processes} processes is not a whole number per slice for {expected_slices} slices")
    slice_ids = slice_of_devices(devices, expected_slices)
    if sorted(set(slice_ids)) != list(range(expected_slices)):
        raise SmokeFailure(f"devices report slices {sorted(set(slice_ids))}, expected 0..{expected_slices - 1}")
    # Mesh (slice, chip): rows are slices, so a reduction over "slice" only moves data between slices.
    order = sorted(range(len(devices)), key=lambda i: (slice_ids[i], devices[i].process_index, devices[i].id))
    per_slice = expected_devices // expected_slices
    grid = np.array([devices[i] for i in order]).reshape(expected_slices, per_slice)
    mesh = Mesh(grid, ("slice", "chip"))
    sharding = NamedSharding(mesh, P("slice", "chip"))
    values = {
        "one": np.ones((expected_slices, per_slice), np.int32),
        "process": np.array([devices[i].process_index for i in order], np.int32).reshape(grid.shape),
        "slice": np.array([slice_ids[i] for i in order], np.int32).reshape(grid.shape),
    }
    inputs = {name: jax.make_array_from_callback(grid.shape, sharding, lambda index, a=array: a[index])
              for name, array in values.items()}

    def reduce(one, process, slice_id):
        everywhere = ("slice", "chip")
        return (jax.lax.psum(one, everywhere), jax.lax.psum(process, everywhere), jax.lax.psum(slice_id, "slice"))

    spec = P("slice", "chip")
    step = jax.jit(jax.shard_map(reduce, mesh=mesh, in_specs=(spec, spec, spec), out_specs=(spec, spec, spec)))
    started = time.perf_counter()
    total, process_sum, cross_slice = jax.block_until_ready(step(inputs["one"], inputs["process"], inputs["slice"]))
    seconds = time.perf_counter() - started
    expected = {
        "all-reduce of ones": expected_devices,
        "all-reduce of process indices": int(values["process"].sum()),
        "cross-slice all-reduce of slice ids": expected_slices * (expected_slices - 1) // 2,
    }
    for label, result in zip(expected, (total, process_sum, cross_slice)):
        for shard in result.addressable_shards:
            got = np.unique(np.asarray(shard.data))
            if got.tolist() != [expected[label]]:
                raise SmokeFailure(f"{label} gave {got.tolist()} on {shard.device}, expected {expected[label]}")
    return {"devices": len(devices), "slices": expected_slices, "processes": processes,
            "process_index": jax.process_index(), "local_devices": jax.local_device_count(),
            "platform": devices[0].platform, "expected": expected, "collective_seconds": round(seconds, 3)}


def _report(result: dict[str, Any]) -> None:
    print("SMOKE PASSED " + json.dumps(result, sort_keys=True), flush=True)


def run_local(args: argparse.Namespace) -> int:
    import jax

    if args.distributed or args.coordinator:
        # On GKE TPU pods JAX finds everything itself: TPU_WORKER_HOSTNAMES/TPU_WORKER_ID within a slice and
        # MEGASCALE_* across slices (jax._src.clusters.cloud_tpu_cluster); locally the flags name it.
        kwargs = {}
        if args.coordinator:
            kwargs = dict(coordinator_address=args.coordinator, num_processes=args.num_processes,
                          process_id=args.process_id)
        if args.init_timeout is not None:
            # A slice that comes up late must be waited for, not fail the run (core/slice_wait.py).
            kwargs["initialization_timeout"] = args.init_timeout
        jax.distributed.initialize(**kwargs)
    try:
        result = check(args.expect_devices, args.expect_slices)
    except SmokeFailure as failure:
        print(f"SMOKE FAILED: {failure}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    _report(result)
    return 0


def _ray_worker(config: dict) -> None:
    import ray.train

    # Ray Train's TPU backend has initialised jax.distributed and MEGASCALE_* for this worker group. An elastic
    # group has as many whole slices as Ray could reserve (at least MIN): check those, not the maximum.
    expected = expectation_for_world(config, ray.train.get_context().get_world_size())
    result = check(expected["devices"], expected["slices"])
    _report(result)
    ray.train.report({"passed": True, **{k: v for k, v in result.items() if not isinstance(v, dict)}})


def ray_plan(args: argparse.Namespace):
    """The training job's plan: the smoke test checks exactly what training will use — all slices, or for an
    elastic run whatever whole number of slices between MIN and MAX the worker group gets."""
    from core.planner import PlanRequest, plan
    from trainer.cli import parse_elastic

    min_slices, slices = parse_elastic(args.elastic) if args.elastic else (None, args.slices)
    # Only the devices and slices are read: no memory check (a run kept over the limit has its smoke test too).
    return plan(PlanRequest(model=args.model, generation=args.generation, topology=args.topology,
                            slices=slices, min_slices=min_slices, memory_check=False))


def ray_expectation(full) -> dict[str, int]:
    """What every Ray worker checks: the plan's JAX devices (chips x devices per chip) and slices, per slice
    and host so an elastic group can scale them to the slices it got."""
    return {"devices": full.devices, "slices": full.slices, "devices_per_slice": full.devices // full.slices,
            "hosts_per_slice": full.shape.hosts}


def expectation_for_world(config: dict, world_size: int) -> dict[str, int]:
    """Devices and slices of a worker group of `world_size` hosts (one Ray worker per TPU host)."""
    hosts = config.get("hosts_per_slice")
    if not hosts:
        return {"devices": config["devices"], "slices": config["slices"]}
    if world_size % hosts:
        raise SmokeFailure(f"{world_size} workers is not a whole number of {hosts}-host slices")
    slices = world_size // hosts
    return {"devices": slices * config["devices_per_slice"], "slices": slices}


def run_ray(args: argparse.Namespace) -> int:
    """The same checks inside a JaxTrainer with the training job's ScalingConfig (trainer.entrypoint)."""
    import ray
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    from trainer.entrypoint import scaling_kwargs

    full = ray_plan(args)
    ray.init(address=args.ray_address or "auto", logging_level="WARNING")
    trainer = JaxTrainer(
        train_loop_per_worker=_ray_worker,
        train_loop_config=ray_expectation(full),
        scaling_config=ScalingConfig(**scaling_kwargs(full)),
        run_config=RunConfig(name=args.run_name, storage_path=args.storage_path,
                             # A failed check fails at once (no retry until it passes by luck); a preempted
                             # node is not a failed check, so it is retried (Ray 2.60's default, spelled out).
                             failure_config=FailureConfig(max_failures=0, max_preemption_failures=-1)),
    )
    try:
        result = trainer.fit()
    except Exception as err:  # Ray wraps the worker's SmokeFailure in a TrainingFailedError
        return report_ray_failure(err)
    print("SMOKE PASSED " + json.dumps(result.metrics or {}, sort_keys=True), flush=True)
    return 0


def _infrastructure_types() -> tuple[type, ...]:
    """Ray's errors for what happens to the run rather than in the checks: the runtime env not installing,
    placement and scheduling (a worker group that cannot be reserved, started or kept healthy), dead actors and
    nodes. Ray 2.60: ray/exceptions.py, ray/train/v2/_internal/exceptions.py."""
    import ray.exceptions as ray_errors
    from ray.train.v2._internal import exceptions as train_errors

    return (ray_errors.RuntimeEnvSetupError, ray_errors.RayActorError, ray_errors.NodeDiedError,
            ray_errors.ActorUnschedulableError, ray_errors.TaskUnschedulableError,
            ray_errors.ActorPlacementGroupRemoved, ray_errors.TaskPlacementGroupRemoved,
            train_errors.WorkerGroupStartupTimeoutError, train_errors.WorkerGroupStartupFailedError,
            train_errors.InsufficientClusterResourcesError, train_errors.WorkerHealthCheckTimeoutError,
            train_errors.WorkerHealthCheckFailedError)


def infrastructure_error(exc: BaseException) -> BaseException | None:
    """The infrastructure error (`_infrastructure_types`) in `exc` that says why, or None: Ray Train's
    "failed to start" wrappers only when nothing below them names the reason (e.g. the runtime env)."""
    from ray.train.v2._internal import exceptions as train_errors

    kinds = _infrastructure_types()
    found = [item for item in errors_in(exc) if isinstance(item, kinds)]
    wrappers = (train_errors.WorkerGroupStartupFailedError, train_errors.WorkerHealthCheckFailedError)
    return next((item for item in found if not isinstance(item, wrappers)), found[0] if found else None)


def ray_failure_code(exc: BaseException) -> int:
    """Exit code for an error out of the Ray smoke test (module docstring): a not-retryable configuration, import
    or data error first, then a check that failed, then infrastructure, and anything else as a failed check."""
    code = exit_code_of(exc)
    if code in exit_codes.NOT_RETRYABLE:
        return code
    if any(isinstance(item, SmokeFailure) for item in errors_in(exc)):
        return EXIT_FAILED
    if infrastructure_error(exc) is not None:
        return EXIT_INFRASTRUCTURE
    return EXIT_FAILED


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def report_ray_failure(exc: BaseException) -> int:
    code = ray_failure_code(exc)
    if code == EXIT_INFRASTRUCTURE:
        print(f"SMOKE NOT RUN (infrastructure): {_one_line(infrastructure_error(exc))}", file=sys.stderr,
              flush=True)
    elif code == EXIT_FAILED:
        print(f"SMOKE FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    else:
        print(f"SMOKE NOT RUN ({exit_codes.describe(code)}): {_one_line(infrastructure_error(exc) or exc)}",
              file=sys.stderr, flush=True)
    return code


def deadline_seconds(args: argparse.Namespace) -> float | None:
    """Seconds the smoke test may take to a verdict (module docstring), or None for a local run without a
    distributed join."""
    from core.run_bounds import STALL_FLOOR_S
    from core.run_time import STARTUP_ALLOWANCE_S

    if args.deadline is not None:
        return float(args.deadline)
    if args.ray:
        return float(STARTUP_ALLOWANCE_S)
    if args.distributed or args.coordinator:
        return float(args.init_timeout or JAX_INIT_TIMEOUT_S) + STALL_FLOOR_S
    return None


def start_deadline(seconds: float | None) -> threading.Timer | None:
    """Ends the process with EXIT_INFRASTRUCTURE unless it reaches a verdict within `seconds`."""
    if seconds is None:
        return None

    def expire() -> None:
        print(f"SMOKE NOT RUN (infrastructure): no verdict within {seconds:.0f} s (a join or collective that does "
              "not return, or a worker group that never starts)", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_INFRASTRUCTURE)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m trainer.smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-devices", type=int, help="slices x JAX devices per slice (2 per chip on TPU7x)")
    parser.add_argument("--expect-slices", type=int, default=1)
    parser.add_argument("--distributed", action="store_true", help="jax.distributed.initialize() from the env")
    parser.add_argument("--coordinator", help="host:port of process 0 (local multi-process runs)")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--init-timeout", type=int, help="seconds jax.distributed.initialize waits for every "
                        "process (JAX's default: 300)")
    parser.add_argument("--deadline", type=float, metavar="S", help="exit 1 without a verdict after S seconds "
                        "(default: Ray 3600; --distributed: the init timeout + 600; else none)")
    ray_group = parser.add_argument_group("Ray (RayJob driver)")
    ray_group.add_argument("--ray", action="store_true", help="run the checks on the TPU workers via JaxTrainer")
    ray_group.add_argument("--model", default="llama3-8b")
    ray_group.add_argument("--generation", default="v6e")
    ray_group.add_argument("--topology", default="4x4")
    ray_group.add_argument("--slices", type=int, default=1)
    ray_group.add_argument("--elastic", metavar="MIN,MAX", help="elastic run: check the whole slices the group "
                           "gets, at least MIN (as trainer.entrypoint --elastic)")
    ray_group.add_argument("--ray-address")
    ray_group.add_argument("--storage-path", help="Ray Train storage reachable from every node (gs://...)")
    ray_group.add_argument("--run-name", default="multislice-smoke")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.deadline is not None and args.deadline <= 0:
        print(f"smoke: --deadline={args.deadline:g} must be a positive number of seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    timer = start_deadline(deadline_seconds(args))
    try:
        return _run(args)
    finally:
        if timer is not None:
            timer.cancel()


def _run(args: argparse.Namespace) -> int:
    if args.ray:
        from core.errors import PlanError

        try:
            ray_plan(args)
        except PlanError as err:
            print(f"smoke: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return run_ray(args)
    problems = []
    if not args.expect_devices or args.expect_devices < 1:
        problems.append("--expect-devices must be a positive number")
    if args.expect_slices < 1 or (args.expect_devices and args.expect_devices % args.expect_slices):
        problems.append(f"--expect-slices={args.expect_slices} must divide --expect-devices={args.expect_devices}")
    if args.coordinator and (args.num_processes is None or args.process_id is None):
        problems.append("--coordinator needs --num-processes and --process-id")
    if args.init_timeout is not None and args.init_timeout < 1:
        problems.append(f"--init-timeout={args.init_timeout} must be a positive number of seconds")
    if problems:
        print("smoke: " + "; ".join(problems), file=sys.stderr)
        return EXIT_BAD_INPUT
    return run_local(args)


if __name__ == "__main__":
    sys.exit(main())

"""Run the real job here: fake TPU slices, real Ray Train, real MaxText (tiny model, on CPU).

    python -m trainer.local                       # 2 x v6e 2x4 slices, 30 steps, checkpoint every 5
    python -m trainer.local --fail-at 12 --json out.json
    python -m trainer.local --elastic 1,2 --kill-slice-at 12
    python -m trainer.local --elastic 1,2 --start-slices 1 --add-slice-at 8
    python -m trainer.local --checkpoint-period 15 --inject fail@24,preempt@17

It starts a local Ray cluster whose nodes impersonate the TPU hosts (trainer.local.cluster), then runs
`python -m trainer.entrypoint --local-cpu` against it: the same entrypoint, the same use_tpu=True scaling
config. Failures are injected from outside, as they happen on GKE (the "injected failures" options of --help
say what each plays).
Data: synthetic by default; --dataset-type grain --dataset-path FILES trains on files (ArrayRecord or Parquet,
text tokenized with the model's tokenizer, or token ids with --pretokenized; trainer/local/tiny_data.py writes
some), --load-parameters-path starts from saved weights, --trace-data records which records each host read.
Everything it starts (Ray nodes, the driver) is killed on exit, Ctrl-C included; nothing else is touched.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from core import exit_codes
from core.cli_errors import OneLineParser, fit_columns
from trainer import cli, maxtext_runtime, progress
from trainer.entrypoint import EXIT_BAD_INPUT, prepare, scaling_kwargs
from core.errors import PlanError
from trainer import cpu_compile_cache
from trainer.local import logs
from trainer.local.cluster import ClusterStartError, LocalTpuCluster, session_members
from trainer.local.heartbeat import Heartbeat, phase_of
from trainer.local.injections import (AT_GROUP_START, EVENT_KINDS, _events, _hold, _steps, held_notice,
                                      injection_schedule, validate_injections)
from trainer.local.kuberay import KubeRayStandIn
from trainer.worker import SLOW_EVAL_ENV
from core.maxtext_args import pre_train_argv
from core.planner import Plan

LOCAL_DEFAULTS = {"model": "tiny", "generation": "v6e", "topology": "2x4", "slices": 2, "steps": 30,
                  "checkpoint_period": 5}
# Plan flags forwarded verbatim to the entrypoint (dest name -> flag).
_PLAN_FLAGS = ("model", "generation", "topology", "slices", "elastic", "ici_fsdp", "ici_tensor", "dcn_data",
               "dcn_fsdp", "per_device_batch_size", "max_target_length", "remat_policy", "remat_offload",
               "weight_dtype", "attention")
POLL_S = 0.25
# GKE's graceful node shutdown on a Spot notice: regular pods get the first 15 s of the node's 30 s.
GKE_POD_GRACE_S = 15.0


def build_parser() -> argparse.ArgumentParser:
    # Help within 100 columns (OneLineParser caps the width; the raw description is wrapped here): a short usage
    # line (the options follow anyway), the description once, and only the
    # docstring's examples as the epilog (the failure flags it describes are in the option list).
    parser = OneLineParser(prog="python -m trainer.local", usage="%(prog)s [options]",
                           description=textwrap.fill(__doc__.split("\n\n")[0], 99), epilog="examples:\n" + textwrap.dedent(
                               __doc__.split("\n\n")[1]).replace("python -m trainer.local", "  python -m trainer.local"),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_plan_arguments(parser, LOCAL_DEFAULTS)
    cli.add_run_arguments(parser, {**LOCAL_DEFAULTS, "run_name": "local"})
    # What each injected failure plays on GKE is said here only (the module docstring points to --help).
    f = parser.add_argument_group("injected failures", "STEP as MaxText numbers them (0 .. steps-1), STEPS a list "
                                                       "(5,9); each once STEP is done")
    f.add_argument("--fail-at", type=int, metavar="STEP",
                   help="SIGKILL a worker; Ray Train restarts the group in place")
    f.add_argument("--recovery", choices=("retry", "cold"), default="retry",
                   help="cold: --fail-at restarts the driver and cluster too")
    f.add_argument("--kill-slice-at", type=int, metavar="STEP",
                   help="SIGKILL a slice (elastic: go on smaller)")
    f.add_argument("--preempt-slice-at", type=_steps, metavar="STEPS",
                   help="Spot notice(s) to the last slice: SIGTERM to `ray start`")
    f.add_argument("--grace-period", type=float, default=GKE_POD_GRACE_S, metavar="S",
                   help="seconds from notice to SIGKILL, and Ray's drain deadline")
    f.add_argument("--start-slices", type=int, metavar="N", help="elastic: start with N slices")
    f.add_argument("--add-slice-at", type=_steps, metavar="STEPS",
                   help="elastic: the slices KubeRay wants arrive (or come back)")
    f.add_argument("--inject", type=_events, metavar="KIND@STEP,...",
                   help=f"KIND: {', '.join(EVENT_KINDS)} (in order; sigterm: no drain)")
    f.add_argument("--fail-slice-from", type=int, metavar="STEP",
                   help="the last slice's hosts die at each group's first step")
    f.add_argument("--hold-slice", type=_hold, metavar="STEP:S",
                   help="at STEP the last slice goes; back S seconds later (or --inject's preempt@STEP)")
    f.add_argument("--hold-while", metavar="FILE",
                   help="--hold-slice: written once the noticed hosts are gone; held while it exists")
    f.add_argument("--slow-eval", type=float, default=0.0, metavar="S", help="each eval step takes S s more")
    g = parser.add_argument_group("local run")
    g.add_argument("--max-failures", type=int, default=3)
    g.add_argument("--attempts-without-progress", type=int, metavar="N",
                   help="attempts in a row without a new step (default: plan)")
    g.add_argument("--capacity-wait", type=float, metavar="S",
                   help="longest wait with no group running (default: none)")
    g.add_argument("--startup-timeout", type=float, metavar="S", help="the watchdog's start-up allowance")
    g.add_argument("--stall-timeout", type=float, metavar="S", help="the watchdog's stall limit")
    g.add_argument("--resize-interval", type=float, default=5.0, metavar="S", help="elastic: seconds between resize checks")
    g.add_argument("--workdir", help="keep all here (default: temp dir, kept on failure)")
    g.add_argument("--keep", action="store_true",
                   help="keep the work directory after a successful run too")
    g.add_argument("--verbose", action="store_true",
                   help="the driver's whole log (default: progress lines)")
    g.add_argument("--json", dest="json_path", help="write the outcome as JSON here")
    g.add_argument("--compile-cache", default=os.environ.get(cpu_compile_cache.CACHE_ENV) or None, metavar="DIR",
                   help=f"XLA cache the workers share (default: ${cpu_compile_cache.CACHE_ENV})")
    g.add_argument("--trace-data", action="store_true",
                   help="each host's Grain positions, in WORKDIR/data-trace")
    g.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    return parser


def entrypoint_argv(args: argparse.Namespace, address: str, output: Path, progress_dir: Path, run_name: str,
                    checkpoint_period: int) -> list[str]:
    argv = ["--local-cpu", "--ray-address", address, "--run-name", run_name,
            "--base-output-directory", str(output), "--storage-path", str(output / "ray"),
            "--steps", str(args.steps), "--checkpoint-period", str(checkpoint_period),
            "--progress-dir", str(progress_dir), "--max-failures", str(args.max_failures),
            "--resize-interval", str(args.resize_interval)]
    if args.stall_timeout is not None:
        argv += ["--stall-timeout", str(args.stall_timeout)]
    for flag, value in (("--attempts-without-progress", args.attempts_without_progress),
                        ("--capacity-wait", args.capacity_wait), ("--startup-timeout", args.startup_timeout)):
        if value is not None:
            argv += [flag, str(value)]
    for dest in _PLAN_FLAGS:
        value = getattr(args, dest)
        if value is not None:
            argv += [f"--{dest.replace('_', '-')}", str(value)]
    # Run flags the entrypoint reads besides the ones above (the data, and the tokenizer).
    for flag, value in (("--dataset-type", args.dataset_type), ("--dataset-path", args.dataset_path),
                        ("--dataset-format", args.dataset_format), ("--tokenizer-path", args.tokenizer_path),
                        ("--eval-dataset-path", args.eval_dataset_path),
                        ("--load-parameters-path", args.load_parameters_path)):
        if value:
            argv += [flag, value]
    for flag, number in (("--eval-interval", args.eval_interval), ("--eval-steps", args.eval_steps)):
        if number:
            argv += [flag, str(number)]
    if args.pretokenized:
        argv.append("--pretokenized")
    for key, value in args.extra:
        argv += ["--set", f"{key}={value}"]
    return argv


@dataclass
class LocalRun:
    args: argparse.Namespace
    plan: Plan
    workdir: Path
    ray_temp: Path
    driver_argv: list[str]
    cluster: LocalTpuCluster | None = None
    driver: subprocess.Popen | None = None
    # Injected events still to come ((step, kind), injection_schedule); None until the run starts.
    schedule: list | None = None
    in_eval: bool = False
    attempt: str | None = None                  # the latest worker group's attempt id
    printed: set = field(default_factory=set)
    # A preempted slice: when its grace period ends (time.time()), and which slice.
    preempt_deadline: float | None = None
    preempted_slice: int | None = None
    # The worker groups (attempt ids) a notice has already ended: the next notice waits for a group formed after
    # them. Until the group that follows a notice writes its first record, the newest step on record is still the
    # ended group's, with all the slices' workers.
    noticed_attempts: set = field(default_factory=set)
    # --fail-slice-from: the groups (attempt ids) whose slice was already failed; --hold-slice: when the held
    # slice's capacity returns (time.time()), once reclaimed.
    slice_failed_attempts: set = field(default_factory=set)
    held: bool = False
    # --fail-slice-from on an elastic run: the failed slice is away until a group without it trains past this step.
    slice_back_after: int | None = None
    hold_until: float | None = None
    records: list = field(default_factory=list)     # the progress log as last read
    # The worker groups an injected failure ended (a killed worker or slice): the next event waits for the group
    # that replaces them, whose steps start again below the failure's (--inject fail@24,preempt@17).
    failed_attempts: set = field(default_factory=set)
    # The newest group when the last injected event played: KIND@start waits for a group formed after it.
    event_attempt: str | None = None
    # Elastic runs: the stand-in for the API server and KubeRay the driver grows its cluster through, and every
    # JSON patch it took (a cold restart is a new RayJob with a new cluster, so a new stand-in).
    kuberay: KubeRayStandIn | None = None
    kuberay_patches: list = field(default_factory=list)
    kuberay_reported: int = 0
    # Every line the run prints, and what it is doing when nothing happens for a while (trainer/local/heartbeat.py).
    heartbeat: Heartbeat = field(default_factory=lambda: Heartbeat(sys.stdout))
    checkpoint_period: int = 0

    @property
    def progress_dir(self) -> Path:
        return self.workdir / "progress"

    def start_cluster(self) -> None:
        env = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",   # react to failures in 0.2 s, not 2 s (docs/platform-notes.md §5)
               # `ray start` drains its node for this long on SIGTERM (ray/_private/node.py): the node's deadline
               # is the pod's grace period, as on GKE where the kubelet SIGKILLs at its end.
               "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(self.args.grace_period)}
        if self.args.slow_eval:
            env[SLOW_EVAL_ENV] = str(self.args.slow_eval)
        if self.args.compile_cache:
            env[cpu_compile_cache.CACHE_ENV] = str(Path(self.args.compile_cache).resolve())
        if self.args.trace_data:
            (self.workdir / "data-trace").mkdir(exist_ok=True)
            env[maxtext_runtime.DATA_TRACE_ENV] = str(self.workdir / "data-trace")
        slices = self.args.start_slices if self.args.start_slices is not None else self.plan.slices
        self.cluster = LocalTpuCluster(self.plan.shape, slices, self.workdir, self.ray_temp, env)
        if self.plan.elastic:
            # The RayJob's cluster as the stack renders it: the TPU group at the slices that are up.
            self.kuberay = KubeRayStandIn(self.workdir, self.plan.min_slices, self.plan.slices, slices)
            self.kuberay_reported = 0
            self.kuberay.start()
        t0 = time.time()
        self.heartbeat.set_phase(f"starting Ray: head + {slices} x {self.plan.shape.pod_type}")
        self.heartbeat.say(f"starting Ray: head + {slices} x {self.plan.shape.pod_type}")
        self.cluster.start()
        self.heartbeat.say(f"Ray cluster up in {time.time() - t0:.0f}s: head + {slices} x "
                           f"{self.plan.shape.pod_type} ({self.plan.shape.hosts} hosts x "
                           f"{self.plan.shape.chips_per_host} chips each)")

    def start_driver(self) -> None:
        assert self.cluster is not None
        argv = [sys.executable, "-m", "trainer.entrypoint",
                *[a.replace("@ADDRESS@", self.cluster.address) for a in self.driver_argv]]
        log = open(self.workdir / "driver.log", "ab")
        env = {**self.cluster.driver_env(), **(self.kuberay.driver_env() if self.kuberay else {})}
        self.driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       cwd=Path(__file__).resolve().parents[2])
        log.close()

    def kill_driver(self) -> None:
        if self.driver is None:
            return
        for _ in range(50):
            members = session_members(self.driver.pid)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.driver.wait()

    def shutdown(self) -> None:
        self.kill_driver()
        if self.cluster is not None:
            self.cluster.stop()
        if self.kuberay is not None:
            self.kuberay.stop()
            self.kuberay = None

    def report_progress(self, records: list[dict]) -> dict | None:
        last = None
        for rec in records:
            if rec.get("event") == "step":
                last = rec
                key = (rec["attempt"], rec["step"])
                if key not in self.printed:
                    self.printed.add(key)
                    self.heartbeat.say(f"step {rec['step']:>4} of {self.args.steps}  loss {rec['loss']:.4f}  "
                                       f"{rec['step_time_s']:.2f}s/step  workers {rec['workers']}")
            elif rec.get("event") in ("attempt", "model", "failure", "notice", "saved-at-notice", "eval-start"):
                key = (rec["event"], rec["t"])
                if key not in self.printed:
                    self.printed.add(key)
                    self.heartbeat.say(_describe_event(rec))
        return last

    def maybe_end_grace(self) -> None:
        """The kubelet's SIGKILL at the end of the grace period, then (fixed-size runs) the replacement slice;
        a held slice's capacity returns only at the end of the hold, a slice that fails at every start comes back
        once the group without it has trained (maybe_fail_or_hold_slice)."""
        if (self.hold_until is not None and self.preempt_deadline is None and time.time() >= self.hold_until
                and not (self.args.hold_while and Path(self.args.hold_while).exists())):
            self.hold_until = None
            self.heartbeat.say("the held slice's capacity is back")
            self.cluster.add_slice(self.preempted_slice)
        if self.preempt_deadline is None or time.time() < self.preempt_deadline:
            return
        self.preempt_deadline = None
        self.cluster.kill_slice(self.preempted_slice)
        if self.hold_until is not None:
            if self.args.hold_while:
                # From here the run only waits (the notice's save is over, its hosts gone): --hold-while's file
                # says so, and whoever gave it may lengthen the hold: the capacity returns once the file is removed,
                # never sooner than the hold's seconds (the suite makes its next local runs meanwhile:
                # tests/local_runs.py). Written at the notice, it let the next run's start take the cores from
                # the notice's save, which then missed the grace (measured: 2 steps redone).
                Path(self.args.hold_while).write_text(f"held since {time.time():.0f}\n", encoding="utf-8")
            return
        if self.args.fail_slice_from is not None and self.plan.elastic:
            trained = [r["step"] for r in self.records if r.get("event") == "step"]
            self.slice_back_after = max(trained, default=-1)
        elif not self.plan.elastic or self.args.fail_slice_from is not None:
            self.cluster.add_slice(self.preempted_slice)

    def _notice_last_slice(self, kind: str, step: int) -> None:
        """A notice to the last slice: Ray's drain (preempt) or its raylets' SIGTERM with no drain (sigterm)."""
        self._record_failure("preempted" if kind == "preempt" else "sigterm", step)
        self.preempted_slice = self.plan.slices - 1
        if kind == "preempt":
            self.cluster.preempt_slice(self.preempted_slice)
        else:
            self.cluster.sigterm_raylets(self.preempted_slice)
        self.preempt_deadline = time.time() + self.args.grace_period

    def maybe_fail_or_hold_slice(self, records: list[dict], last: dict | None) -> None:
        """--fail-slice-from: a group that has the last slice, once the run passed STEP, loses it in its first
        step. --hold-slice: at STEP the last slice is reclaimed, back after the hold."""
        args = self.args
        if args.hold_slice is not None and not self.held and last is not None and held_notice(args) is None:
            step, seconds = args.hold_slice
            if (last["step"] >= step and self.preempt_deadline is None and not self.in_eval
                    and last.get("workers") == self.plan.workers):
                self._notice_last_slice("preempt", last["step"])
                self._hold_capacity(seconds)
        if args.fail_slice_from is None or self.preempt_deadline is not None:
            return
        if self.slice_back_after is not None:
            # KubeRay recreates the failed replica group's pods, which on GKE take minutes to be scheduled, pull
            # the image and join (ray start), while the minimum restarts in under a minute: the slice comes back
            # once a group without it has reported a step no group trained before, so the minimum trains
            # between the failures, every time (the loop of issue 43 item 2; back at once, the minimum re-formed
            # before a new step and the run ended on the minimum's own count, a resize each time).
            if any(r.get("event") == "step" and r["step"] > self.slice_back_after
                   and r.get("workers", self.plan.workers) < self.plan.workers for r in records):
                self.slice_back_after = None
                self.cluster.add_slice(self.preempted_slice)
            return
        started = any(r.get("event") == "step" and r["step"] >= args.fail_slice_from for r in records)
        newest = _newest_attempt(records)
        if (started and newest is not None and newest.get("workers") == self.plan.workers
                and newest["attempt"] not in self.slice_failed_attempts):
            self.slice_failed_attempts.add(newest["attempt"])
            self._notice_last_slice("sigterm", last["step"] if last else -1)

    def _hold_capacity(self, seconds: float) -> None:
        """The slice just noticed comes back only SECONDS from now (maybe_end_grace returns it)."""
        self.held = True
        self.hold_until = time.time() + seconds
        self.heartbeat.say(f"the last slice's capacity is held away for {seconds:.0f}s"
                           + (" and while the --hold-while file exists" if self.args.hold_while else ""))

    def maybe_inject(self, last: dict | None) -> None:
        """The next injected event, once its step is done and, for the last slice's notices and returns, once the
        slice is in the group (a notice) or gone (a return): each plays on the slice the one before left."""
        self.maybe_end_grace()
        if self.schedule is None:
            self.schedule = injection_schedule(self.args)
        if not self.schedule:
            return
        step, kind = self.schedule[0]
        if step == AT_GROUP_START:
            if self._notice_new_group(kind, last):
                self.event_attempt = self.attempt
                self.schedule.pop(0)
            return
        if last is None:
            return
        if last["step"] < step or last.get("attempt") in self.failed_attempts:
            return
        args = self.args
        if kind in ("preempt", "sigterm"):
            # Not during an eval pass: the group saves at a notice at its next training step, and a pass longer
            # than the grace period would lose the steps since the last checkpoint (as it would on GKE).
            # ... and only to a group that trains on the slice now (not the group the last notice ended).
            if (self.preempt_deadline is not None or last.get("workers") != self.plan.workers or self.in_eval
                    or last.get("attempt") != self.attempt or last.get("attempt") in self.noticed_attempts):
                return
            self.noticed_attempts.add(last.get("attempt"))
            self._notice_last_slice(kind, last["step"])
            if (step, kind) == held_notice(args) and not self.held:
                self._hold_capacity(args.hold_slice[1])
        elif kind == "add":
            first = self.cluster.slice_count()
            if self.preempt_deadline is not None or first >= self.plan.slices:
                return                              # the notice's slice is not gone yet
            # Capacity arrives; only slices whose pods KubeRay created (the cluster wants them) can use it.
            wanted = self.kuberay.desired_slices
            self.heartbeat.say(f"capacity for {self.plan.slices - first} more slice(s) after step "
                               f"{last['step']}; the RayCluster wants {wanted}")
            if wanted > first:
                self._record_failure("slice-added", last["step"])
            for index in range(first, wanted):
                self.cluster.add_slice(index)
        elif kind == "kill-slice":
            self._record_failure("slice-lost", last["step"])
            self.failed_attempts.add(last.get("attempt"))
            victim = self.plan.slices - 1
            self.cluster.kill_slice(victim)
            if not self.plan.elastic:
                self.cluster.add_slice(victim)        # the replacement slice arrives
        elif args.recovery == "cold":
            self._record_failure("cold-restart", last["step"])
            self.shutdown()
            self.start_cluster()
            self.start_driver()
        else:
            # Every rank writes its pid before MaxText starts, and a step only completes with all ranks
            # running. The victim is the last rank of the group training now (after a notice on an elastic run
            # the group is smaller, and the full group's last rank left a file with a stale pid). Each rank has
            # its own attempt id, so a file is the current group's when it was written after every record of
            # the groups before it (they were gone before this group's workers started); else the kill waits.
            info = progress.read_worker(self.progress_dir, int(last.get("workers") or self.plan.workers) - 1)
            older = [r["t"] for r in self.records if r.get("attempt") not in (None, last.get("attempt"))]
            if not info or info.get("t", 0) <= max(older, default=0):
                return
            self._record_failure("worker-killed", last["step"])
            self.failed_attempts.add(last.get("attempt"))
            try:
                os.kill(info["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.event_attempt = self.attempt
        self.schedule.pop(0)

    def _notice_new_group(self, kind: str, last: dict | None) -> bool:
        """KIND@start: the notice to the newest group once it has every slice, was formed after the last event
        and has reported no step yet (it is restoring, compiling or in its first steps); whether it played."""
        newest = _newest_attempt(self.records)
        if (newest is None or self.preempt_deadline is not None or newest.get("workers") != self.plan.workers
                or newest["attempt"] == self.event_attempt or newest["attempt"] in self.noticed_attempts):
            return False
        if any(r.get("event") == "step" and r.get("attempt") == newest["attempt"] for r in self.records):
            return False                    # too late for this group: the next one
        self.noticed_attempts.add(newest["attempt"])
        self.heartbeat.say(f"{kind} notice to attempt {newest['attempt']} before its first step report")
        self._notice_last_slice(kind, last["step"] if last else -1)
        return True

    def report_kuberay(self) -> None:
        """Say when the driver resized its cluster (the PATCHes the stand-in took)."""
        if self.kuberay is None:
            return
        for patch in self.kuberay.patches[self.kuberay_reported:]:
            self.kuberay_reported += 1
            self.kuberay_patches.append(patch)
            replicas = ", ".join(str(op["value"]) for op in patch if op.get("op") == "replace")
            self.heartbeat.say(f"the driver patched its RayCluster (TPU group replicas -> {replicas}); KubeRay "
                               f"now wants {self.kuberay.desired_slices} slice(s)")

    def _record_failure(self, kind: str, step: int) -> None:
        progress.append(self.progress_dir, {"event": "failure", "kind": kind, "at_step": step})

    def run(self) -> int:
        started = time.time()
        self.start_cluster()
        self.start_driver()
        deadline = started + self.args.timeout
        follower = logs.LogFollower(self.workdir / "driver.log") if self.args.verbose else None
        while True:
            for line in follower.new_lines() if follower else ():
                self.heartbeat.say(f"driver| {line}", own_prefix=True)    # a sign of life too
            records = self.records = progress.read(self.progress_dir)
            last = self.report_progress(records)
            self.heartbeat.set_phase(phase_of(records, self.args.steps, self.checkpoint_period))
            self.in_eval = _in_eval(records)
            newest = _newest_attempt(records)
            self.attempt = newest["attempt"] if newest else None
            self.report_kuberay()
            self.maybe_inject(last)
            self.maybe_fail_or_hold_slice(records, last)
            if self.driver.poll() is not None:
                self.report_progress(progress.read(self.progress_dir))
                return self.driver.returncode
            if time.time() > deadline:
                print(f"local: timed out after {self.args.timeout:.0f}s; {_how_far(last, self.args.steps, started)}",
                      file=sys.stderr, flush=True)
                return 1
            time.sleep(POLL_S)


def _how_far(last: dict | None, steps: int, started: float) -> str:
    """Where a run stood when it gave up: the last step done and how long before (a hang, or just slow?)."""
    if last is None:
        return f"no step of {steps} done"
    return f"last step done: {last['step']} of 0..{steps - 1}, {time.time() - last['t']:.0f}s ago " \
           f"({last['t'] - started:.0f}s into the run)"


def _newest_attempt(records: list[dict]) -> dict | None:
    """The newest worker group's attempt record in the progress log, or None before the first group."""
    return next((r for r in reversed(records) if r.get("event") == "attempt"), None)


def _in_eval(records: list[dict]) -> bool:
    """Whether the group is in an eval pass: its last step or eval record is an eval one."""
    kinds = [r.get("event") for r in records if r.get("event") in ("step", "eval-start", "eval-step")]
    return bool(kinds) and kinds[-1] != "step"


def _describe_event(rec: dict) -> str:
    if rec["event"] == "attempt":
        return f"attempt {rec['attempt']}: {rec['workers']} workers ({rec['slices']} slices), maxtext {rec['maxtext_version']}"
    if rec["event"] == "model":
        return f"model check: MaxText built {rec['params']:,} parameters (preset: {rec['expected']:,})"
    if rec["event"] == "notice":
        return f"notice at step {rec['step']}: {rec['reason']}"
    if rec["event"] == "eval-start":
        return f"eval pass after step {rec['after_step']}"
    if rec["event"] == "saved-at-notice":
        return f"checkpoint saved at step {rec['step']} on the notice; the group waits to be replaced"
    return f"injected failure: {rec['kind']} after step {rec['at_step']}"


def outcome(args: argparse.Namespace, plan_: Plan, records: list[dict], wall_s: float, rc: int) -> dict:
    summary = progress.summarize(records, args.steps)
    scaling = scaling_kwargs(plan_)
    workers = scaling["num_workers"]
    return {
        "target_steps": args.steps,
        "steps_completed": summary.steps_completed,
        "reached_target": summary.reached_target,
        "final_loss": summary.final_loss,
        "maxtext_version": summary.maxtext_version or maxtext_runtime.installed_version(),
        "model": plan_.model.name,
        "scaling": {"use_tpu": scaling["use_tpu"], "workers": list(workers) if isinstance(workers, tuple) else workers,
                    "topology": scaling["topology"], "accelerator_type": scaling["accelerator_type"],
                    "resources_per_worker": scaling["resources_per_worker"], "slices": plan_.slices,
                    "min_slices": plan_.min_slices, "workers_final": summary.workers_final},
        "failures": summary.failures_as_dicts(),
        "attempts": summary.attempts,
        "wall_s": round(wall_s, 2),
        "productive_s": round(summary.productive_s, 2),
        "goodput": round(summary.productive_s / wall_s, 4) if wall_s > 0 else 0.0,
        "driver_exit_code": rc,
        # Every logged step of every attempt, so a resumed run's losses can be compared with another run's.
        "step_losses": [{"step": r["step"], "loss": r["loss"], "attempt": r["attempt"]}
                        for r in records if r.get("event") == "step"],
    }


def print_table(result: dict) -> None:
    rows = [("steps", f"{result['steps_completed']}/{result['target_steps']}"),
            ("final loss", f"{result['final_loss']:.4f}" if result["final_loss"] is not None else "-"),
            ("workers (end)", f"{result['scaling']['workers_final']} of {result['scaling']['workers']}"),
            ("attempts", str(result["attempts"])),
            ("wall", f"{result['wall_s']:.1f}s"),
            ("goodput", f"{result['goodput']:.1%}")]
    for f in result["failures"]:
        rec = "never resumed" if f["recovery_s"] is None else (
            f"back in {f['recovery_s']:.0f}s on {f['workers_after']} workers, {f['steps_redone']} steps redone")
        saved = f", saved at {f['saved_at_notice']}" if f.get("saved_at_notice") is not None else ""
        rows.append((f["kind"], f"after step {f['at_step']}{saved}: {rec}"))
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"  {k:<{width}}  {v}" for k, v in rows), flush=True)


def report_outputs(workdir: Path, run_name: str) -> None:
    """Where the run's checkpoints and logs are (MaxText writes under base_output_directory/run_name)."""
    checkpoints = workdir / "output" / run_name / "checkpoints"
    saved = sorted((p.name for p in checkpoints.iterdir() if p.name.isdigit()), key=int) if checkpoints.is_dir() else []
    steps = f" (steps {', '.join(saved)})" if saved else " (none saved)"
    print(f"local: checkpoints {checkpoints}{steps}", flush=True)
    print(f"local: driver log  {logs.summary(workdir / 'driver.log')}", flush=True)
    print(f"local: Ray nodes   {workdir / 'nodes'}/*.log", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # Validate exactly what the entrypoint will validate, before any process starts.
        checkpoint_period = args.checkpoint_period or LOCAL_DEFAULTS["checkpoint_period"]
        probe = entrypoint_argv(args, "@ADDRESS@", Path("/nonexistent"), Path("/nonexistent"), args.run_name,
                                checkpoint_period)
        _, plan_, run_settings = prepare(probe)
        # The workers' whole MaxText command line too (a --set that clashes with a key the run sets is refused
        # here, not in every worker after the cluster is up).
        pre_train_argv(plan_, run_settings, "base.yml")
        validate_injections(args, plan_)
    except (PlanError, maxtext_runtime.MaxTextVersionError) as err:
        print(fit_columns(f"trainer.local: {err}"), file=sys.stderr)
        return EXIT_BAD_INPUT

    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="tpu-local-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Ray's unix sockets must stay under ~100 characters: a short fresh directory, never a fixed path.
    ray_temp = Path(tempfile.mkdtemp(prefix="r"))
    driver_argv = entrypoint_argv(args, "@ADDRESS@", workdir / "output", workdir / "progress", args.run_name,
                                  checkpoint_period)
    run = LocalRun(args, plan_, workdir, ray_temp, driver_argv, checkpoint_period=checkpoint_period)
    print(textwrap.fill(f"local: {plan_.describe()}", width=100, subsequent_indent="       "), flush=True)
    # A temporary work directory is removed after a run that reaches its target: its path is named only when it
    # is kept (at the end), never printed here to vanish a few lines later.
    print(f"local: work directory {workdir} (driver log: driver.log)" if args.workdir or args.keep else
          "local: work directory: a temporary one, removed when the run reaches its target (--keep keeps it)",
          flush=True)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.time()
    rc = 1
    run.heartbeat.start()
    try:
        rc = run.run()
    except KeyboardInterrupt:
        print("local: interrupted; stopping everything this run started", file=sys.stderr, flush=True)
        rc = 130
    except ClusterStartError as err:
        print(f"local: the local Ray cluster did not start: {err}", file=sys.stderr, flush=True)
        rc = 1
    finally:
        run.heartbeat.set_phase("stopping Ray and the driver")
        run.shutdown()
        run.heartbeat.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    wall_s = time.time() - started
    result = outcome(args, plan_, progress.read(run.progress_dir), wall_s, rc)
    if plan_.elastic:
        result["kuberay_patches"] = run.kuberay_patches
    print_table(result)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(ray_temp, ignore_errors=True)
    removed = not args.workdir and not args.keep and result["reached_target"] and rc == 0
    if removed:
        shutil.rmtree(workdir, ignore_errors=True)
        print("local: removed the temporary work directory, checkpoints and logs (--keep keeps them)", flush=True)
    else:
        report_outputs(workdir, args.run_name)
        print(f"local: kept {workdir}", flush=True)
    ok = rc == 0 and result["reached_target"] and result["final_loss"] is not None and math.isfinite(result["final_loss"])
    print(f"local: {next_step(ok, rc == 130, workdir)}", flush=True)
    return local_exit_code(ok, rc)


def local_exit_code(ok: bool, rc: int) -> int:
    """trainer.local's own exit: 0 when the run reached its target, 130 when interrupted, the driver's own code
    when it ended the run with one of the trainer's (core/exit_codes.py: 7 no progress, 8 interrupted without
    progress, ...), so the command line tells which end it was; 1 otherwise (a timeout, a run that stopped short)."""
    if ok:
        return exit_codes.OK
    if rc == 130 or (rc in exit_codes.NAMES and rc != exit_codes.OK):
        return rc
    return exit_codes.RUNTIME_FAILURE


# The offline plan of the committed cloud stack the local run stands for (README: the quick start's next step).
NEXT_COMMAND = "python -m preview --stack dev"


def next_step(ok: bool, interrupted: bool, workdir: Path) -> str:
    """The run's last line: the command to run next."""
    if ok:
        return f"done. Next, the same job planned for Cloud TPU (offline): {NEXT_COMMAND}"
    if interrupted:
        return "interrupted; run it again with: python -m trainer.local"
    return f"the run did not reach its target; read why in {workdir / 'driver.log'}"


if __name__ == "__main__":
    sys.exit(main())

"""The runs on a shared cluster: `python -m preview.runs --cluster-stack team --stacks team-8b,team-qwen`.

For each run stack: its backend, TPU shape, state (queued, starting, training, waiting for capacity, finished,
failed; cluster gone), since when, what it has cost so far at list prices (preview/prices.py), and the commands
that follow, stop or relaunch it. It reads the stacks' outputs and the cluster's job objects:

- recorded (`--recorded DIR`, and what the tests read): DIR/<stack>.outputs.json as `pulumi stack output --json
  --stack <stack>` prints it, for the cluster stack and each run (a cluster stack without its file is gone), and
  DIR/objects.json as `kubectl get rayjobs.ray.io,jobsets.jobset.x-k8s.io,workloads.kueue.x-k8s.io -A -o json`
  prints it, and DIR/<stack>.checkpoints.txt, when recorded, as `gcloud storage ls RUN/checkpoints/` prints it
  (RUN: the run directory the `run` export names), which gives the step a training run has at least reached;
- live (`--live`): the same commands run here (the Pulumi CLI logged in to the stacks' backend, kubectl on
  the cluster's credentials: the cluster stack's getCredentialsCommand).

States come from Kueue's Workload of the run's job (kueue.x-k8s.io/v1beta2 Workload conditions QuotaReserved,
Admitted, Evicted, Finished) and the job's own status (KubeRay RayJob status.jobStatus / jobDeploymentStatus;
JobSet conditions Completed / Failed). Cost so far: the run's TPU chips at its capacity's list price from its
admission to its end (or now); a queued run has cost nothing.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from core.cli_errors import OneLineParser, fit_columns, refuse
from infra.config import Capacity
from preview import prices
from preview.costs import capacity_usd_per_hour

PROG = "python -m preview.runs"
OBJECT_KINDS = "rayjobs.ray.io,jobsets.jobset.x-k8s.io,workloads.kueue.x-k8s.io"


@dataclass(frozen=True)
class RunRow:
    stack: str
    backend: str
    shape: str
    state: str
    since: str
    cost_usd: float | None
    follow: str
    stop: str
    relaunch: str


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    found = _condition(obj, kind)
    return found if found and found.get("status") == "True" else None


def _in_namespace(objects: list[dict], kind: str, namespace: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind and o["metadata"].get("namespace") == namespace]


def run_state(outputs: Mapping[str, Any], objects: list[dict]) -> tuple[str, datetime | None, datetime | None,
                                                                        datetime | None]:
    """(state, since, admitted at, ended at) of a run from its Workload and its job."""
    namespace = outputs.get("namespace")
    job_kind = "RayJob" if outputs.get("backend") == "rayjob" else "JobSet"
    jobs = _in_namespace(objects, job_kind, namespace)
    if not jobs:
        return "no job (deleted, or not created yet)", None, None, None
    job = jobs[-1]
    workloads = _in_namespace(objects, "Workload", namespace)
    workload = workloads[-1] if workloads else {}
    admitted = _true(workload, "Admitted")
    admitted_at = _time(admitted.get("lastTransitionTime")) if admitted else None
    created = _time(job["metadata"].get("creationTimestamp"))
    status = job.get("status") or {}
    if job_kind == "RayJob":
        ended = _time(status.get("endTime"))
        if status.get("jobStatus") == "SUCCEEDED":
            return "finished", ended, admitted_at, ended
        if status.get("jobStatus") in ("FAILED", "STOPPED") or status.get("jobDeploymentStatus") == "Failed":
            return f"failed ({status.get('reason') or status.get('jobStatus')})", ended, admitted_at, ended
    else:
        for kind, word in (("Completed", "finished"), ("Failed", "failed")):
            if condition := _true(job, kind):
                ended = _time(condition.get("lastTransitionTime"))
                return (word if word == "finished" else f"failed ({condition.get('reason')})"), ended, \
                    admitted_at, ended
    evicted = _true(workload, "Evicted")
    if evicted and not admitted:
        return ("waiting for capacity (pods not ready in time, requeued)",
                _time(evicted.get("lastTransitionTime")), None, None)
    if not admitted:
        waiting = _condition(workload, "QuotaReserved") or {}
        why = f": {waiting['message']}" if waiting.get("message") else ""
        return f"queued{why}", _time(waiting.get("lastTransitionTime")) or created, None, None
    # A JobSet trains once every slice's Job is ready (status.replicatedJobsStatus counts Jobs per replicatedJob).
    running = (status.get("jobDeploymentStatus") == "Running" if job_kind == "RayJob"
               else sum(r.get("ready", 0) for r in status.get("replicatedJobsStatus") or [])
               >= int(outputs.get("slices", 1)))
    if running:
        return "training", _time(status.get("startTime")) or admitted_at, admitted_at, None
    return "starting (slices scaling up from zero)", admitted_at, admitted_at, None


def tpu_usd_per_hour(outputs: Mapping[str, Any]) -> float | None:
    """The run's TPU chips at its capacity's list price (tpuShape `SLICES x GENERATION TOPOLOGY`)."""
    try:
        generation = str(outputs["tpuShape"]).split()[2]
        estimate = prices.hourly_estimate(generation, int(outputs["totalChips"]))
        return capacity_usd_per_hour(estimate, Capacity(outputs.get("capacity", "on-demand")))
    except (KeyError, IndexError, ValueError):
        return None


def run_directory(outputs: Mapping[str, Any]) -> str | None:
    """gs://BUCKET/maxtext/RUN, from the `run` export's first line ("name RUN: gs://..."), where MaxText writes
    checkpoints/STEP/ (core/maxtext_args.py base_output_directory + run_name)."""
    first = str(outputs.get("run") or "").split("\n", 1)[0]
    return first.split(": ", 1)[1].strip() if first.startswith("name ") and ": gs://" in first else None


def last_checkpoint(listing: str | None) -> int | None:
    """The highest STEP of a `gcloud storage ls RUN/checkpoints/` listing (one gs://.../checkpoints/STEP/ a line)."""
    steps = [int(part) for line in (listing or "").splitlines()
             if (part := line.rstrip("/").rsplit("/", 1)[-1]).isdigit()]
    return max(steps) if steps else None


def row(stack: str, outputs: Mapping[str, Any] | None, cluster_up: bool, objects: list[dict],
        now: datetime, checkpoints: Callable[[str, str], str | None] = lambda stack, directory: None) -> RunRow:
    if outputs is None:
        return RunRow(stack, "?", "?", "no outputs: not deployed, or destroyed", "", None, "", "", "")
    commands = dict(follow=str(outputs.get("watchCommand") or outputs.get("logsFollowCommand") or ""),
                    stop=f"pulumi destroy --stack {stack}   # removes the run only",
                    # The command itself names the job's URN (over 100 columns): where to read it instead.
                    relaunch=(f"$(pulumi stack output relaunchCommand --stack {stack})"
                              if outputs.get("relaunchCommand") else ""))
    base = dict(stack=stack, backend=str(outputs.get("backend", "?")), shape=str(outputs.get("tpuShape", "?")))
    if not cluster_up:
        return RunRow(**base, state=f"cluster gone ({outputs.get('clusterStack')} has no outputs)", since="",
                      cost_usd=None, **commands)
    state, since, admitted_at, ended_at = run_state(outputs, objects)
    directory = run_directory(outputs)
    if state == "training" and directory and (step := last_checkpoint(checkpoints(stack, directory))) is not None:
        state = f"training at step {step} or later (its last checkpoint)"
    hourly = tpu_usd_per_hour(outputs)
    cost = 0.0 if admitted_at is None else (
        None if hourly is None else hourly * ((ended_at or now) - admitted_at).total_seconds() / 3600)
    return RunRow(**base, state=state, since=since.strftime("%Y-%m-%d %H:%M UTC") if since else "",
                  cost_usd=cost, **commands)


def list_runs(cluster_stack: str, stacks: list[str], read_outputs: Callable[[str], dict | None],
              read_objects: Callable[[], list[dict]], now: datetime,
              checkpoints: Callable[[str, str], str | None] = lambda stack, directory: None) -> list[RunRow]:
    """checkpoints(stack, run directory): the listing of its checkpoints, or None when not known."""
    cluster = read_outputs(cluster_stack)
    objects = read_objects() if cluster is not None else []
    return [row(stack, read_outputs(stack), cluster is not None, objects, now, checkpoints) for stack in stacks]


def render(rows: list[RunRow], out=sys.stdout) -> None:
    for r in rows:
        cost = "–" if r.cost_usd is None else f"{r.cost_usd:,.2f} USD"
        print(fit_columns(f"{r.stack} [{r.backend}, {r.shape}] {r.state}"
                          + (f" since {r.since}" if r.since else "") + f"; cost so far {cost}"), file=out)
        for word, command in (("follow", r.follow), ("stop", r.stop), ("relaunch", r.relaunch)):
            if command:
                print(fit_columns(f"  {word}: {command}"), file=out)


# ---- where the outputs and objects come from ------------------------------------------------------------------

def recorded_checkpoints(directory: Path) -> Callable[[str, str], str | None]:
    """DIR/STACK.checkpoints.txt: `gcloud storage ls RUN_DIRECTORY/checkpoints/` of the run, when recorded."""
    def listing(stack: str, run_directory: str) -> str | None:
        path = directory / f"{stack}.checkpoints.txt"
        return path.read_text() if path.is_file() else None
    return listing


def live_checkpoints(run: Callable[[list[str]], str]) -> Callable[[str, str], str | None]:
    def listing(stack: str, run_directory: str) -> str | None:
        try:
            return run(["gcloud", "storage", "ls", f"{run_directory}/checkpoints/"])
        except subprocess.CalledProcessError:
            return None
    return listing


def recorded(directory: Path) -> tuple[Callable[[str], dict | None], Callable[[], list[dict]]]:
    def outputs(stack: str) -> dict | None:
        path = directory / f"{stack}.outputs.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def objects() -> list[dict]:
        path = directory / "objects.json"
        return json.loads(path.read_text()).get("items", []) if path.is_file() else []
    return outputs, objects


def live(run: Callable[[list[str]], str]) -> tuple[Callable[[str], dict | None], Callable[[], list[dict]]]:
    """The Pulumi CLI's and kubectl's answers; `run` runs a command and returns its stdout (raises on failure)."""
    def outputs(stack: str) -> dict | None:
        try:
            return json.loads(run(["pulumi", "stack", "output", "--json", "--stack", stack]))
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            return None

    def objects() -> list[dict]:
        return json.loads(run(["kubectl", "get", OBJECT_KINDS, "-A", "-o", "json"])).get("items", [])
    return outputs, objects


def _run_command(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description="List the runs on a shared cluster stack.")
    parser.add_argument("--cluster-stack", required=True, help="the cluster stack (stackRole=cluster)")
    parser.add_argument("--stacks", required=True, help="the run stacks, comma-separated")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--recorded", type=Path, help="a directory of recorded outputs and objects")
    source.add_argument("--live", action="store_true", help="ask the Pulumi CLI and kubectl")
    parser.add_argument("--now", help="the time to count cost to (ISO 8601; default: now)")
    args = parser.parse_args(argv)
    if args.recorded is not None and not args.recorded.is_dir():
        return refuse(PROG, f"--recorded {args.recorded}: not a directory")
    try:
        now = _time(args.now) if args.now else datetime.now(timezone.utc)
    except ValueError:
        return refuse(PROG, f"--now {args.now!r}: not an ISO 8601 time, e.g. 2026-12-01T12:00:00Z")
    read_outputs, read_objects = recorded(args.recorded) if args.recorded else live(_run_command)
    checkpoints = recorded_checkpoints(args.recorded) if args.recorded else live_checkpoints(_run_command)
    stacks = [s for s in args.stacks.split(",") if s]
    render(list_runs(args.cluster_stack, stacks, read_outputs, read_objects, now, checkpoints))
    return 0


if __name__ == "__main__":
    sys.exit(main())

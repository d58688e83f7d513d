"""The run list (preview/runs.py) against recorded stack outputs (the stacks' own exports under mocks) and
recorded cluster objects, shaped as `kubectl get ... -o json` prints them: a training run beside a queued one, a
run that has ended, a failed one, one waiting for capacity, and runs whose cluster is gone."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from preview import runs
from tests.conftest import REPO, committed_stack_run

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
T0 = "2026-12-01T09:00:00Z"            # team-8b admitted
STACKS = ["team-8b", "team-qwen"]


def _meta(kind: str, name: str, namespace: str, created: str = "2026-12-01T08:55:00Z") -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created}}


def _cond(kind: str, status: str, at: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "lastTransitionTime": at, "reason": reason, "message": message}


def ray_job(**status) -> dict:
    return {**_meta("RayJob", "maxtext-train-1", "team-8b"), "status": status}


def jobset(conditions=(), ready: int = 0) -> dict:
    return {**_meta("JobSet", "maxtext-1", "team-qwen"),
            "status": {"conditions": list(conditions), "replicatedJobsStatus": [{"name": "slice", "ready": ready}]}}


def workload(namespace: str, *conditions) -> dict:
    return {**_meta("Workload", f"job-{namespace}", namespace), "status": {"conditions": list(conditions)}}


ADMITTED_8B = workload("team-8b", _cond("QuotaReserved", "True", T0), _cond("Admitted", "True", T0))
QUEUED_QWEN = workload("team-qwen", _cond("QuotaReserved", "False", "2026-12-01T09:30:00Z", "Pending",
                                          "insufficient unused quota for google.com/tpu in flavor tpu-hosts"))


def record(directory: Path, objects: list[dict], cluster: bool = True) -> Path:
    for stack in (["team"] if cluster else []) + STACKS:
        (directory / f"{stack}.outputs.json").write_text(json.dumps(committed_stack_run(stack).outputs))
    (directory / "objects.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return directory


def listed(directory: Path) -> dict[str, runs.RunRow]:
    read_outputs, read_objects = runs.recorded(directory)
    return {r.stack: r for r in runs.list_runs("team", STACKS, read_outputs, read_objects, NOW)}


def test_a_training_run_beside_a_queued_one(tmp_path):
    rows = listed(record(tmp_path, [ray_job(jobDeploymentStatus="Running", startTime="2026-12-01T09:12:00Z"),
                                    ADMITTED_8B, jobset(), QUEUED_QWEN]))
    assert rows["team-8b"].state == "training" and rows["team-8b"].since == "2026-12-01 09:12 UTC"
    # 3 hours of 32 v6e chips on-demand at the list price (preview/prices.py), from admission to now.
    assert rows["team-8b"].cost_usd == pytest.approx(3 * runs.tpu_usd_per_hour(committed_stack_run("team-8b").outputs))
    assert rows["team-8b"].cost_usd == pytest.approx(3 * 86.40)
    assert rows["team-qwen"].state.startswith("queued: insufficient unused quota for google.com/tpu")
    assert rows["team-qwen"].cost_usd == 0.0
    assert committed_stack_run("team-8b").outputs["relaunchCommand"].startswith("pulumi up --stack team-8b")
    assert rows["team-8b"].relaunch == "$(pulumi stack output relaunchCommand --stack team-8b)"
    assert rows["team-qwen"].stop == "pulumi destroy --stack team-qwen   # removes the run only"


def test_a_training_run_is_at_its_last_checkpoints_step_or_later(tmp_path):
    record(tmp_path, [ray_job(jobDeploymentStatus="Running"), ADMITTED_8B, jobset(), QUEUED_QWEN])
    directory = runs.run_directory(committed_stack_run("team-8b").outputs)
    assert directory == "gs://my-tpu-project-team-8b-ckpt/maxtext/team-8b"
    (tmp_path / "team-8b.checkpoints.txt").write_text(
        "".join(f"{directory}/checkpoints/{step}/\n" for step in (50, 100, 1000, 150)))
    read_outputs, read_objects = runs.recorded(tmp_path)
    rows = runs.list_runs("team", STACKS, read_outputs, read_objects, NOW, runs.recorded_checkpoints(tmp_path))
    assert rows[0].state == "training at step 1000 or later (its last checkpoint)"
    assert rows[1].state.startswith("queued")


def test_a_run_that_has_ended_costs_nothing_more(tmp_path):
    rows = listed(record(tmp_path, [
        ray_job(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", endTime="2026-12-01T10:00:00Z"),
        ADMITTED_8B, jobset(ready=1),
        workload("team-qwen", _cond("QuotaReserved", "True", "2026-12-01T10:01:00Z"),
                 _cond("Admitted", "True", "2026-12-01T10:01:00Z"))]))
    assert rows["team-8b"].state == "finished" and rows["team-8b"].cost_usd == pytest.approx(86.40)
    assert rows["team-qwen"].state.startswith("starting")      # 1 of its 2 slices ready
    assert rows["team-qwen"].cost_usd == pytest.approx(
        (NOW - datetime(2026, 12, 1, 10, 1, tzinfo=timezone.utc)).total_seconds() / 3600
        * runs.tpu_usd_per_hour(committed_stack_run("team-qwen").outputs))


def test_a_failed_run_and_one_waiting_for_capacity(tmp_path):
    rows = listed(record(tmp_path, [
        ray_job(jobDeploymentStatus="Initializing"),
        workload("team-8b", _cond("Evicted", "True", "2026-12-01T11:00:00Z", "PodsReadyTimeout"),
                 _cond("Admitted", "False", "2026-12-01T11:00:00Z")),
        jobset([_cond("Failed", "True", "2026-12-01T11:30:00Z", "FailurePolicy")]),
        workload("team-qwen", _cond("Admitted", "True", "2026-12-01T11:00:00Z"))]))
    assert rows["team-8b"].state.startswith("waiting for capacity") and rows["team-8b"].cost_usd == 0.0
    assert rows["team-qwen"].state == "failed (FailurePolicy)" and rows["team-qwen"].since == "2026-12-01 11:30 UTC"


def test_runs_whose_cluster_is_gone(tmp_path):
    rows = listed(record(tmp_path, [ray_job(jobDeploymentStatus="Running"), ADMITTED_8B], cluster=False))
    assert all(r.state.startswith("cluster gone (organization/tpu-multislice/team") for r in rows.values())
    assert all(r.cost_usd is None for r in rows.values())


def test_live_mode_asks_pulumi_and_kubectl_for_the_same_documents(tmp_path):
    record(tmp_path, [ray_job(jobDeploymentStatus="Running"), ADMITTED_8B, jobset(), QUEUED_QWEN])
    asked = []

    def run(argv: list[str]) -> str:
        asked.append(argv)
        if argv[0] == "pulumi":
            return (tmp_path / f"{argv[-1]}.outputs.json").read_text()
        return (tmp_path / "objects.json").read_text()
    read_outputs, read_objects = runs.live(run)
    live_rows = runs.list_runs("team", STACKS, read_outputs, read_objects, NOW,
                               runs.live_checkpoints(lambda argv: asked.append(argv) or ""))
    assert live_rows == list(listed(tmp_path).values())
    assert ["gcloud", "storage", "ls", "gs://my-tpu-project-team-8b-ckpt/maxtext/team-8b/checkpoints/"] in asked
    assert ["pulumi", "stack", "output", "--json", "--stack", "team-8b"] in asked
    assert ["kubectl", "get", runs.OBJECT_KINDS, "-A", "-o", "json"] in asked


def test_the_command_prints_each_run_within_100_columns(tmp_path):
    record(tmp_path, [ray_job(jobDeploymentStatus="Running"), ADMITTED_8B, jobset(), QUEUED_QWEN])
    proc = subprocess.run([sys.executable, "-m", "preview.runs", "--cluster-stack", "team", "--stacks",
                           ",".join(STACKS), "--recorded", str(tmp_path), "--now", "2026-12-01T12:00:00Z"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("team-8b [rayjob, 2 x v6e 4x4] training") and "259.20 USD" in lines[0]
    assert any(line.startswith("team-qwen [jobset, 2 x v6e 2x4] queued") for line in lines)
    assert all(len(line) <= 100 for line in lines)

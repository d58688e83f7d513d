"""What runs in the Ray pods' containers: the submitter's own command, and `ray start` exec'd explicitly.

Both rely on KubeRay v1.7.0 keeping a container's own command (ray-project/kuberay, ray-operator/controllers/ray):
- submitter: rayjob_controller.go `configureSubmitterContainer` builds its default command only when
  `len(container.Command) == 0` (K8sJobMode), and adds RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID (and
  RAY_AUTH_MODE/RAY_AUTH_TOKEN with token auth, common/pod.go `SetContainerTokenAuthEnvVars`);
- head and workers: common/pod.go `BuildPod` replaces the command with `/bin/bash -c -- "ulimit ...; ray start"`
  unless the pod template carries `ray.io/overwrite-container-cmd: "true"`, and always sets
  KUBERAY_GEN_RAY_START_CMD to the generated `ray start ...` (`setContainerEnvVars`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.bundle import load_bundle
from workloads.common import CODE_MOUNT
from workloads.ray import manifests
from workloads.ray.component import ray_objects


@pytest.fixture(scope="module")
def job() -> dict:
    return ray_objects(build(load_stack_config("dev", REPO)), load_bundle())["ray-job"]


def ray_groups(job: dict) -> list[dict]:
    spec = job["spec"]["rayClusterSpec"]
    return [spec["headGroupSpec"], *spec["workerGroupSpecs"]]


# ---- the submitter -----------------------------------------------------------------------------------------

def test_the_submitter_pod_runs_the_shipped_submitter_with_the_jobs_entrypoint_and_runtime_env(job):
    spec = job["spec"]
    pod = spec["submitterPodTemplate"]["spec"]
    container = pod["containers"][0]    # KubeRay configures Containers[utils.RayContainerIndex] (0)
    assert spec["submissionMode"] == "K8sJobMode" and container["name"] == "ray-job-submitter"
    command = container["command"]
    assert command[:3] == ["python", "-m", "trainer.submitter"]   # non-empty: KubeRay keeps it
    # Run from the mounted code: the module is there, and it is what the job uploads as its working_dir.
    assert container["workingDir"] == CODE_MOUNT == container["volumeMounts"][0]["mountPath"]
    assert "trainer/submitter.py" in {item["path"] for item in pod["volumes"][0]["configMap"]["items"]}
    # The same job as the RayJob spec shows.
    assert command[command.index("--entrypoint") + 1] == spec["entrypoint"]
    runtime_env = json.loads(command[command.index("--runtime-env-json") + 1])
    assert runtime_env == yaml.safe_load(spec["runtimeEnvYAML"]) and runtime_env["working_dir"] == CODE_MOUNT
    # The address and the id come from KubeRay's environment, never from the manifest.
    assert "--address" not in command and "--submission-id" not in command


def test_the_submitter_reads_kuberays_environment(monkeypatch):
    from trainer import submitter

    monkeypatch.setenv("RAY_DASHBOARD_ADDRESS", "job-head-svc.ns.svc.cluster.local:8265")
    monkeypatch.setenv("RAY_JOB_SUBMISSION_ID", "rayjob-abc-xyz")
    args = submitter.build_parser().parse_args(["--entrypoint", "python -m trainer.entrypoint"])
    assert (args.address, args.submission_id) == ("job-head-svc.ns.svc.cluster.local:8265", "rayjob-abc-xyz")


# ---- ray start: the container's main process, by an explicit exec ---------------------------------------

def test_every_ray_container_overrides_kuberays_command_and_execs_the_generated_ray_start(job):
    for group in ray_groups(job):
        template = group["template"]
        assert template["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
        container = template["spec"]["containers"][0]
        assert container["command"] == ["/bin/bash", "-c", "--"]
        assert "exec $KUBERAY_GEN_RAY_START_CMD" in container["args"][0]
        # KubeRay skips its own command only for the annotation, not for a command without "ray start".
        assert "ray start" not in container["args"][0]
    # The head keeps its GCS FUSE annotation next to the new one.
    assert ray_groups(job)[0]["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"


def kuberay_ray_start_command(group: dict, head: bool) -> str:
    """KUBERAY_GEN_RAY_START_CMD for a group, as common/pod.go builds it: `setMissingRayStartParams` (address on
    workers, metrics-export-port, block, dashboard-agent-listen-port), `generateRayStartCommand` (num-cpus and
    memory from the limits, `addWellKnownAcceleratorResources`: google.com/tpu -> resources='{"TPU":N}', single
    quotes included) and `convertParamMap` (sorted, ` --key=value `, `true` as a bare flag)."""
    params = dict(group["rayStartParams"])
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    if not head:
        params.setdefault("address", "job-head-svc.ns.svc.cluster.local:6379")
    params.setdefault("metrics-export-port", "8080")
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", "52365")
    params.setdefault("num-cpus", str(int(float(limits["cpu"]))))
    params.setdefault("memory", "1000000")   # a byte count; its value does not matter here
    if "google.com/tpu" in limits:
        params["resources"] = "'" + json.dumps({"TPU": int(limits["google.com/tpu"])}, separators=(",", ":")) + "'"
    flags = "".join(f" --{key} " if value == "true" else f" --{key}={value} " for key, value in sorted(params.items()))
    return ("ray start --head " if head else "ray start ") + flags


FAKE_RAY = textwrap.dedent("""\
    import json, os, resource, signal, sys, time
    def record(**item):
        with open(os.environ["FAKE_RAY_OUT"], "a") as out:
            out.write(json.dumps(item) + "\\n")
    def on_term(*_):
        record(signal="SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    record(pid=os.getpid(), argv=sys.argv[1:], nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    time.sleep(60)
    """)


def start_container(tmp_path: Path, command: list[str], generated: str) -> tuple[subprocess.Popen, Path]:
    """Run the container's command as the kubelet would (its first process), with a `ray` that records how it
    was started and whether SIGTERM reached it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "ray"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_RAY)
    fake.chmod(0o755)
    out = tmp_path / "ray-calls.jsonl"
    out.unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_RAY_OUT": str(out),
           "KUBERAY_GEN_RAY_START_CMD": generated,
           # KubeRay's override of the open-files limit, kept by the pinned command; below this machine's hard cap.
           "RAY_START_ULIMIT_OPEN_FILES": "1024"}
    process = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 20
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        assert process.poll() is None, "the container exited before ray started"
        time.sleep(0.05)
    return process, out


def calls(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("which", ["head", "tpu-worker"])
def test_sigterm_to_the_container_reaches_ray_start_with_kuberays_arguments_intact(job, tmp_path, which):
    group = ray_groups(job)[0 if which == "head" else 1]
    container = group["template"]["spec"]["containers"][0]
    generated = kuberay_ray_start_command(group, head=which == "head")
    process, out = start_container(tmp_path, container["command"] + container["args"], generated)
    try:
        [started] = calls(out)
        # exec: `ray start` is the container's first process itself, so the kubelet's SIGTERM is its own.
        assert started["pid"] == process.pid
        assert started["nofile"] == 1024
        assert started["argv"][0] == "start" and "--block" in started["argv"]
        if which == "tpu-worker":
            # The shell's quoting undone, as in KubeRay's own `bash -c`: Ray parses this flag as JSON.
            [resources] = [a for a in started["argv"] if a.startswith("--resources=")]
            assert json.loads(resources.split("=", 1)[1]) == {"TPU": 4}
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert calls(out)[-1] == {"signal": "SIGTERM"}
    finally:
        if process.poll() is None:
            process.kill()


def test_the_samples_bare_expansion_would_hand_ray_start_the_quotes(job, tmp_path):
    """Why RAY_START_ARGS evaluates the generated command: KubeRay's sample args
    (`...; $KUBERAY_GEN_RAY_START_CMD`, ray-cluster.overwrite-command.yaml) pass `'{"TPU":4}'` quotes and all."""
    group = ray_groups(job)[1]
    process, out = start_container(tmp_path, ["/bin/bash", "-c", "--", "exec $KUBERAY_GEN_RAY_START_CMD"],
                                   kuberay_ray_start_command(group, head=False))
    try:
        [resources] = [a for a in calls(out)[0]["argv"] if a.startswith("--resources=")]
        with pytest.raises(json.JSONDecodeError):
            json.loads(resources.split("=", 1)[1])
    finally:
        process.kill()
        process.wait(10)

"""A committed stack's pods install nothing at start: every slice scales from zero (warmSlices 0), so every run
start, grow and Spot replacement is a cold node, and the default worker image holds the locked environment.

Read on the manifests the program registers (under Pulumi mocks), not on a function's output: every pod template
of the training job (the Ray head, the TPU worker groups and the submitter; the JobSet's pods) runs the stack's
own image, and nothing in what they run (the commands, the RayJob's entrypoint and runtime environment) installs
a package. Ray installs a runtime environment's `pip`, `uv` and `conda` fields before a worker starts
(ray/_private/runtime_env/{pip,uv,conda}.py, Ray 2.60); the image makes the runtime environment carry the code's
working directory alone. Pathways runs its own images (pathwaysTrainerImage) and installs nothing either.
"""
from __future__ import annotations

import re
from typing import Any, Iterator

import pytest
import yaml

from infra.config import build
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO, committed_stack_run

# What a start-up install looks like in a command: pip or uv installing, or a conda environment made.
INSTALLS = re.compile(r"\bpip3? install\b|\buv (pip|sync|add)\b|\bconda (install|create|env)\b")
RUNTIME_ENV_INSTALLS = ("pip", "uv", "conda", "py_executable", "image_uri", "container")
WORKER_STACKS = [s for s in COMMITTED_STACKS
                 if load_stack_config(s, REPO).get("workloadBackend", "rayjob") in ("rayjob", "jobset")]


def pod_specs(value: Any) -> Iterator[dict]:
    """Every pod spec in a manifest: any mapping with `containers`, at any depth."""
    if isinstance(value, dict):
        if "containers" in value:
            yield value
        for child in value.values():
            yield from pod_specs(child)
    elif isinstance(value, list):
        for child in value:
            yield from pod_specs(child)


def what_runs(pod: dict) -> list[str]:
    return [" ".join([*c.get("command", []), *c.get("args", [])])
            for c in [*pod.get("initContainers", []), *pod["containers"]]]


@pytest.mark.parametrize("stack", WORKER_STACKS)
def test_the_committed_stacks_pods_run_the_built_image_and_install_nothing(stack):
    config = build(load_stack_config(stack, REPO))
    # Every slice pool scales from zero: each start is a cold node, which is why the image is the default.
    assert all(config.tpu.pool_bounds(i)[0] == 0 for i in range(config.tpu.slices))
    assert config.workload.worker_environment == "image"
    run = committed_stack_run(stack)
    [build_step] = run.of_type("command:local:Command")
    [image] = build_step.inputs["triggers"]
    objects = [object_from_inputs(r.inputs, r.name) for r in run.resources if is_kubernetes_type(r.type)]
    jobs = [o for o in objects if o["kind"] in ("RayJob", "JobSet")]
    assert len(jobs) == 1
    pods = list(pod_specs(jobs[0]))
    # Ray: the head, the TPU worker group and the submitter; JobSet: the slice's pods.
    assert len(pods) >= (3 if jobs[0]["kind"] == "RayJob" else 1)
    for pod in pods:
        assert {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]} == {image}
        assert "install-cache" not in {v["name"] for v in pod.get("volumes", [])}
        for command in what_runs(pod):
            assert not INSTALLS.search(command), command
    spec = jobs[0]["spec"]
    if jobs[0]["kind"] == "RayJob":
        assert not INSTALLS.search(spec["entrypoint"]), spec["entrypoint"]
        runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
        assert not set(runtime_env) & set(RUNTIME_ENV_INSTALLS), runtime_env
    # Nor does the lock travel to the pods: the image has it.
    for config_map in (o for o in objects if o["kind"] == "ConfigMap"):
        assert not any("requirements" in key for key in config_map.get("data", {})), config_map["metadata"]["name"]


def test_the_check_sees_an_install():
    """The same check on the runtime install (workerEnvironment: runtime) finds what each backend installs."""
    from workloads.bundle import load_bundle
    from workloads.jobset.spec import jobset_objects
    from workloads.ray.component import ray_objects
    ray = ray_objects(build({**load_stack_config("prod", REPO), "workerEnvironment": "runtime"}), load_bundle())
    assert set(yaml.safe_load(ray["ray-job"]["spec"]["runtimeEnvYAML"])) & set(RUNTIME_ENV_INSTALLS)
    jobset = jobset_objects(build({**load_stack_config("jobset", REPO), "workerEnvironment": "runtime"}),
                            load_bundle())
    assert any(INSTALLS.search(command) for pod in pod_specs(jobset["jobset"]) for command in what_runs(pod))

"""Every job object and pod of a run carries the run's name (workloads/common.py RUN_LABEL), and the stack's Cloud
Logging link selects the run by it, on every backend.

Cloud Logging keeps a GKE pod's labels on its containers' entries as `labels."k8s-pod/<key>"` (the prefix Google's
logging agents use; e.g. https://pkg.go.dev/m4o.io/gslog/k8s PodPrefix "k8s-pod/", "the Google Cloud Logging
conventions for Kubernetes Pod labels"); the run label's key has no dots, so no other rewriting applies."""
from __future__ import annotations

from urllib.parse import unquote

import pytest

from infra.config import build
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.rules import pod_sites
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO, committed_stack_run
from workloads.common import RUN_LABEL

RUN_KINDS = ("RayJob", "JobSet")


def _objects(run) -> list[dict]:
    return [object_from_inputs(r.inputs, r.name) for r in run.resources if is_kubernetes_type(r.type)]


def _labelled(objects: list[dict], run_name: str) -> None:
    jobs = [obj for obj in objects if obj["kind"] in RUN_KINDS]
    assert jobs
    for obj in jobs:
        assert obj["metadata"]["labels"][RUN_LABEL] == run_name, obj["metadata"]["name"]
        sites = list(pod_sites(obj))
        assert sites
        for site in sites:
            assert site.template["metadata"]["labels"][RUN_LABEL] == run_name, (obj["metadata"]["name"], site.path)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_every_job_and_pod_of_a_committed_stack_carries_its_run(stack):
    config = build(load_stack_config(stack, REPO))
    run = committed_stack_run(stack)
    _labelled(_objects(run), config.workload.run.run_name)
    query = unquote(run.outputs["consoleLogsUrl"])
    assert f'labels."k8s-pod/tpu-multislice/run"="{config.workload.run.run_name}"' in query
    # The run's pods, from nextSteps as from their own export.
    command = f"kubectl get pods -n tpu-training -l tpu-multislice/run={config.workload.run.run_name} -o wide"
    assert run.outputs["runPodsCommand"] == command and command in run.outputs["nextSteps"]


@pytest.mark.parametrize("stack", ["dev", "jobset", "pathways"])
def test_a_run_name_the_user_sets_labels_the_run_and_its_logs(stack):
    raw = {**load_stack_config(stack, REPO), "runName": "c4-v1"}
    run = run_program(raw, stack=stack)
    _labelled(_objects(run), "c4-v1")
    assert 'labels."k8s-pod/tpu-multislice/run"="c4-v1"' in unquote(run.outputs["consoleLogsUrl"])

"""Every job object and pod of a run carries the run's name (workloads/common.py RUN_LABEL), and the stack's Cloud
Logging link selects the run by it, on every backend.

Cloud Logging keeps a GKE pod's labels on its containers' entries as `labels."k8s-pod/<key>"` (the prefix Google's
logging agents use; e.g. https://pkg.go.dev/m4o.io/gslog/k8s PodPrefix "k8s-pod/", "the Google Cloud Logging
conventions for Kubernetes Pod labels"); the run label's key has no dots, so no other rewriting applies."""
from __future__ import annotations

from urllib.parse import unquote

import pytest

from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.rules import pod_sites
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO, STACKS_WITH_A_RUN, build_stack, committed_stack_run
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


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)     # a run stack on a shared cluster too
def test_every_job_and_pod_of_a_committed_stack_carries_its_run(stack):
    config = build_stack(stack)
    run = committed_stack_run(stack)
    _labelled(_objects(run), config.workload.run.run_name)
    query = unquote(run.outputs["consoleLogsUrl"])
    assert f'labels."k8s-pod/tpu-multislice/run"="{config.workload.run.run_name}"' in query
    # The run's pods, from nextSteps as from their own export.
    command = (f"kubectl get pods -n {config.kubernetes.namespace} -l tpu-multislice/run="
               f"{config.workload.run.run_name} -o wide")
    assert run.outputs["runPodsCommand"] == command and command in run.outputs["nextSteps"]


@pytest.mark.parametrize("stack", ["dev", "jobset", "pathways"])
def test_a_run_name_the_user_sets_labels_the_run_and_its_logs(stack):
    raw = {**load_stack_config(stack, REPO), "runName": "c4-v1"}
    run = run_program(raw, stack=stack)
    _labelled(_objects(run), "c4-v1")
    assert 'labels."k8s-pod/tpu-multislice/run"="c4-v1"' in unquote(run.outputs["consoleLogsUrl"])


def test_the_longest_derived_run_name_is_a_label_value():
    """Unset runName is the job prefix and the model (infra/config/data_rules.py default_run_name); at their longest
    it is still a Kubernetes label value: at most 63 characters, alphanumeric at both ends, [-._a-zA-Z0-9] between
    (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set)."""
    import re

    from core.presets import PRESETS
    from infra import naming

    value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    prefixes = {"rayJobName": naming.RAYJOB_NAME_MAX - naming.HASH_SUFFIX, "jobsetName": naming.JOBSET_PREFIX_MAX,
                "pathwaysJobName": naming.PATHWAYS_NAME_MAX}
    backends = {"rayJobName": "rayjob", "jobsetName": "jobset", "pathwaysJobName": "pathways"}
    from infra.config.data_rules import default_run_name

    model = max((name for name, p in PRESETS.items() if not p.cpu_only), key=len)
    for key, length in prefixes.items():
        v = {"runName": None, "workloadBackend": backends[key], "model": model, **{k: None for k in prefixes},
             key: "r" * length}
        name = default_run_name(v)
        assert name is not None and len(name) <= 63 and value.match(name), name

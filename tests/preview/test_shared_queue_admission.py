"""Two runs on one shared cluster against Kueue's admission rules (preview/k8s/kueue_admission.py, played from
kubernetes-sigs/kueue v0.19.2): the team cluster's ClusterQueue and the team-8b RayJob and team-qwen JobSet as
their stacks render them under mocks."""
from __future__ import annotations

import pytest

from infra.config import build
from preview.k8s.kueue_admission import Queue, pod_sets, workload_requests
from preview.stack_files import load_stack_config
from tests.conftest import REPO, build_stack, committed_stack_run
from workloads import shared_queue

TPU = "google.com/tpu"


def _inputs(stack: str, token: str) -> dict:
    return committed_stack_run(stack).one(token).inputs


def _run(stack: str) -> tuple[dict, dict, dict]:
    """(the run's job, its LocalQueue, its namespace's labels)."""
    token = {"rayjob": "kubernetes:ray.io/v1:RayJob", "jobset": "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"}[
        build_stack(stack).workload.backend]
    return (_inputs(stack, token), _inputs(stack, "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"),
            _inputs(stack, "kubernetes:core/v1:Namespace")["metadata"]["labels"])


def _queue(tpu_quota: int) -> Queue:
    """The cluster stack's ClusterQueue with another quota (the builder its program uses; the committed one is
    checked to be that builder's output)."""
    cluster = build(load_stack_config("team", REPO), stack="team")
    committed = _inputs("team", "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    assert committed == shared_queue.cluster_queue(cluster.stack.tpu_quota, cluster.cluster.system_pool_machine_type,
                                                   cluster.cluster.system_pool_nodes)
    return Queue(shared_queue.cluster_queue(tpu_quota, cluster.cluster.system_pool_machine_type,
                                            cluster.cluster.system_pool_nodes))


def test_each_run_asks_for_all_of_its_chips_in_one_workload():
    for stack, chips in (("team-8b", 32), ("team-qwen", 16)):
        job, _, _ = _run(stack)
        assert workload_requests(job)[TPU] == chips
    ray_sets = [name for name, _, _ in pod_sets(_run("team-8b")[0])]
    assert ray_sets[0] == "head" and ray_sets[-1] == "submitter"


def test_two_runs_over_the_quota_are_admitted_one_after_the_other_whole():
    """32 chips of quota: team-8b (32) is admitted, team-qwen (16) waits whole, holding nothing; once team-8b
    ends, team-qwen is admitted."""
    queue = _queue(32)
    for stack in ("team-8b", "team-qwen"):
        job, local, labels = _run(stack)
        queue.submit(stack, job, labels, local)
    assert list(queue.admitted) == ["team-8b"] and queue.usage()[TPU] == 32
    [(waiting, requests)] = queue.pending
    assert waiting == "team-qwen" and "google.com/tpu: 32 admitted + 16 asked > quota 32" in queue.why_not(requests)
    queue.finish("team-8b")
    assert list(queue.admitted) == ["team-qwen"] and queue.usage()[TPU] == 16 and queue.pending == []


def test_the_committed_quota_admits_both_runs_at_once():
    queue = _queue(48)
    for stack in ("team-8b", "team-qwen"):
        job, local, labels = _run(stack)
        queue.submit(stack, job, labels, local)
    assert set(queue.admitted) == {"team-8b", "team-qwen"} and queue.usage()[TPU] == 48


def test_a_run_larger_than_the_whole_quota_never_fits():
    queue = _queue(16)
    job, local, labels = _run("team-8b")
    queue.submit("team-8b", job, labels, local)
    assert queue.admitted == {} and "> quota 16" in queue.why_not(queue.pending[0][1])


def test_a_job_outside_the_queue_is_not_admitted():
    job, local, labels = _run("team-qwen")
    with pytest.raises(ValueError, match="namespace not selected"):
        _queue(48).submit("team-qwen", job, {}, local)
    unqueued = {**job, "metadata": {**job["metadata"], "labels": {}}}
    with pytest.raises(ValueError, match="not queued through a LocalQueue"):
        _queue(48).submit("team-qwen", unqueued, labels, local)

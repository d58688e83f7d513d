"""What the JobSet webhook and KubeRay's validation refuse beyond the CRDs (preview/k8s/admission.py).

Each rule is played on an object broken in exactly the way its source refuses, and must refuse it, naming its
source line; every Kubernetes object of every committed stack must pass them all. Sources (at the pinned tags):
kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go (Default, ValidateCreate, validateFailurePolicy,
validateCoordinator, validateCoordinatorLabelValue); ray-project/kuberay v1.7.0
ray-operator/controllers/ray/utils/validation.go (ValidateRayClusterSpec, ValidateRayJobSpec and their helpers).
"""
from __future__ import annotations

import copy

import pytest

from preview.k8s import manifests as k8s_manifests
from preview.k8s.admission import ALL_RULES, check_admission, problems_of
from preview.model import unwrap_secrets
from tests.conftest import STACKS_WITH_A_RUN, committed_stack_run


def good_jobset() -> dict:
    """A JobSet shaped like the stack's Pathways one: a coordinator, a success policy, targeted rules."""
    def rjob(name: str, replicas: int, hosts: int) -> dict:
        return {"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": hosts, "completions": hosts, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "ns"},
            "spec": {"coordinator": {"replicatedJob": "head", "jobIndex": 0, "podIndex": 0},
                     "successPolicy": {"operator": "All", "targetReplicatedJobs": ["head"]},
                     "failurePolicy": {"maxRestarts": 3, "rules": [
                         {"name": "PreemptedOrEvicted", "action": "RestartJobSetAndIgnoreMaxRestarts",
                          "onJobFailureReasons": ["PodFailurePolicy"], "targetReplicatedJobs": ["head"]},
                         {"name": "NotRetryableExit", "action": "FailJobSet",
                          "onJobFailureReasons": ["PodFailurePolicy"]}]},
                     "replicatedJobs": [rjob("head", 1, 1), rjob("worker", 2, 4)]}}


def good_rayjob() -> dict:
    def group(**extra) -> dict:
        return {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray", "image": "i"}]}}, **extra}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train", "namespace": "ns"},
            "spec": {"entrypoint": "python -m x", "shutdownAfterJobFinishes": True, "backoffLimit": 1,
                     "activeDeadlineSeconds": 3600,
                     "rayClusterSpec": {"rayVersion": "2.60.0", "authOptions": {"mode": "token"},
                                        "headGroupSpec": group(),
                                        "workerGroupSpecs": [group(groupName="tpu", replicas=2, minReplicas=2,
                                                                   maxReplicas=2, numOfHosts=4)]}}}


def good_raycluster() -> dict:
    job = good_rayjob()
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": dict(job["metadata"]),
            "spec": job["spec"]["rayClusterSpec"]}


def _rules(obj: dict) -> set[tuple[str, str]]:
    return {(rule.function, rule.source) for rule, _, _ in problems_of(obj)}


def _rule(source_line: str) -> tuple[str, str]:
    (match,) = [(r.function, r.source) for r in ALL_RULES if r.source.endswith(source_line)]
    return match


def _set(path: tuple, value):
    def mutate(obj: dict) -> None:
        target = obj
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


JS = "jobset_webhook.go:"
KR = "validation.go:"
CLUSTER = ("spec", "rayClusterSpec")
WORKER = CLUSTER + ("workerGroupSpecs", 0)
HEAD_ENV = CLUSTER + ("headGroupSpec", "template", "spec", "containers", 0, "env")

# (the rule's source line, the object, how to break it)
CASES = [
    (JS + "172", good_jobset, _set(("spec", "failurePolicy", "restartStrategy"), "InPlaceRestart")),
    (JS + "178", good_jobset, _set(("spec", "replicatedJobs", 0, "dependsOn"), [{"name": "worker",
                                                                                 "status": "Ready"}])),
    (JS + "186", good_jobset, _set(("spec", "network"), {"subdomain": "Not_A_Label"})),
    (JS + "204", good_jobset, _set(("spec", "managedBy"), "no-domain-prefix")),
    (JS + "223", good_jobset, _set(("spec", "replicatedJobs", 1, "replicas"), 2**30)),
    (JS + "228", good_jobset, _set(("spec", "replicatedJobs", 1, "groupName"), "Group_1")),
    (JS + "237", good_jobset, _set(("spec", "replicatedJobs", 1, "name"), "w" * 60)),
    # "<name>-worker-1-3-abcde": a 47-character JobSet name makes the pod name 64 and the Job name 56.
    (JS + "250", good_jobset, _set(("metadata", "name"), "t" * 47)),
    (JS + "259", good_jobset, _set(("spec", "replicatedJobs", 1, "dependsOn"), [{"name": "nowhere",
                                                                                 "status": "Ready"}])),
    (JS + "285", good_jobset, _set(("spec", "successPolicy", "targetReplicatedJobs"), ["nowhere"])),
    (JS + "441", good_jobset, _set(("spec", "failurePolicy", "rules", 1, "action"), "RestartJob")),
    (JS + "446", good_jobset, lambda o: (_set(("spec", "failurePolicy", "rules", 1, "action"),
                                              "RestartJobAndIgnoreMaxRestarts")(o),
                                         _set(("spec", "replicatedJobs", 1, "replicas"), 1025)(o))),
    (JS + "458", good_jobset, _set(("spec", "failurePolicy", "rules", 0, "name"), "A" * 129)),
    # The names the stack used before: refused at create, the CRD only describes the pattern.
    (JS + "465", good_jobset, _set(("spec", "failurePolicy", "rules", 0, "name"), "preempted-or-evicted")),
    (JS + "471", good_jobset, _set(("spec", "failurePolicy", "rules", 0, "targetReplicatedJobs"), ["slice"])),
    (JS + "478", good_jobset, _set(("spec", "failurePolicy", "rules", 1, "onJobFailureReasons"), ["OOMKilled"])),
    (JS + "486", good_jobset, _set(("spec", "failurePolicy", "rules", 1, "name"), "PreemptedOrEvicted")),
    (JS + "500", good_jobset, _set(("spec", "coordinator", "podIndex"), 1)),
    # <name>-head-0-0.<name>: the label value outgrows 63 characters long before any Job or pod name does.
    (JS + "527", good_jobset, _set(("metadata", "name"), "p" * 27)),
    (KR + "534", good_rayjob, _set(("metadata", "name"), "r" * 48)),
    (KR + "33", good_raycluster, _set(("metadata", "name"), "Train")),
    (KR + "104", good_rayjob, _set(CLUSTER + ("headGroupSpec", "template", "spec", "containers"), [])),
    (KR + "108", good_rayjob, _set(WORKER + ("rayStartParams",), {"labels": "a=b"})),
    (KR + "119", good_rayjob, _set(WORKER + ("template", "spec", "containers"), [])),
    (KR + "125", good_rayjob, _set(WORKER + ("minReplicas",), 3)),
    (KR + "1006", good_rayjob, _set(WORKER + ("idleTimeoutSeconds",), 60)),
    (KR + "1113", good_rayjob, _set(WORKER + ("priority",), 5)),
    (KR + "153", good_rayjob, _set(HEAD_ENV, [{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}])),
    (KR + "206", good_rayjob, _set(HEAD_ENV, [{"name": "RAY_enable_autoscaler_v2", "value": "1"}])),
    (KR + "284", good_rayjob, _set(CLUSTER + ("rayVersion",), "2.51.0")),
    (KR + "260", good_rayjob, _set(CLUSTER + ("networkPolicy",), {"mode": "DenyAll"})),
    (KR + "547", good_rayjob, lambda o: o["spec"].update(suspend=True, shutdownAfterJobFinishes=False)),
    (KR + "551", good_rayjob, _set(("spec", "ttlSecondsAfterFinished"), -1)),
    (KR + "771", good_rayjob, _set(("spec", "deletionStrategy"), {"deletionRules": [
        {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED"}}]})),
    (KR + "567", good_rayjob, lambda o: o["spec"].update(clusterSelector={"ray.io/cluster": "c"}, backoffLimit=2)),
    (KR + "587", good_rayjob, _set(("spec", "submissionMode"), "InteractiveMode")),
    (KR + "606", good_rayjob, _set(CLUSTER + ("authOptions", "enableK8sTokenAuth"), True)),
    (KR + "619", good_rayjob, _set(("spec", "preRunningDeadlineSeconds"), 0)),
]


def test_the_good_objects_pass():
    assert _rules(good_jobset()) == set()
    assert _rules(good_rayjob()) == set()
    assert _rules(good_raycluster()) == set()


@pytest.mark.parametrize("line, build, breaks", CASES, ids=[case[0] for case in CASES])
def test_each_rule_refuses_the_object_its_source_refuses(line, build, breaks):
    obj = build()
    breaks(obj)
    refused = _rules(obj)
    assert _rule(line) in refused, refused
    # The refusal names the source line, in the finding the plan prints.
    errors, _ = check_admission([obj])
    assert any(line in finding.message for finding in errors)


def test_every_rule_has_a_case():
    covered = {_rule(line) for line, _, _ in CASES}
    assert covered == {(rule.function, rule.source) for rule in ALL_RULES}


def test_rule_names_are_checked_after_the_mutating_webhooks_defaults():
    """jobset_webhook.go Default (L142-148) names an unnamed rule failurePolicyRule<i> before validation."""
    obj = good_jobset()
    del obj["spec"]["failurePolicy"]["rules"][0]["name"]
    assert _rules(obj) == set()


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)    # the shared cluster has no job to admit
def test_every_committed_stack_passes_admission(stack):
    run = committed_stack_run(stack)
    objects = [k8s_manifests.object_from_inputs(unwrap_secrets(r.inputs), r.name)
               for r in run.resources if k8s_manifests.is_kubernetes_type(r.type)]
    checked = [o for o in objects if o["kind"] in ("JobSet", "RayJob", "RayCluster")]
    assert checked, "the stack renders no object the admission rules apply to"
    errors, notes = check_admission(objects)
    assert errors == []
    assert notes and f"{len(checked)} object(s)" in notes[0]


def test_the_plan_reports_admission_refusals(schemas_dir):
    from preview.k8s.validation import validate_objects
    broken = good_jobset()
    broken["spec"]["failurePolicy"]["rules"][0]["name"] = "not-retryable-exit"
    report = validate_objects([copy.deepcopy(broken)], schemas_dir)
    assert any("validateFailurePolicy" in f.message and f.field_path == "spec.failurePolicy.rules[0].name"
               for f in report.errors)
    assert any(note.startswith("admission:") for note in report.notes)

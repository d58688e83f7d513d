"""CRD CEL validation rules (x-kubernetes-validations) are evaluated offline, on every committed stack's manifests.

Semantics: Kubernetes docs, "Validation rules" (https://kubernetes.io/docs/tasks/extend-kubernetes/
custom-resources/custom-resource-definitions/#validation-rules): `self` is the value at the rule's schema node;
a false rule or an evaluation error rejects the object; rules reading `oldSelf` run on updates only.
CRDs: the shared schema bundle (KubeRay v1.7.0, JobSet v0.12.0, Kueue v0.19.2; see its SOURCES.txt).
"""
from __future__ import annotations

import copy

import cel
import pytest

from preview.k8s import cel_rules
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.validation import default_schemas_dir, validate_objects
from tests.conftest import ALL_STACKS, MINIMAL, committed_stack_run
from preview.harness import run_program

# One expression per standard name the evaluator is trusted with; each must evaluate to true in the package.
PROBES = {
    "size": "size([1, 2]) == 2 && 'ab'.size() == 2", "matches": "'abc'.matches('^a')",
    "contains": "'abc'.contains('b')", "startsWith": "'abc'.startsWith('a')", "endsWith": "'abc'.endsWith('c')",
    "int": "int('3') == 3", "uint": "uint(3) == 3u", "double": "double(1) == 1.0", "string": "string(1) == '1'",
    "bytes": "bytes('a') == b'a'", "type": "type(1) == int", "dyn": "dyn(1) == 1",
    "duration": "duration('1s') < duration('2s')",
    "timestamp": "timestamp('2026-01-01T00:00:00Z') < timestamp('2026-01-02T00:00:00Z')",
}


def objects_of(run) -> list[dict]:
    return [object_from_inputs(r.inputs, r.name) for r in run.resources if is_kubernetes_type(r.type)]


OPERATORS = ("1 - 1 == 0 && 2 * 2 == 4 && 4 / 2 == 2 && 5 % 2 == 1 && -(1) < 0 && 1 != 2 && 1 <= 1 && 2 > 1 && "
             "[1][0] == 1 && 1 in [1] && (true ? 1 : 2) == 1 && 1 + 1 >= 2 && !false && (false || true)")


def test_every_trusted_function_works_in_the_evaluator():
    """The package lacks e.g. bool() (tried: "Undefined variable or function: 'bool'"), so it is not trusted."""
    assert set(PROBES) == cel_rules.STANDARD_FUNCTIONS
    for name, expression in PROBES.items():
        assert cel.evaluate(expression) is True, name
        assert name in cel.compile(expression).functions()
    assert cel.evaluate(OPERATORS) is True
    assert set(cel.compile(OPERATORS).functions()) <= cel_rules.STANDARD_OPERATORS


@pytest.mark.parametrize("stack", ALL_STACKS)     # the shared cluster's queue objects and its runs' too
def test_every_committed_stack_passes_the_rules_it_reaches(stack):
    run = committed_stack_run(stack)
    # A run's objects name its cluster stack's (the ClusterQueue its LocalQueue feeds), as its plan validates them.
    provided = [o for referenced in run.referenced.values() for o in objects_of(referenced)]
    report = validate_objects(objects_of(run), default_schemas_dir(), provided=provided)
    assert report.errors == [], report.errors
    assert report.cel, "no custom resource with CEL rules was checked"
    for kind, counts in report.cel.items():
        assert not counts["not_evaluated"], f"{kind}: {counts['not_evaluated']}"


VARIANTS = {
    "flex-start": {"capacity": "flex-start"},
    "autopilot": {"clusterMode": "autopilot"},
    "tpu7x": {"zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x2", "model": "qwen3-0.6b"},
    "image": {"workerEnvironment": "image"},
    "reservation": {"capacity": "reservation", "reservationName": "tpu-res"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_pass_the_rules_they_reach(variant):
    """On the JobSet backend: its JobSet and Kueue objects carry the rules that apply on create (the RayJob's apply
    only to fields the stack does not set)."""
    run = run_program({**MINIMAL, "workloadBackend": "jobset", **VARIANTS[variant]})
    report = validate_objects(objects_of(run), default_schemas_dir())
    assert report.errors == [], report.errors
    assert all(not counts["not_evaluated"] for counts in report.cel.values()), report.cel


def test_jobset_variants_evaluate_their_rules():
    """The JobSet backend's Kueue ClusterQueue and the JobSet itself carry rules that apply on create."""
    report = validate_objects(objects_of(committed_stack_run("jobset")), default_schemas_dir())
    assert report.cel["ClusterQueue"]["evaluated"] >= 1 and report.cel["JobSet"]["evaluated"] >= 1
    assert "self == oldSelf" in report.cel["JobSet"]["update_only"]


def _jobset_objects() -> list[dict]:
    return copy.deepcopy(objects_of(committed_stack_run("jobset")))


def test_a_cluster_queue_flavor_missing_a_covered_resource_is_caught():
    """kueue v0.19.2 config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml, resourceGroups items:
    `self.flavors.all(x, size(x.resources) == size(self.coveredResources))` (the schema alone allows it)."""
    objects = _jobset_objects()
    [queue] = [o for o in objects if o["kind"] == "ClusterQueue"]
    group = queue["spec"]["resourceGroups"][0]
    assert len(group["coveredResources"]) >= 2
    group["flavors"][0]["resources"].pop()
    report = validate_objects(objects, default_schemas_dir())
    [error] = report.errors
    assert error.object_ref.startswith("ClusterQueue/") and error.field_path == "spec.resourceGroups[0]"
    assert "flavor" in error.message or "coveredResources" in error.message


def test_a_jobset_started_in_order_with_dependencies_is_caught():
    """jobset v0.12.0 config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, spec: `!(has(self.startupPolicy)
    && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))`."""
    run = run_program({**MINIMAL, "workloadBackend": "pathways"})
    objects = objects_of(run)
    [jobset] = [o for o in objects if o["kind"] == "JobSet"]
    assert jobset["spec"]["startupPolicy"]["startupPolicyOrder"] == "InOrder"
    assert validate_objects(objects, default_schemas_dir()).errors == []
    first, second = jobset["spec"]["replicatedJobs"][:2]
    second["dependsOn"] = [{"name": first["name"], "status": "Ready"}]
    report = validate_objects(objects, default_schemas_dir())
    assert [(e.object_ref.split("/")[0], e.field_path) for e in report.errors] == [("JobSet", "spec")]


# ---- the evaluator's edges, on small schemas --------------------------------------------------------------------

def _schema(rule: str, **extra) -> dict:
    return {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": [{"rule": rule, "message": "broken", **extra}],
        "properties": {"items": {"type": "array", "items": {"type": "string"}}, "name": {"type": "string"}}}}}


def test_a_kubernetes_only_function_is_counted_not_passed():
    outcome = cel_rules.evaluate({"spec": {"name": "Abc"}}, _schema("self.name.lowerAscii() == self.name"))
    assert outcome.failures == [] and outcome.evaluated == 0
    assert "lowerAscii" in outcome.not_evaluated["self.name.lowerAscii() == self.name"]
    outcome = cel_rules.evaluate({"spec": {"items": ["b", "a"]}}, _schema("self.items.isSorted()"))
    assert list(outcome.not_evaluated) == ["self.items.isSorted()"]


def test_transition_rules_wait_for_updates_and_optional_old_self_is_not_evaluated():
    outcome = cel_rules.evaluate({"spec": {"name": "a"}}, _schema("self == oldSelf"))
    assert outcome.update_only == {"self == oldSelf"} and outcome.evaluated == 0
    outcome = cel_rules.evaluate({"spec": {"name": "a"}}, _schema("!oldSelf.hasValue()", optionalOldSelf=True))
    assert "optionalOldSelf" in outcome.not_evaluated["!oldSelf.hasValue()"]


def test_false_rules_and_evaluation_errors_are_failures_at_the_rule_s_field():
    schema = _schema("size(self.items) <= 1", fieldPath=".items")
    assert cel_rules.evaluate({"spec": {"items": ["a"]}}, schema).failures == []
    assert cel_rules.evaluate({"spec": {"items": ["a", "b"]}}, schema).failures == [("spec.items", "broken")]
    [(where, message)] = cel_rules.evaluate({"spec": {"name": "a"}}, schema).failures   # no such key
    assert where == "spec.items" and "could not be evaluated" in message
    # A rule on a field the object does not set does not run.
    assert cel_rules.evaluate({}, schema).evaluated == 0

"""An elastic Ray run starts on its minimum slices and grows to all of them, against KubeRay's own rules.

KubeRay v1.7.0 (ray-project/kuberay, tag v1.7.0), the rules played here:
- ray-operator/controllers/ray/rayjob_controller.go `Reconcile`, case JobDeploymentStatusInitializing: the job is
  submitted (the submitter Job created, the RayJob turned Running) only when `rayClusterInstance.Status.State ==
  rayv1.Ready`; case JobDeploymentStatusRunning reads the submitter and the Ray job's status, never the cluster's
  state again. `getOrCreateRayClusterInstance`: a RayCluster that exists is not changed back to rayClusterSpec
  ("Disregard changes in RayClusterSpec of RayJob").
- ray-operator/controllers/ray/raycluster_controller.go `calculateStatus`: State = Ready when there was no
  reconcile error, the cluster's pods number DesiredWorkerReplicas + 1 (the head) and `CheckAllPodsRunning`.
- ray-operator/controllers/ray/utils/util.go `GetWorkerGroupDesiredReplicas` (replicas clamped to [minReplicas,
  maxReplicas], times numOfHosts; 0 when suspended), `CalculateDesiredReplicas` (sum over groups),
  `CheckAllPodsRunning` (no pods: false; every pod phase Running and its Ready condition, if any, True).
- common/pod.go: every Ray container gets RAY_CLUSTER_NAME (from the pod's ray.io/cluster label) and
  RAY_CLUSTER_NAMESPACE, which trainer/grow.py reads.
Kubernetes RBAC (https://kubernetes.io/docs/reference/access-authn-authz/rbac/): a request is allowed when a rule of
a Role bound to the subject in the request's namespace lists its API group, resource and verb (and, if the rule has
resourceNames, its name); a PATCH request is the verb `patch`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from core.ray_cluster import TPU_WORKER_GROUP, grow_patch, raycluster_path
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from trainer.local.kuberay import PatchError, apply_json_patch
from workloads.bundle import load_bundle
from workloads.ray.component import ray_objects

INT32_MAX = 2**31 - 1


# ---- KubeRay v1.7.0, as its sources say ------------------------------------------------------------------

def group_desired_pods(group: dict) -> int:
    """utils.GetWorkerGroupDesiredReplicas."""
    if group.get("suspend"):
        return 0
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", INT32_MAX)
    replicas = group.get("replicas")
    if replicas is None or replicas < low:
        count = low
    elif replicas > high:
        count = high
    else:
        count = replicas
    return count * group["numOfHosts"]


def desired_worker_pods(cluster_spec: dict) -> int:
    """utils.CalculateDesiredReplicas."""
    return sum(group_desired_pods(g) for g in cluster_spec["workerGroupSpecs"])


@dataclass
class Pod:
    phase: str = "Running"
    ready: bool = True


def check_all_pods_running(pods: list[Pod]) -> bool:
    """utils.CheckAllPodsRunning."""
    return bool(pods) and all(p.phase == "Running" and p.ready for p in pods)


def cluster_ready(cluster_spec: dict, pods: list[Pod]) -> bool:
    """raycluster_controller.go calculateStatus: State = Ready."""
    return len(pods) == desired_worker_pods(cluster_spec) + 1 and check_all_pods_running(pods)


def rayjob_submits(cluster_spec: dict, pods: list[Pod]) -> bool:
    """rayjob_controller.go Initializing: submit only on a Ready cluster."""
    return cluster_ready(cluster_spec, pods)


def pods_up(slices: int, hosts: int) -> list[Pod]:
    """The head and `slices` whole slices' pods, Running and Ready."""
    return [Pod()] + [Pod() for _ in range(slices * hosts)]


def rbac_allows(roles: list[dict], bindings: list[dict], *, service_account: str, namespace: str, verb: str,
                group: str, resource: str) -> bool:
    """Kubernetes RBAC for a namespaced request by a service account (Roles only; no ClusterRole is involved)."""
    for binding in bindings:
        if binding["metadata"]["namespace"] != namespace:
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account and s["namespace"] == namespace
                   for s in binding["subjects"]):
            continue
        for role in roles:
            if (binding["roleRef"]["kind"], binding["roleRef"]["name"]) != ("Role", role["metadata"]["name"]):
                continue
            if role["metadata"]["namespace"] != namespace:
                continue
            for rule in role["rules"]:
                if (group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
                        and not rule.get("resourceNames")):
                    return True
    return False


# ---- the stacks ---------------------------------------------------------------------------------------------

def objects_of(raw: dict) -> dict[str, dict]:
    return ray_objects(build(raw), load_bundle())


def created_cluster(job: dict) -> dict:
    """The RayCluster KubeRay creates from the RayJob (its spec is rayClusterSpec, as constructRayClusterForRayJob
    copies it)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": f"{job['metadata']['name']}-abcde", "namespace": job["metadata"]["namespace"]},
            "spec": copy.deepcopy(job["spec"]["rayClusterSpec"])}


@pytest.fixture(scope="module")
def dev():
    config = build(load_stack_config("dev", REPO))
    assert config.workload.plan.elastic and (config.workload.plan.min_slices, config.tpu.slices) == (1, 2)
    return config, ray_objects(config, load_bundle())


def test_the_dev_job_is_submitted_once_its_minimum_slices_are_up(dev):
    config, objects = dev
    cluster = created_cluster(objects["ray-job"])
    hosts = config.tpu.shape.hosts
    # Head alone, or one slice with a pod still Pending: not Ready, nothing submitted.
    assert not rayjob_submits(cluster["spec"], pods_up(0, hosts))
    one_pending = pods_up(1, hosts)
    one_pending[-1] = Pod(phase="Pending", ready=False)
    assert not rayjob_submits(cluster["spec"], one_pending)
    # The minimum (1 slice) Running and Ready, the second slice's capacity nowhere: submitted.
    assert rayjob_submits(cluster["spec"], pods_up(config.workload.plan.min_slices, hosts))


def test_a_group_sized_at_all_slices_would_wait_for_every_slice(dev):
    """The rule above is what kept the dev job from starting: with replicas = slices one slice is not enough."""
    config, objects = dev
    spec = created_cluster(objects["ray-job"])["spec"]
    spec["workerGroupSpecs"][0]["replicas"] = config.tpu.slices
    assert not rayjob_submits(spec, pods_up(config.workload.plan.min_slices, config.tpu.shape.hosts))


def test_the_driver_patch_makes_kuberay_want_every_slice(dev):
    config, objects = dev
    cluster = created_cluster(objects["ray-job"])
    hosts = config.tpu.shape.hosts
    grown = apply_json_patch(cluster, grow_patch(config.tpu.slices))
    # KubeRay creates the missing slices' pods (reconcilePods: desired minus existing); they wait for capacity.
    assert desired_worker_pods(grown["spec"]) == config.tpu.slices * hosts
    assert grown["spec"]["workerGroupSpecs"][0]["replicas"] <= grown["spec"]["workerGroupSpecs"][0]["maxReplicas"]
    # Nothing but the TPU group's replicas changed.
    grown["spec"]["workerGroupSpecs"][0]["replicas"] = cluster["spec"]["workerGroupSpecs"][0]["replicas"]
    assert grown == cluster
    # Once all slices are up the cluster is whole again; while the second slice is missing (at the start, or after
    # a loss) KubeRay keeps asking for it, since replicas stays at the maximum.
    assert cluster_ready(apply_json_patch(cluster, grow_patch(config.tpu.slices))["spec"],
                         pods_up(config.tpu.slices, hosts))


def test_the_patch_only_ever_resizes_the_tpu_group():
    """The JSON patch's `test` refuses the whole patch when group 0 is not the TPU group (RFC 6902 §4.6, §5)."""
    other = {"spec": {"workerGroupSpecs": [{"groupName": "cpu", "replicas": 1}, {"groupName": TPU_WORKER_GROUP,
                                                                                 "replicas": 1}]}}
    with pytest.raises(PatchError):
        apply_json_patch(other, grow_patch(2))


def test_the_driver_may_patch_its_cluster_and_nothing_else(dev):
    config, objects = dev
    job = objects["ray-job"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    roles = [o for o in objects.values() if o["kind"] == "Role"]
    bindings = [o for o in objects.values() if o["kind"] == "RoleBinding"]
    who = dict(service_account=head["serviceAccountName"], namespace=job["metadata"]["namespace"])
    path = raycluster_path(who["namespace"], "x")
    assert path.startswith("/apis/ray.io/v1/") and "/rayclusters/" in path
    assert rbac_allows(roles, bindings, **who, verb="patch", group="ray.io", resource="rayclusters")
    # `get` on RayClusters is the submitter's (tests/workloads/test_submitter_access.py), not the grow Role's.
    for verb, group, resource in (("delete", "ray.io", "rayclusters"),
                                  ("create", "ray.io", "rayclusters"), ("patch", "ray.io", "rayjobs"),
                                  ("patch", "", "pods"), ("list", "", "secrets")):
        assert not rbac_allows(roles, bindings, **who, verb=verb, group=group, resource=resource), (verb, resource)
    # The Role is bound before the job (and its driver) exists: the RayJob is registered after the binding.
    # The admission policy that keeps it to replicas comes before the binding (test below).
    names = list(objects)
    assert names.index("grow-slices-policy-binding") < names.index("grow-slices-binding") < names.index("ray-job")


def test_the_pods_go_with_the_job_however_far_it_grew(dev):
    """rayjob_controller.go case Complete/Failed: shutdownAfterJobFinishes deletes the RayCluster (all its pods,
    Pending ones included) whatever its replicas became; ttlSecondsAfterFinished 0 keeps none."""
    _, objects = dev
    spec = objects["ray-job"]["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 0
    assert "clusterSelector" not in spec and "deletionStrategy" not in spec
    assert "enableInTreeAutoscaling" not in spec["rayClusterSpec"]


@pytest.mark.parametrize("stack", ["prod"])
def test_a_fixed_size_run_waits_for_all_its_slices_and_gets_no_grow_role(stack):
    config = build(load_stack_config(stack, REPO))
    objects = ray_objects(config, load_bundle())
    [group] = objects["ray-job"]["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == config.tpu.slices
    assert not rayjob_submits(created_cluster(objects["ray-job"])["spec"],
                              pods_up(config.tpu.slices - 1, config.tpu.shape.hosts))
    # Only the submitter's read-only Role (tests/workloads/test_submitter_access.py): nothing that patches.
    assert [name for name, o in objects.items() if o["kind"] in ("Role", "RoleBinding", "ValidatingAdmissionPolicy",
                                                                 "ValidatingAdmissionPolicyBinding")] \
        == ["submitter-role", "submitter-binding"]
    assert "--elastic" not in objects["ray-job"]["spec"]["entrypoint"]


def test_elastic_min_equal_to_slices_is_a_fixed_run():
    objects = objects_of({**MINIMAL, "slices": 2, "elasticMinSlices": 2})
    [group] = objects["ray-job"]["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 2 and "grow-slices-role" not in objects


# ---- the admission policy that keeps the driver's service account to `replicas` ----------------------------

def admitted(policy: dict, old: dict, new: dict, username: str) -> bool:
    """A ValidatingAdmissionPolicy on an UPDATE (Kubernetes docs, "Validating Admission Policy"): it applies when
    every matchCondition is true; then every validation must be true, and one that fails to evaluate counts as a
    failure under failurePolicy Fail. Evaluated with the CEL package the plan uses (preview/k8s/cel_rules.py)."""
    import cel

    request = {"userInfo": {"username": username}, "operation": "UPDATE"}
    variables = {"object": new, "oldObject": old, "request": request}
    if not all(cel.compile(c["expression"]).execute(variables) for c in policy["spec"]["matchConditions"]):
        return True
    for validation in policy["spec"]["validations"]:
        try:
            if cel.compile(validation["expression"]).execute(variables) is not True:
                return False
        except Exception:
            return policy["spec"]["failurePolicy"] != "Fail"
    return True


def _edited(cluster: dict, edit) -> dict:
    changed = copy.deepcopy(cluster)
    edit(changed["spec"])
    return changed


def test_the_policy_lets_the_driver_change_replicas_and_nothing_else(dev):
    _, objects = dev
    policy, binding = objects["grow-slices-policy"], objects["grow-slices-policy-binding"]
    job = objects["ray-job"]
    namespace = job["metadata"]["namespace"]
    account = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"]
    driver = f"system:serviceaccount:{namespace}:{account}"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": namespace}
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (["ray.io"], ["rayclusters"], ["UPDATE"])
    cluster = created_cluster(job)
    assert admitted(policy, cluster, apply_json_patch(cluster, grow_patch(2)), driver)

    def image(spec):
        spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "attacker/image:1"

    def privileged(spec):
        spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}

    def more_slices(spec):
        spec["workerGroupSpecs"][0]["maxReplicas"] = 64

    def new_group(spec):
        spec["workerGroupSpecs"].append(copy.deepcopy(spec["workerGroupSpecs"][0]) | {"groupName": "more"})

    def head(spec):
        spec["headGroupSpec"]["rayStartParams"]["dashboard-host"] = "1.2.3.4"

    def no_auth(spec):
        spec.pop("authOptions")

    def autoscaler(spec):
        spec["autoscalerOptions"] = {"image": "attacker/image:1"}

    def start_params(spec):
        spec["workerGroupSpecs"][0]["rayStartParams"]["object-store-memory"] = "1"

    # What the policy let through until it compared key by key: fields of a worker group or of
    # the spec that the stack does not set (KubeRay v1.7.0 ray-operator/apis/ray/v1/raycluster_types.go
    # WorkerGroupSpec: resources, labels, suspend, scaleStrategy.workersToDelete; RayClusterSpec: suspend), and
    # the object's metadata.
    def tpu_resources(spec):
        spec["workerGroupSpecs"][0]["resources"] = {"TPU": "100"}     # becomes `ray start --resources`

    def group_labels(spec):
        spec["workerGroupSpecs"][0]["labels"] = {"ray.io/market-type": "on-demand"}

    def group_suspend(spec):
        spec["workerGroupSpecs"][0]["suspend"] = True

    def workers_to_delete(spec):
        spec["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": ["a-healthy-worker"]}

    def cluster_suspend(spec):
        spec["suspend"] = True

    def idle_timeout(spec):
        spec["workerGroupSpecs"][0]["idleTimeoutSeconds"] = 1

    def removed_field(spec):
        spec["workerGroupSpecs"][0].pop("numOfHosts")

    spec_edits = (image, privileged, more_slices, new_group, head, no_auth, autoscaler, start_params,
                  tpu_resources, group_labels, group_suspend, workers_to_delete, cluster_suspend, idle_timeout,
                  removed_field)
    cluster["metadata"].update(resourceVersion="41", generation=1, labels={"tpu-multislice/run": "r"},
                               uid="u-1", ownerReferences=[{"kind": "RayJob", "name": "job", "uid": "j-1"}])

    def metadata(edit):
        def edited(changed):
            edit(changed["metadata"])
        edited.__name__ = edit.__name__
        return edited

    metadata_edits = (
        metadata(lambda m: m["labels"].update({"tpu-multislice/run": "another-run"})),
        metadata(lambda m: m.update(annotations={"ray.io/overwrite-container-cmd": "false"})),
        metadata(lambda m: m.pop("ownerReferences")),                  # the RayJob would no longer delete it
        metadata(lambda m: m.update(finalizers=["example.com/keep"])),
    )
    updates = [_edited(cluster, edit) for edit in spec_edits]
    for edit in metadata_edits:
        changed = copy.deepcopy(cluster)
        edit(changed)
        updates.append(changed)
    for edit, changed in zip(spec_edits + metadata_edits, updates):
        assert not admitted(policy, cluster, changed, driver), edit.__name__
        # KubeRay's own operator (another account) is not matched.
        assert admitted(policy, cluster, changed, "system:serviceaccount:kube-system:kuberay-operator")
    # The grow itself, with what the API server changes on every update, still passes; so does shrinking back.
    grown = apply_json_patch(cluster, grow_patch(2))
    grown["metadata"].update(resourceVersion="42", generation=2, managedFields=[{"manager": "grow"}])
    assert admitted(policy, cluster, grown, driver)
    assert admitted(policy, grown, apply_json_patch(grown, grow_patch(1)), driver)


def test_under_pulumi_the_role_is_bound_after_the_policy_and_before_the_job():
    """The order `pulumi up` creates them in: the dependency graph of the dev stack under mocks."""
    from tests.conftest import committed_stack_run

    run = committed_stack_run("dev")
    by_name = {r.name: r for r in run.resources}
    binding, policy_binding, job = by_name["grow-slices-binding"], by_name["grow-slices-policy-binding"], \
        by_name["ray-job"]
    assert policy_binding.urn in binding.dependencies
    assert binding.urn in job.dependencies

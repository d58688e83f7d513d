"""Many runs, one cluster: the cluster stack and the run stacks on it, under Pulumi mocks.

A run stack's StackReference is played from the cluster stack's own program run under mocks (preview/harness.py
play_cluster_stack): the committed Pulumi.team.yaml, and team-8b (Ray) and team-qwen (JobSet) on it. The single
stacks' URNs are held by tests/infra/test_stack_identity.py (their goldens did not change with this split).
"""
from __future__ import annotations

import pytest

from infra.cluster_ref import RUN_EXPORTS
from infra.config import ConfigError, build
from preview import harness
from preview.harness import MissingStack, ProgramRun, run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO, SPLIT_STACKS, build_stack, committed_stack_run

CLUSTER, RUNS = "team", ("team-8b", "team-qwen")
REFERENCE = "organization/tpu-multislice/team"
# What only a cluster stack may register: the network, the cluster and its system pool, the controllers, and the
# cluster-scoped queue objects every run shares.
CLUSTER_SIDE = {
    "gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork", "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat", "gcp:container/cluster:Cluster", "kubernetes:helm.sh/v3:Release",
    "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor",
    "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass", "gcp:projects/iAMCustomRole:IAMCustomRole",
    "tpu-multislice:infra:GkeCluster", "tpu-multislice:infra:ClusterNetwork",
    "tpu-multislice:infra:NodeServiceAccount", "tpu-multislice:workloads:WorkloadControllers",
}
# What only a run registers.
RUN_SIDE = {"kubernetes:core/v1:Namespace", "kubernetes:ray.io/v1:RayJob", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",
            "gcp:storage/bucket:Bucket", "gcp:monitoring/dashboard:Dashboard", "tpu-multislice:infra:TpuSlicePools"}


def test_the_committed_split_stacks_are_the_team_cluster_and_its_two_runs():
    assert SPLIT_STACKS == [CLUSTER, *RUNS]
    backends = {stack: build_stack(stack).workload.backend for stack in RUNS}
    assert backends == {"team-8b": "rayjob", "team-qwen": "jobset"}


def test_the_cluster_stack_registers_no_run_and_exports_what_runs_read():
    run = committed_stack_run(CLUSTER)
    types = {r.type for r in run.resources}
    assert not types & RUN_SIDE
    assert [r.inputs["name"] for r in run.of_type("gcp:container/nodePool:NodePool")] == ["system"]
    assert {"gcp:container/cluster:Cluster", "kubernetes:helm.sh/v3:Release",
            "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"} <= types
    assert set(RUN_EXPORTS) <= set(run.outputs)
    assert "kubeconfig" in run.secret_outputs
    queue = run.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue").inputs
    tpu = next(r for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "google.com/tpu")
    assert tpu["nominalQuota"] == str(load_stack_config(CLUSTER, REPO)["clusterTpuQuota"])


@pytest.mark.parametrize("stack", RUNS)
def test_a_run_stack_registers_nothing_of_the_cluster(stack):
    run = committed_stack_run(stack)
    assert not {r.type for r in run.resources} & CLUSTER_SIDE
    pools = [r.inputs["name"] for r in run.of_type("gcp:container/nodePool:NodePool")]
    assert pools and all(name.startswith(f"{stack}-slice-") for name in pools)
    # Its pools join the cluster the reference names, and its pods select only its own pools.
    cluster = committed_stack_run(CLUSTER).outputs["clusterName"]
    assert {r.inputs["cluster"] for r in run.of_type("gcp:container/nodePool:NodePool")} == {cluster}
    assert all(r.inputs["nodeConfig"]["labels"]["tpu-multislice/run"] == stack
               for r in run.of_type("gcp:container/nodePool:NodePool"))
    assert run.outputs["clusterStack"] == REFERENCE


@pytest.mark.parametrize("stack", RUNS)
def test_destroying_a_run_deletes_its_objects_and_nothing_of_the_cluster(stack):
    """A run's destroy deletes what its state holds: every one of its objects (none is skipped as `deleted_with`
    a cluster it does not own), and of what both stacks declare (the project's APIs) nothing is disabled."""
    run, cluster = committed_stack_run(stack), committed_stack_run(CLUSTER)
    assert all(f"urn:pulumi:{stack}::" in r.urn for r in run.resources)
    assert [r.name for r in run.resources if r.deleted_with] == []
    assert [r.name for r in run.resources if r.protect] == []    # deletionProtection is false in the examples

    def physical(program: ProgramRun) -> dict[tuple, object]:
        """Each cloud object by what identifies it in the cloud (its name, or what a binding binds)."""
        return {(r.type, *sorted((k, str(v)) for k, v in r.inputs.items() if k in IDENTITY)): r
                for r in program.resources if r.custom and r.type.startswith("gcp:")}
    shared = set(physical(run)) & set(physical(cluster))
    assert shared and {key[0] for key in shared} == {"gcp:projects/service:Service"}
    assert all(physical(run)[key].inputs.get("disableOnDestroy") is False for key in shared)


def test_a_run_stack_reads_project_zone_and_cluster_name_from_its_cluster_stack():
    """The committed runs do not repeat them: config build takes them from the cluster stack's outputs (under
    mocks its own program's), so the run's pools and names land on the cluster the reference names."""
    cluster = committed_stack_run(CLUSTER).outputs
    for stack in RUNS:
        raw = load_stack_config(stack, REPO)
        assert not {"project", "zone", "clusterName"} & set(raw)
        config = build_stack(stack)
        assert (config.gcp.project, config.gcp.zone, config.cluster.name) == (
            cluster["project"], cluster["location"], cluster["clusterName"])
        assert config.gcp.region == "us-east5"
    # An older run stack that repeats them, equal to the cluster's, is accepted as before.
    repeated = build_stack("team-8b", project=cluster["project"], zone=cluster["location"],
                           clusterName=cluster["clusterName"])
    assert repeated.cluster.name == cluster["clusterName"]


@pytest.mark.parametrize("key, value", [("clusterName", "another-cluster"), ("zone", "us-central1-a"),
                                        ("project", "another-project")])
def test_a_run_repeating_a_value_its_cluster_contradicts_is_refused_at_config_build(key, value):
    """One line naming the key, the value and the cluster's; config build refuses, so nothing registers."""
    with pytest.raises(ConfigError) as error:
        build_stack("team-8b", **{key: value})
    theirs = committed_stack_run(CLUSTER).outputs["location" if key == "zone" else key]
    assert error.value.problems == [f"tpu-multislice:{key}={value!r} is not valid; {theirs!r}, what cluster "
                                    f"stack {REFERENCE} exports (or unset it)"]
    assert error.value.problems[0].key == key
    assert all(len(line) <= 100 for line in str(error.value).splitlines())
    monitor = harness.RecordingMonitor(harness.GcpMocks())
    with pytest.raises(Exception, match=f"{key}={value!r} is not valid"):
        run_program({**load_stack_config("team-8b", REPO), key: value}, stack="team-8b", monitor=monitor)
    assert monitor.registrations == []


def test_a_run_whose_cluster_stack_cannot_be_read_is_refused_in_one_line():
    raw = {**load_stack_config("team-8b", REPO), "clusterStack": "organization/tpu-multislice/gone"}
    with pytest.raises(ConfigError) as error:
        build(raw, stack="team-8b", cluster_outputs=harness.played_outputs(REPO))
    assert error.value.problems == [
        "tpu-multislice:clusterStack='organization/tpu-multislice/gone' is not valid: its outputs could not "
        "be read (unknown stack 'organization/tpu-multislice/gone'); allowed: a cluster stack that is up "
        "(pulumi up --stack gone)"]


def test_a_run_whose_cluster_stack_is_gone_fails_at_the_reference():
    raw = {**load_stack_config("team-8b", REPO), "clusterStack": "organization/tpu-multislice/gone"}
    monitor = harness.RecordingMonitor(harness.GcpMocks())
    with pytest.raises(Exception, match="unknown stack"):
        run_program(raw, stack="team-8b", monitor=monitor)
    assert monitor.registrations == []          # refused at config build, before anything registers
    assert "organization/tpu-multislice/gone" not in harness.STACK_OUTPUTS


# The inputs that identify a Google Cloud object or grant.
IDENTITY = ("name", "service", "accountId", "roleId", "repositoryId", "repository", "bucket", "role", "member",
            "serviceAccountId",
            "project", "location", "cluster")


def _names(run: ProgramRun) -> set[tuple]:
    """Every cloud or Kubernetes object a program creates, by what identifies it there: a Kubernetes object by
    kind, namespace and name; a Google Cloud object by its name, id or, for a grant, what it binds to whom."""
    names = set()
    for r in run.resources:
        if r.type.startswith("kubernetes:") and isinstance(r.inputs.get("metadata"), dict):
            meta = r.inputs["metadata"]
            names.add((r.type, f"{meta.get('namespace', '')}/{meta.get('name')}"))
        elif r.type.startswith("gcp:") and r.type != "gcp:monitoring/dashboard:Dashboard":   # ids are generated
            names.add((r.type, *sorted((k, str(v)) for k, v in r.inputs.items() if k in IDENTITY)))
    return names


@pytest.mark.parametrize("backend", ["rayjob", "jobset"])
def test_two_runs_with_the_longest_names_share_no_name_on_one_cluster(backend):
    """Two run stacks named with 40 characters, the most a run stack's name may have, equal but for their last
    character, on the same shape and backend, both reading the same data (the cache disks' StorageClass is
    cluster-scoped; JobSet pods run on the host network as the cluster's shared node account)."""
    stem = "team-" + "x" * 34
    first, second = stem + "a", stem + "b"
    assert len(first) == 40
    raw = {**load_stack_config("team-qwen", REPO), "workloadBackend": backend, "capacity": "on-demand",
           "datasetType": "grain", "datasetPath": "gs://team-data/c4/train-*.array_record"}
    runs = [run_program(raw, stack=name) for name in (first, second)]
    common = _names(runs[0]) & _names(runs[1])
    # Only the project's APIs, which both stacks enable and neither disables on destroy.
    assert {key[0] for key in common} <= {"gcp:projects/service:Service"}, sorted(common)
    kinds = {key[0] for key in _names(runs[0])}
    assert {"gcp:container/nodePool:NodePool", "gcp:storage/bucket:Bucket", "gcp:serviceaccount/account:Account",
            "gcp:projects/iAMMember:IAMMember", "gcp:storage/bucketIAMMember:BucketIAMMember",
            "kubernetes:core/v1:Namespace", "kubernetes:storage.k8s.io/v1:StorageClass",
            "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"} <= kinds
    # Their goodput series (MaxText's job name is the run name) and dashboards are apart too.
    assert [run.outputs["run"].split(":", 1)[0] for run in runs] == [f"name {first}", f"name {second}"]
    with pytest.raises(ConfigError, match="1-40 lowercase"):
        build(raw, stack=stem + "ab", cluster_outputs=harness.played_outputs(REPO))


@pytest.mark.parametrize("raw, stack, refused", [
    ({"dcn": "true"}, "team-8b", "dcn='true' is not valid; unset it: the cluster stack"),
    ({"namespace": "shared"}, "team-8b", "namespace='shared' is not valid; unset it: a run stack names it"),
    ({"workloadBackend": "pathways"}, "team-8b", "workloadBackend='pathways' is not valid"),
    ({"capacity": "spot"}, "team-8b", "elasticMinSlices='(unset: 1 on spot)' is not valid; 2 (all slices)"),
    ({"clusterStack": "org/another-project/team"}, "team-8b", "a stack of this project"),
    ({"clusterStack": "organization/tpu-multislice/team-8b"}, "team-8b", "another stack than"),
])
def test_a_run_stack_refuses_what_the_cluster_decides(raw, stack, refused):
    with pytest.raises(ConfigError, match=refused.replace("(", r"\(").replace(")", r"\)")) as error:
        build_stack(stack, **raw)
    assert all(len(line) <= 100 for line in str(error.value).splitlines())


@pytest.mark.parametrize("raw, refused", [
    ({"model": "llama3-8b"}, "model='llama3-8b' is not valid; unset it: a cluster stack runs nothing"),
    ({"dranet": "true"}, "dranet='true' is not valid; unset it: runs on a shared cluster do not use DCN"),
    ({"clusterMode": "autopilot"}, "clusterMode='autopilot' is not valid; standard with stackRole=cluster"),
    ({"clusterTpuQuota": "0"}, "clusterTpuQuota=0 is not valid"),
])
def test_a_cluster_stack_refuses_what_only_a_run_reads(raw, refused):
    with pytest.raises(ConfigError, match=refused):
        build({**load_stack_config(CLUSTER, REPO), **raw}, stack=CLUSTER)


@pytest.mark.parametrize("key, value", [("clusterTpuQuota", "16"), ("runStacks", ["org/tpu-multislice/x"])])
def test_a_single_stack_refuses_the_cluster_stacks_keys(key, value):
    with pytest.raises(ConfigError, match=f"{key}=.* unset it: only a cluster stack"):
        build({**load_stack_config("dev", REPO), key: value}, stack="dev")


def test_a_cluster_stack_without_a_quota_is_refused():
    raw = {k: v for k, v in load_stack_config(CLUSTER, REPO).items() if k != "clusterTpuQuota"}
    with pytest.raises(ConfigError, match="stackRole=cluster needs tpu-multislice:clusterTpuQuota"):
        build(raw, stack=CLUSTER)


def test_a_cluster_stack_with_runs_listed_is_protected_from_destroy():
    listed = load_stack_config(CLUSTER, REPO)["runStacks"]
    assert listed == [f"organization/tpu-multislice/{run}" for run in RUNS]
    protected = {r.type for r in committed_stack_run(CLUSTER).resources if r.protect}
    assert {"gcp:container/cluster:Cluster", "gcp:compute/network:Network",
            "gcp:serviceaccount/account:Account"} <= protected
    emptied = run_program({**load_stack_config(CLUSTER, REPO), "runStacks": []}, stack="team-emptied")
    assert not any(r.protect for r in emptied.resources)


def _outputs_without_listing(reference: str) -> dict:
    """The committed cluster's outputs, with runStacks emptied (a cluster whose owner did not list its runs)."""
    return {**harness.played_outputs(REPO)(reference), "runStacks": []}


def test_a_run_its_cluster_does_not_list_says_so_at_up_and_in_its_plan(monkeypatch, caplog):
    """runStacks stays on the cluster stack (`pulumi destroy` runs no program, so the cluster's protection must
    be in its state before), so a run it forgot is said where the run's owner looks: config build reads the list
    with the cluster's outputs, `pulumi up` warns, and the plan has it as a cost note."""
    from preview.model import build_plan

    assert build_stack("team-8b").stack.listed_on_cluster is True
    assert not [n for n in build_plan(committed_stack_run("team-8b"), build_stack("team-8b"), "team-8b", None,
                                      REPO).cost.notes if n.startswith("runStacks")]
    raw = load_stack_config("team-8b", REPO)
    config = build(raw, stack="team-8b", cluster_outputs=_outputs_without_listing)
    assert config.stack.listed_on_cluster is False
    outputs, secret = harness.STACK_OUTPUTS[REFERENCE]
    monkeypatch.setitem(harness.STACK_OUTPUTS, REFERENCE, ({**outputs, "runStacks": []}, secret))
    with caplog.at_level("WARNING"):
        run = run_program(raw, stack="team-8b")
    said = [r.getMessage() for r in caplog.records if "does not list this run" in r.getMessage()]
    joined = " ".join(said[0].replace("\\\n", " ").split()) if len(said) == 1 else said   # commands join back
    assert "pulumi config set --path 'runStacks[0]' organization/tpu-multislice/team-8b --stack team && " \
        "pulumi up --stack team" in joined, said
    notes = build_plan(run, config, "team-8b", None, REPO).cost.notes
    assert [n for n in notes if n.startswith("runStacks: cluster stack")]


def test_the_cluster_plan_names_runs_missing_from_runStacks_and_listed_ones_no_stack_references():
    from preview.model import build_plan

    cluster = committed_stack_run(CLUSTER)
    assert not [n for n in build_plan(cluster, build_stack(CLUSTER), CLUSTER, None, REPO).cost.notes
                if n.startswith("runStacks")]
    gone = "organization/tpu-multislice/team-gone"
    config = build_stack(CLUSTER, runStacks=[f"organization/tpu-multislice/{RUNS[0]}", gone])
    notes = [n for n in build_plan(cluster, config, CLUSTER, None, REPO).cost.notes if n.startswith("runStacks")]
    assert len(notes) == 2, notes
    assert notes[0].startswith(f"runStacks: organization/tpu-multislice/{RUNS[1]} reference(s) this cluster")
    assert f"runStacks[2]' organization/tpu-multislice/{RUNS[1]}" in notes[0]
    assert notes[1].startswith(f"runStacks: {gone} listed, but no stack file here references")


def test_the_cluster_stacks_plan_shows_only_what_it_owns_and_a_runs_plan_only_its_run():
    """A shared cluster trains nothing: no recipe, preemption, planner, start-up, compile or run assumptions, no
    default run shape, and its cost is what it bills up (system pool and GKE fee); a run's plan shows its run,
    and none of the cluster's own assumptions or bills."""
    import io

    from preview.cli import render_cost, render_text
    from preview.model import build_plan
    from preview.verdict import not_checked

    config = build_stack(CLUSTER)
    assert config.shape_changes == ()
    plan = build_plan(committed_stack_run(CLUSTER), config, CLUSTER, None, REPO)
    assert (plan.recipe, plan.preemption, plan.planner, plan.planner_fields, plan.startup) == ([], {}, [], {}, [])
    assert [line.split(":")[0] for line in plan.assumptions] == [
        "GKE version", "APIs", "control plane", "goodput log reader", "upgrades"]
    assert not [line for line, _ in not_checked(plan, CLUSTER, False, False) if "XLA" in line]
    text = io.StringIO()
    render_text(plan, None, text)
    shown = text.getvalue()
    for run_only in ("Recipe:", "Preemption", "Start-up", "Planner", "slices released", "cost while training"):
        assert run_only not in shown, run_only
    assert "cost while up, with or without runs: 0.64 USD/h (system pool 0.54 USD/h, GKE fee 0.10 USD/h)" in shown

    for stack in RUNS:
        run_plan = build_plan(committed_stack_run(stack), build_stack(stack), stack, None, REPO)
        heads = {line.split(":")[0] for line in run_plan.assumptions}
        assert not heads & {"GKE version", "goodput log reader", "upgrades"} and "TPU quota" in heads
        assert run_plan.recipe and run_plan.preemption and run_plan.startup
        cost = io.StringIO()
        render_cost(run_plan.cost, cost, run_plan.role)
        assert "system pool" not in cost.getvalue().splitlines()[0]
        assert "bill in its cluster stack" in cost.getvalue()


def test_run_stacks_queue_in_the_clusters_queue():
    ray, jobset = committed_stack_run("team-8b"), committed_stack_run("team-qwen")
    job = ray.one("kubernetes:ray.io/v1:RayJob").inputs
    # Kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_webhook.go: a queued RayJob is suspended and must delete its
    # cluster when it finishes.
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu-run"
    assert job["spec"]["suspend"] is True and job["spec"]["shutdownAfterJobFinishes"] is True
    for program in (ray, jobset):
        local = program.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue").inputs
        assert local["spec"]["clusterQueue"] == committed_stack_run(CLUSTER).outputs["clusterQueue"]
    labels = jobset.one("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet").inputs["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "tpu-run"


@pytest.mark.parametrize("stack", RUNS)
def test_the_offline_plan_of_a_run_validates_against_its_cluster_stacks_objects(stack):
    """Every object of the run against the pinned CRDs and the cross-object rules, where the LocalQueue's
    ClusterQueue and the JobSet's priority class are the cluster stack's (played from its own program)."""
    from preview.k8s.validation import default_schemas_dir
    from preview.model import build_plan

    run = committed_stack_run(stack)
    assert set(run.referenced) == {REFERENCE}
    plan = build_plan(run, build_stack(stack), stack, default_schemas_dir())
    assert [str(e) for e in plan.validation.errors] == []
    assert plan.cost.gke_fee_usd_per_hour == 0.0 and any(n.startswith("queue: joins LocalQueue") for n in plan.cost.notes)


def test_a_run_stack_built_without_its_clusters_outputs_says_why_once():
    """A tool that builds a run stack's config without reading its cluster stack: one line naming clusterStack,
    not 'project is required' and the like for keys the run was never asked to set."""
    with pytest.raises(ConfigError) as error:
        build(load_stack_config("team-8b", REPO), stack="team-8b")
    assert error.value.problems == [
        f"tpu-multislice:clusterStack={REFERENCE!r}: project, zone, clusterName come from the cluster stack's "
        "outputs, which this build did not read; allowed: set them to the cluster's"]

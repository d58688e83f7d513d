"""The whole program under Pulumi mocks: resource inputs against the tutorial's flags, the graph,
protection and exports."""
from __future__ import annotations

import json

import pytest

from infra import versions
from preview.k8s.manifests import is_kubernetes_type
from preview.harness import FAKE_PROJECT_NUMBER, ProgramRun, Registration, run_program
from tests.conftest import MINIMAL, committed_stack_run

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
SERVICE = "gcp:projects/service:Service"


def slice_pools(run: ProgramRun) -> list[Registration]:
    return sorted((r for r in run.of_type(NODE_POOL) if r.name.startswith("slice-")), key=lambda r: r.name)


def depends_on(run: ProgramRun, resource: Registration, target: Registration) -> bool:
    """Whether `resource` waits for `target`, directly or transitively."""
    seen, todo = set(), [resource.urn]
    while todo:
        urn = todo.pop()
        if urn in seen:
            continue
        seen.add(urn)
        registration = next((r for r in run.resources if r.urn == urn), None)
        if registration is None:
            # A resource the program reads (the served RayJob CRD, `CustomResourceDefinition.get`) is not
            # registered and waits for nothing the program creates.
            continue
        edges = set(registration.dependencies)
        for urns in registration.property_dependencies.values():
            edges.update(urns)
        if target.urn in edges:
            return True
        todo.extend(edges)
    return False


# ---- prod: the tutorial's scenario -------------------------------------------------------------------

def test_prod_cluster_matches_the_tutorial(prod):
    cluster = prod.one(CLUSTER).inputs
    addons = cluster["addonsConfig"]
    assert addons["rayOperatorConfigs"][0]["enabled"] is True
    assert addons["rayOperatorConfigs"][0]["rayClusterLoggingConfig"]["enabled"] is True
    assert addons["gcsFuseCsiDriverConfig"]["enabled"] is True
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert cluster["workloadIdentityConfig"]["workloadPool"] == "my-tpu-project.svc.id.goog"
    assert cluster["enableMultiNetworking"] is True
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["deletionProtection"] is True
    assert cluster["location"] == "us-east5-b"
    # Created at the release channel's default, never at a feature floor (tests/infra/test_gke_versions.py).
    assert "minMasterVersion" not in cluster and cluster["releaseChannel"]["channel"] == "REGULAR"
    assert cluster["privateClusterConfig"]["enablePrivateNodes"] is True
    assert cluster["ipAllocationPolicy"] == {"clusterSecondaryRangeName": "pods",
                                             "servicesSecondaryRangeName": "services"}


def test_prod_has_one_tpu_pool_per_slice_with_the_tutorial_flags(prod):
    pools = slice_pools(prod)
    assert [p.name for p in pools] == ["slice-0", "slice-1"]
    node_account = prod.one(ACCOUNT, "nodes").inputs["accountId"]
    for index, pool in enumerate(pools):
        inputs = pool.inputs
        assert inputs["autoscaling"]["maxNodeCount"] == 4  # 16 chips / 4 chips per VM
        assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
        node = inputs["nodeConfig"]
        assert node["machineType"] == "ct6e-standard-4t"
        assert node["gvnic"] == {"enabled": True}
        assert node["advancedMachineFeatures"]["threadsPerCore"] == 1
        assert node["labels"] == {"cloud.google.com/gke-networking-dra-driver": "true",
                                  "tpu-multislice/slice": str(index)}
        assert node["serviceAccount"].startswith(node_account + "@")
        assert "compute@developer" not in node["serviceAccount"]
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        assert "spot" not in node and "reservationAffinity" not in node
        extra = inputs["networkConfig"]["additionalNodeNetworkConfigs"]
        assert extra == [{"network": "tpu-multislice-prod-dcn-0", "subnetwork": "tpu-multislice-prod-dcn-0-sub"},
                         {"network": "tpu-multislice-prod-dcn-1", "subnetwork": "tpu-multislice-prod-dcn-1-sub"}]


def test_prod_system_pool_hosts_the_ray_head(prod):
    system = prod.one(NODE_POOL, "system").inputs
    assert system["nodeCount"] == 1
    # Seed head: 8 CPU / 16 GiB, plus room for system pods.
    assert system["nodeConfig"]["machineType"] == "e2-standard-16"


def test_prod_networks_primary_and_dcn(prod):
    primary = prod.one(NETWORK, "primary").inputs
    assert primary["autoCreateSubnetworks"] is False
    nodes = prod.one(SUBNET, "nodes").inputs
    assert nodes["ipCidrRange"] == "10.0.0.0/20" and nodes["region"] == "us-east5"
    assert {r["rangeName"] for r in nodes["secondaryIpRanges"]} == {"pods", "services"}
    for index, cidr in enumerate(["10.50.0.0/16", "10.60.0.0/16"]):
        dcn = prod.one(NETWORK, f"dcn-{index}").inputs
        assert dcn["mtu"] == 8896 and dcn["autoCreateSubnetworks"] is False
        assert prod.one(SUBNET, f"dcn-{index}").inputs["ipCidrRange"] == cidr
        rule = prod.one(FIREWALL, f"dcn-{index}-allow-internal").inputs
        assert rule["sourceRanges"] == [cidr] and rule["direction"] == "INGRESS"
        assert {a["protocol"] for a in rule["allows"]} == {"tcp", "udp", "icmp"}
        assert rule["network"].endswith(f"/tpu-multislice-prod-dcn-{index}")


def test_prod_bucket_is_private_atomic_and_survives_destroy(prod):
    bucket = prod.one(BUCKET, "checkpoints")
    inputs = bucket.inputs
    assert inputs["uniformBucketLevelAccess"] is True
    assert inputs["publicAccessPrevention"] == "enforced"
    assert inputs["hierarchicalNamespace"] == {"enabled": True}
    assert inputs["softDeletePolicy"]["retentionDurationSeconds"] == 7 * 24 * 3600
    assert inputs["forceDestroy"] is False
    assert bucket.retain_on_delete is True


def test_prod_workload_identity_binding_uses_the_looked_up_project_number(prod):
    binding = prod.one(BUCKET_IAM, "checkpoints-object-user").inputs
    assert binding["role"] == "roles/storage.objectUser"
    assert binding["member"] == (
        f"principal://iam.googleapis.com/projects/{FAKE_PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
        "my-tpu-project.svc.id.goog/subject/ns/tpu-training/sa/tpu-trainer")
    assert binding["bucket"] == prod.one(BUCKET, "checkpoints").inputs["name"]
    ksa = prod.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert (ksa["namespace"], ksa["name"]) == ("tpu-training", "tpu-trainer")


def test_required_apis_are_enabled_and_never_disabled_on_destroy(prod):
    services = prod.of_type(SERVICE)
    assert {s.inputs["service"] for s in services} >= {"container.googleapis.com", "compute.googleapis.com",
                                                       "storage.googleapis.com", "iam.googleapis.com"}
    assert all(s.inputs["disableOnDestroy"] is False for s in services)
    # Every one of them: the checkpoint bucket and the image build's staging bucket, the node and build accounts.
    for resource in prod.of_type(CLUSTER) + prod.of_type(BUCKET) + prod.of_type(ACCOUNT):
        assert depends_on(prod, resource, prod.one(SERVICE, "container")), (resource.type, resource.name)


# ---- graph ----------------------------------------------------------------------------------------------

def test_independent_things_do_not_wait_for_each_other(prod):
    cluster, bucket = prod.one(CLUSTER), prod.one(BUCKET, "checkpoints")
    assert not depends_on(prod, bucket, cluster), "the bucket must not wait for the cluster"
    assert not depends_on(prod, cluster, bucket)
    first, second = slice_pools(prod)
    assert not depends_on(prod, first, second) and not depends_on(prod, second, first)
    for pool in (first, second):
        assert depends_on(prod, pool, cluster)
        assert depends_on(prod, pool, prod.one(SUBNET, "dcn-1"))


def test_every_resource_has_a_component_parent(prod):
    components = {r.urn for r in prod.resources if r.type.startswith("tpu-multislice:")}
    for resource in prod.resources:
        if resource.type.startswith("tpu-multislice:") or resource.type.startswith("pulumi:providers:"):
            continue
        assert resource.parent in components, f"{resource.type} {resource.name} parent {resource.parent}"


def test_kubernetes_objects_use_the_cluster_provider_and_go_with_the_cluster(prod):
    cluster = prod.one(CLUSTER)
    objects = [r for r in prod.resources if r.type.startswith("kubernetes:")]
    assert objects
    for obj in objects:
        assert "pulumi:providers:kubernetes::gke" in obj.provider
        assert obj.deleted_with == cluster.urn
    assert depends_on(prod, prod.one(BUCKET_IAM, "checkpoints-object-user"), cluster)


def test_component_type_tokens_name_the_project(prod):
    tokens = {r.type for r in prod.resources if not r.custom}
    assert {"tpu-multislice:infra:GkeCluster", "tpu-multislice:infra:TpuSlicePools",
            "tpu-multislice:infra:ClusterNetwork", "tpu-multislice:infra:CheckpointBucket",
            "tpu-multislice:infra:WorkloadIdentity"} <= tokens


# ---- exports ----------------------------------------------------------------------------------------------

def test_exports_and_their_secrecy(prod):
    out = prod.outputs
    assert out["clusterName"] == "tpu-multislice-prod" and out["location"] == "us-east5-b"
    assert out["endpoint"] == "gke-0a1b2c3d4e5f-123456789012.us-east5-b.gke.goog"
    assert out["bucketUrl"] == "gs://my-tpu-project-tpu-multislice-prod-ckpt"
    assert out["nodePools"] == ["slice-0", "slice-1"]
    assert (out["slices"], out["totalHosts"], out["totalChips"]) == (2, 8, 32)
    assert out["getCredentialsCommand"] == ("gcloud container clusters get-credentials tpu-multislice-prod "
                                            "--location us-east5-b --project my-tpu-project --dns-endpoint")
    assert prod.secret_outputs == {"kubeconfig"}
    kubeconfig = json.loads(out["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://gke-0a1b2c3d4e5f-123456789012.us-east5-b.gke.goog"
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"


# ---- dev: small, spot, throw-away ------------------------------------------------------------------------

def test_dev_is_small_spot_and_throw_away(dev):
    pools = slice_pools(dev)
    assert len(pools) == 2
    for pool in pools:
        assert pool.inputs["autoscaling"]["maxNodeCount"] == 2  # v6e 2x4 on 4-chip VMs
        assert pool.inputs["nodeConfig"]["spot"] is True
        assert pool.inputs["placementPolicy"]["tpuTopology"] == "2x4"
        assert "networkConfig" not in pool.inputs
    assert dev.one(CLUSTER).inputs["deletionProtection"] is False
    bucket = dev.one(BUCKET, "checkpoints")
    assert bucket.inputs["forceDestroy"] is True and bucket.retain_on_delete is False
    assert [n.name for n in dev.of_type(NETWORK)] == ["primary"]
    assert not dev.of_type(FIREWALL)


# ---- capacity and mode variants --------------------------------------------------------------------------

def test_reservation_capacity_consumes_the_named_reservation():
    run = run_program({**MINIMAL, "capacity": "reservation", "reservationName": "tpu-res"})
    for pool in slice_pools(run):
        assert pool.inputs["nodeConfig"]["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": ["tpu-res"]}


def test_tpu7x_slices_are_placed_by_a_workload_policy():
    run = run_program({**MINIMAL, "zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"})
    policy = run.one("gcp:compute/resourcePolicy:ResourcePolicy")
    assert policy.inputs["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}
    for pool in slice_pools(run):
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "policyName": policy.inputs["name"]}
        assert pool.inputs["autoscaling"]["maxNodeCount"] == 4
        assert pool.inputs["nodeConfig"]["machineType"] == "tpu7x-standard-4t"


def test_autopilot_is_regional_and_creates_no_node_pools():
    run = run_program({**MINIMAL, "clusterMode": "autopilot"})
    cluster = run.one(CLUSTER).inputs
    assert cluster["enableAutopilot"] is True and cluster["location"] == "us-east5"
    assert "removeDefaultNodePool" not in cluster and "datapathProvider" not in cluster
    assert run.of_type(NODE_POOL) == []
    assert run.outputs["nodePools"] == []


@pytest.mark.parametrize("slices", [1, 5])
def test_pool_count_follows_slices(slices):
    run = run_program({**MINIMAL, "slices": slices})
    assert len(slice_pools(run)) == slices
    assert run.outputs["totalChips"] == 16 * slices


@pytest.mark.parametrize("stack", ["prod", "dev", "jobset", "pathways"])
def test_host_network_pods_reach_the_bucket_as_the_node_account(stack):
    """Pods on the host network get no Workload Identity: the node account then needs the bucket (only it)."""
    run = committed_stack_run(stack)
    host_network = any('"hostNetwork": true' in json.dumps(r.inputs)
                       for r in run.resources if is_kubernetes_type(r.type))
    node_account = run.one(ACCOUNT, "nodes").inputs["accountId"]
    bindings = [b.inputs["member"] for b in run.of_type(BUCKET_IAM)]
    node_bound = any(member.startswith(f"serviceAccount:{node_account}@") for member in bindings)
    assert node_bound == host_network, (stack, host_network, bindings)


# ---- rules of GKE and Compute Engine the pools must follow ----------------------------------------------------

def test_flex_start_pools_scale_per_zone_without_queued_provisioning_or_auto_repair():
    """GKE validates a multi-host slice against the per-zone maximum ("Maximum node count 0 is not a valid size
    of TPU pod slice", vllm-project/ci-infra#545); queued provisioning needs ProvisioningRequests the stack does
    not create; cluster-toolkit gke-node-pool: "enable_flex_start needs node auto_repair set to false"."""
    from preview.harness import run_program
    run = run_program({**MINIMAL, "capacity": "flex-start"}, stack="flex")
    for pool in slice_pools(run):
        inputs = pool.inputs
        assert inputs["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 4, "locationPolicy": "ANY"}
        assert "queuedProvisioning" not in inputs and "nodeCount" not in inputs
        assert inputs["management"]["autoRepair"] is False
        assert inputs["nodeConfig"]["flexStart"] is True


@pytest.mark.parametrize("capacity, extra, warm", [
    ("on-demand", {}, 0), ("spot", {}, 0), ("spot", {"warmSlices": 1}, 1),
    ("reservation", {"reservationName": "r1"}, 2), ("reservation", {"reservationName": "r1", "warmSlices": 0}, 0),
])
def test_idle_slice_pools_scale_to_zero_and_warm_ones_keep_a_whole_slice(capacity, extra, warm):
    """GKE scales a multi-host TPU slice pool atomically, to 0 and back ("About TPUs in GKE",
    https://cloud.google.com/kubernetes-engine/docs/concepts/tpus); a pool that may scale holds 0..hosts per
    zone (a per-zone maximum below the hosts could never hold the slice, vllm-project/ci-infra#545). Warm pools
    (warmSlices; a reservation's default) keep exactly one slice. No initial node count: it is create-only in the
    provider and would replace pools that existed with a fixed count."""
    from preview.harness import run_program
    run = run_program({**MINIMAL, "capacity": capacity, **extra}, stack=f"pools-{capacity}-{warm}")
    pools = slice_pools(run)
    assert len(pools) == 2
    for index, pool in enumerate(pools):
        inputs = pool.inputs
        assert "initialNodeCount" not in inputs
        if index < warm:
            assert inputs["nodeCount"] == 4 and "autoscaling" not in inputs
        else:
            assert inputs["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 4, "locationPolicy": "ANY"}
            assert "nodeCount" not in inputs


def test_only_ct6e_pools_turn_smt_off(prod):
    """The GKE multislice tutorial creates ct6e pools with --threads-per-core=1; no source shows it elsewhere."""
    from preview.harness import run_program
    assert {p.inputs["nodeConfig"]["advancedMachineFeatures"]["threadsPerCore"] for p in slice_pools(prod)} == {1}
    v5e = run_program({**MINIMAL, "zone": "us-west4-a", "tpuGeneration": "v5e", "model": "qwen3-0.6b"}, stack="v5e")
    assert all("advancedMachineFeatures" not in p.inputs["nodeConfig"] for p in slice_pools(v5e))


def test_autopilot_nodes_run_as_the_stacks_node_account():
    """Autopilot nodes otherwise run as the Compute Engine default account, and host-network pods act as the
    node account (GKE "Autopilot: custom service account"; cluster_autoscaling.auto_provisioning_defaults)."""
    from preview.harness import run_program
    run = run_program({**MINIMAL, "clusterMode": "autopilot"}, stack="ap")
    defaults = run.one(CLUSTER).inputs["clusterAutoscaling"]["autoProvisioningDefaults"]
    assert defaults["serviceAccount"].startswith("tpu-multislice-nodes@")
    assert defaults["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]


def test_the_image_path_builds_pushes_and_lets_only_the_node_account_read():
    """workerEnvironment=image, imageBuilder=docker: an Artifact Registry repository with immutable tags (a tag
    names one image), the image pushed there by pulumi-docker-build, roles/artifactregistry.reader for the node
    account on that repository only (nodes pull the image;
    https://cloud.google.com/artifact-registry/docs/access-control). Cloud Build: tests/infra/test_cloud_build.py."""
    from preview.harness import run_program
    run = run_program({**MINIMAL, "workerEnvironment": "image", "imageBuilder": "docker"}, stack="img")
    repo = run.one("gcp:artifactregistry/repository:Repository").inputs
    assert repo["format"] == "DOCKER" and repo["dockerConfig"] == {"immutableTags": True}
    assert not run.of_type("command:local:Command")
    reader = run.one("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember").inputs
    assert reader["role"] == "roles/artifactregistry.reader"
    assert reader["member"].startswith("serviceAccount:tpu-multislice-nodes@")
    image = run.one("docker-build:index:Image").inputs
    assert image["push"] is True and image["platforms"] == ["linux/amd64"]
    [ref] = image["tags"]
    assert ref.startswith("us-east5-docker.pkg.dev/my-tpu-project/tpu-multislice-images/worker:")
    cluster = run.one("kubernetes:ray.io/v1:RayJob").inputs["spec"]["rayClusterSpec"]
    assert {c["image"] for c in cluster["headGroupSpec"]["template"]["spec"]["containers"]} == {ref}
    image_urn = run.one("docker-build:index:Image").urn
    assert image_urn in run.one("kubernetes:ray.io/v1:RayJob").dependencies

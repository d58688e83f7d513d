"""Cloud Storage FUSE's file cache lives on a disk of the pod's own, sized by dataCacheGiB and shared by the data
buckets, on every backend that mounts data; the mounts hold only the dataset's folder (workloads/fuse_cache.py,
workloads/common.py data_volumes).

Sources: gcs-fuse-csi-driver (https://github.com/GoogleCloudPlatform/gcs-fuse-csi-driver)
- pkg/webhook/sidecar_spec.go: the sidecar's cache volume is named `gke-gcsfuse-cache`, an emptyDir (on the node's
  boot disk) only when the pod has no volume of that name (GetSidecarContainerVolumeSpec); it runs as 65534;
- docs/troubleshooting.md, "File cache": the cache volume must be larger than fileCacheCapacity; for TPU families
  a Balanced or SSD Persistent Disk is recommended; a custom cache volume needs a pod fsGroup;
- pkg/csi_driver/utils.go parseVolumeAttributes: fileCacheCapacity is a Quantity, a binary one turned into
  file-cache:max-size-mb by /1024/1024;
- docs/sub-directory-mounts.md: the `only-dir=FOLDER` mount option mounts one folder of the bucket.
Cloud TPU "Storage options for Cloud TPU data" (https://cloud.google.com/tpu/docs/storage-options): v6e and TPU7x
attach Hyperdisk Balanced (not Persistent Disk), v4, v5e and v5p Balanced Persistent Disk.
"""
from __future__ import annotations

import io

import pytest

from core.tpu_catalog import CATALOG
from infra.config import ConfigError, NAMESPACE, build
from preview import prices
from preview.cli import render_cost
from preview.harness import run_program
from preview.model import build_plan
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads import fuse_cache
from workloads.backends import backend_for

TRAIN = "gs://my-data/c4/en/train-*.array_record"
EVAL = "gs://my-eval/c4/en/validation-*.array_record"
SIDECAR_GID = 65534
# The disk types the GKE Persistent Disk CSI driver can attach to each pod's node (Cloud TPU storage options).
ATTACHABLE = {"v4": {"pd-balanced"}, "v5e": {"pd-balanced"}, "v5p": {"pd-balanced"},
              "v6e": {"hyperdisk-balanced"}, "tpu7x": {"hyperdisk-balanced"}}


def _with_data(stack: str, **extra) -> dict:
    raw = load_stack_config(stack, REPO)
    # evalSteps: required with an eval split on several hosts (infra/config/data_rules.py check_data).
    raw.update({"datasetType": "grain", "datasetPath": TRAIN, "evalDatasetPath": EVAL, "evalSteps": 1,
                "runName": "c4-v1", **extra})
    if stack == "pathways":
        raw["pathwaysElasticSlices"] = 0
    return raw


def _objects(raw: dict, stack: str) -> list[dict]:
    run = run_program(raw, stack=stack)
    return [object_from_inputs(r.inputs, r.name) for r in run.resources if is_kubernetes_type(r.type)]


def _data_pods(objects: list[dict]) -> list[dict]:
    """Pod templates that mount data: Ray TPU workers, JobSet pods, the Pathways head."""
    pods = []
    for obj in objects:
        if obj["kind"] == "RayJob":
            pods += [group["template"] for group in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
        if obj["kind"] == "JobSet":
            pods += [job["template"]["spec"]["template"] for job in obj["spec"]["replicatedJobs"]]
    return [pod for pod in pods if any("csi" in volume for volume in pod["spec"].get("volumes", []))]


def _mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(quantity[:-2]) * units[quantity[-2:]]


@pytest.fixture(scope="module", params=["prod", "jobset", "pathways"])
def rendered(request):
    raw = _with_data(request.param, dataCacheGiB="60")
    return request.param, build(raw), _objects(raw, request.param)


def test_every_data_pod_caches_on_its_own_disk_that_holds_all_its_buckets_caches(rendered):
    stack, config, objects = rendered
    pods = _data_pods(objects)
    assert pods, "no pod mounts the data"
    [storage_class] = [o for o in objects if o["kind"] == "StorageClass"]
    for pod in pods:
        volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
        cache = volumes[fuse_cache.CACHE_VOLUME]
        assert "emptyDir" not in cache, "the cache would be on the node's boot disk"
        claim = cache["ephemeral"]["volumeClaimTemplate"]["spec"]
        assert claim["storageClassName"] == storage_class["metadata"]["name"]
        disk_mib = _mebibytes(claim["resources"]["requests"]["storage"])
        assert disk_mib == 60 * 1024
        fuse = [volume["csi"]["volumeAttributes"] for volume in volumes.values() if "csi" in volume]
        assert {attributes["bucketName"] for attributes in fuse} == {"my-data", "my-eval"}
        # Every bucket's cache together within the disk, less room for ext4's journal and inode tables.
        assert sum(_mebibytes(attributes["fileCacheCapacity"]) for attributes in fuse) <= disk_mib * 0.95
        assert pod["spec"]["securityContext"]["fsGroup"] == SIDECAR_GID


def test_the_cache_disk_is_a_type_the_pods_node_attaches_and_goes_with_the_pod(rendered):
    stack, config, objects = rendered
    [storage_class] = [o for o in objects if o["kind"] == "StorageClass"]
    kind = storage_class["parameters"]["type"]
    on_tpu = backend_for(config).data_on_tpu_hosts
    assert on_tpu == (stack != "pathways"), "the Pathways head on the CPU pool reads the data"
    assert kind in (ATTACHABLE[config.tpu.shape.generation.name] if on_tpu else {"pd-balanced"})
    assert storage_class["provisioner"] == "pd.csi.storage.gke.io"
    assert storage_class["reclaimPolicy"] == "Delete"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    if kind == "hyperdisk-balanced":   # the performance included at no charge, nothing provisioned beyond it
        assert storage_class["parameters"]["provisioned-iops-on-create"] == "3000"


def test_each_mount_holds_only_the_datasets_folder(rendered):
    stack, config, objects = rendered
    for pod in _data_pods(objects):
        options = {volume["csi"]["volumeAttributes"]["bucketName"]: volume["csi"]["volumeAttributes"]["mountOptions"]
                   for volume in pod["spec"]["volumes"] if "csi" in volume}
        assert options["my-data"].split(",")[-1] == "only-dir=c4/en"
        assert options["my-eval"].split(",")[-1] == "only-dir=c4/en"


def test_every_rendered_object_validates_against_the_kubernetes_schemas_and_crds(rendered):
    stack, config, objects = rendered
    report = validate_objects(objects, default_schemas_dir(), config.cluster.minimum_version)
    assert report.errors == [], report.errors


def test_two_globs_in_one_bucket_share_one_mount_of_their_common_folder():
    raw = _with_data("jobset", evalDatasetPath="gs://my-data/c4/de/validation-*.array_record")
    [pod] = _data_pods(_objects(raw, "jobset"))
    [fuse] = [volume["csi"]["volumeAttributes"] for volume in pod["spec"]["volumes"] if "csi" in volume]
    assert fuse["mountOptions"].endswith(",only-dir=c4")
    assert _mebibytes(fuse["fileCacheCapacity"]) == int(100 * 1024 * 0.9)


def test_a_synthetic_run_mounts_nothing_and_creates_no_disks():
    raw = load_stack_config("jobset", REPO)
    objects = _objects(raw, "jobset")
    assert not [o for o in objects if o["kind"] == "StorageClass"] and not _data_pods(objects)


def test_every_tpu_generation_has_a_cache_disk_type_it_attaches():
    assert set(CATALOG) == set(fuse_cache.TPU_DISK_TYPES) == set(ATTACHABLE)
    for generation, kind in fuse_cache.TPU_DISK_TYPES.items():
        assert kind in ATTACHABLE[generation]


@pytest.mark.parametrize("value", ["9", "70000"])
def test_a_cache_size_no_disk_has_is_refused_in_one_line(value):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, "datasetType": "grain", "datasetPath": TRAIN, "dataCacheGiB": value})
    [line] = error.value.problems
    assert line.startswith(f"{NAMESPACE}:dataCacheGiB={int(value)!r} is not valid") and "10 to 65536" in line


def test_the_plan_says_where_the_cache_is_and_what_it_costs_while_training_and_idle(rendered):
    """Priced as preview/prices.py prices disks (GiB-month list price over 730 hours), one disk per pod that
    reads data, in the training total and not in the idle one."""
    stack, config, objects = rendered
    raw = _with_data(stack, dataCacheGiB="60")
    plan = build_plan(run_program(raw, stack=stack), config, stack, default_schemas_dir())
    on_tpu = stack != "pathways"
    disks = config.tpu.slices * config.tpu.shape.hosts if on_tpu else 1
    kind = fuse_cache.disk_type(config, on_tpu)
    expected = round(prices.DISK_USD_PER_GIB_MONTH[kind] * 60 * disks / prices.HOURS_PER_MONTH, 2)
    cost = plan.cost
    assert cost.data_cache_usd_per_hour == expected > 0
    assert cost.training_usd_per_hour == round(cost.tpu_training_usd_per_hour + cost.system_usd_per_hour
                                               + cost.gke_fee_usd_per_hour + expected, 2)
    assert cost.idle_usd_per_hour == round(cost.tpu_idle_usd_per_hour + cost.system_usd_per_hour
                                           + cost.gke_fee_usd_per_hour, 2)
    text = io.StringIO()
    render_cost(cost, text)
    lines = text.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert any(f"data cache {expected:,.2f} USD/h" in line for line in lines)
    note = " ".join(lines)
    assert f"{disks} x 60 GiB {kind}" in note and "nothing idle" in " ".join(note.split())


def test_a_synthetic_run_has_no_data_cache_cost():
    raw = load_stack_config("prod", REPO)
    plan = build_plan(run_program(raw, stack="prod"), build(raw), "prod", default_schemas_dir())
    assert plan.cost.data_cache_usd_per_hour == 0 and not any("data cache" in n for n in plan.cost.notes)


@pytest.mark.parametrize("stack", ["prod", "jobset", "pathways"])
def test_the_job_whose_pods_claim_cache_disks_waits_for_their_storage_class(stack):
    """A claim of a StorageClass that does not exist yet stays Pending: the class is registered first."""
    run = run_program(_with_data(stack), stack=stack)
    [storage_class] = [r for r in run.resources if r.type == "kubernetes:storage.k8s.io/v1:StorageClass"]
    jobs = [r for r in run.resources if r.type.endswith((":RayJob", ":JobSet")) and "smoke" not in r.name]
    assert jobs and all(storage_class.urn in job.dependencies for job in jobs)


@pytest.mark.parametrize("machine, kind", [
    ("n2-standard-64", "pd-balanced"), ("n2d-standard-64", "pd-balanced"),
    ("c3-standard-88", "pd-balanced"), ("c3d-standard-90", "pd-balanced"),
    ("n4-standard-64", "hyperdisk-balanced"), ("c4-standard-96", "hyperdisk-balanced"),
    ("c4d-standard-96", "hyperdisk-balanced"), ("n4d-standard-64", "hyperdisk-balanced"),
])
def test_the_cpu_pools_cache_disk_follows_its_machine_series(machine, kind):
    """Compute Engine's default disk type per series (instances API, AttachedDiskInitializeParams.diskType): first
    and second generation and C3, C3D, M3 take Persistent Disk; A3, H3, Z3, every fourth generation (C4, N4, M4)
    and newer, Hyperdisk Balanced. A pd-balanced cache disk on an N4 node would never attach."""
    assert fuse_cache.cpu_disk_type(machine) == kind
    # The Pathways head reads the data on the CPU pool.
    config = build({"project": "my-tpu-project", "zone": "us-east5-b", "workloadBackend": "pathways",
                    "systemPoolMachineType": machine})
    assert fuse_cache.disk_type(config, on_tpu=False) == kind


def test_the_plans_quota_section_lists_the_cache_disks_regional_quota(rendered):
    """Every data-reading pod's cache disk is a zonal disk of the stack's region: at the most slices they need
    disks x dataCacheGiB of the region's disk quota (Compute Engine "Disk quotas": Balanced PD counts against
    SSD_TOTAL_GB), which the plan lists beside the TPU quota."""
    stack, config, objects = rendered
    raw = _with_data(stack, dataCacheGiB="60")
    plan = build_plan(run_program(raw, stack=stack), config, stack, default_schemas_dir())
    on_tpu = stack != "pathways"
    disks = config.tpu.slices * config.tpu.shape.hosts if on_tpu else 1
    kind = fuse_cache.disk_type(config, on_tpu)
    gb = -(-disks * 60 * 2**30 // 10**9)
    first, second = plan.tpu.disk_quota.splitlines()
    assert first == (f"disk quota to have: {gb} GB of {kind} in {config.gcp.region} ({disks} data cache "
                     f"disk(s) of 60 GiB)")
    assert ("SSD_TOTAL_GB" in second) == (kind == "pd-balanced")
    assert max(len("  " + line) for line in plan.tpu.disk_quota.splitlines()) <= 100
    # No data, no disks: nothing to list.
    plain = load_stack_config(stack, REPO)
    assert build_plan(run_program(plain, stack=stack), build(plain), stack,
                      default_schemas_dir()).tpu.disk_quota is None

"""Every wrong config is refused before any resource exists, with one line naming key, value and what is allowed."""
import pulumi
import pytest

from infra import versions
from infra.config import Capacity, ClusterMode, ConfigError, build
from preview.harness import GcpMocks, RecordingMonitor, run_program
from tests.conftest import MINIMAL

# (case id, config on top of MINIMAL, fragments that must all appear in one problem line)
BAD_CONFIGS = [
    ("unknown key with close match", {"slice": 3}, ["tpu-multislice:slice", "did you mean 'slices'"]),
    ("unknown key without match", {"zzz": 1}, ["tpu-multislice:zzz", "known keys:"]),
    ("missing project", {"project": None}, ["tpu-multislice:project is required"]),
    ("unknown generation", {"tpuGeneration": "v7"}, ["tpuGeneration='v7'", "v4, v5e, v5p, v6e, tpu7x"]),
    ("topology not valid for generation", {"tpuTopology": "2x2x2"}, ["tpuTopology='2x2x2'", "tpuGeneration='v6e'",
                                                                     "4x4"]),
    ("machine type of another generation", {"tpuMachineType": "ct5lp-hightpu-4t"},
     ["tpuMachineType='ct5lp-hightpu-4t'", "ct6e-standard-4t"]),
    ("single-host topology for multislice", {"tpuTopology": "2x2"}, ["slices=2", "single-host", "4x4"]),
    ("slices below one", {"slices": 0}, ["slices=0", "at least 1"]),
    ("slices not an integer", {"slices": "two"}, ["slices='two'", "must be an integer"]),
    ("boolean not a boolean", {"dcn": "yes"}, ["dcn='yes'", "true or false"]),
    ("capacity not a choice", {"capacity": "preemptible"}, ["capacity='preemptible'", "on-demand, spot, reservation, "
                                                                                      "flex-start"]),
    ("reservation without a name", {"capacity": "reservation"}, ["capacity='reservation'", "reservationName"]),
    ("reservation name without reservation", {"reservationName": "r1"}, ["reservationName='r1'",
                                                                         "capacity='on-demand'"]),
    ("zone outside region", {"region": "us-east1"}, ["zone='us-east5-b'", "region='us-east1'"]),
    ("malformed zone", {"zone": "useast5b"}, ["zone='useast5b'", "us-east5-b"]),
    ("gke version below generation minimum", {"gkeVersion": "1.30.5-gke.100"},
     ["gkeVersion='1.30.5-gke.100'", "1.31.2-gke.1115000", "tpuGeneration=v6e"]),
    ("gke version below dranet minimum", {"gkeVersion": "1.33", "dcn": True, "dranet": True},
     ["gkeVersion='1.33'", versions.DRANET_STANDARD, "dranet=true"]),
    ("gke version malformed", {"gkeVersion": "latest"}, ["gkeVersion='latest'", "1.34.1-gke.1829001"]),
    ("dranet without dcn", {"dranet": True}, ["dranet=true", "dcn=true"]),
    ("overlapping primary ranges", {"podCidr": "10.0.0.0/14"}, ["podCidr='10.0.0.0/14'", "overlaps",
                                                                  "nodeCidr='10.0.0.0/20'"]),
    ("overlapping dcn ranges", {"dcn": True, "dcnSubnets": ["10.50.0.0/16", "10.50.128.0/17"]},
     ["dcnSubnets[1]='10.50.128.0/17'", "overlaps", "dcnSubnets[0]"]),
    ("dcn range not a cidr", {"dcn": True, "dcnSubnets": ["10.50.0.1/16"]}, ["dcnSubnets[0]='10.50.0.1/16'", "CIDR"]),
    ("public range", {"nodeCidr": "8.8.0.0/20"}, ["nodeCidr='8.8.0.0/20'", "private"]),
    ("mtu out of range", {"dcn": True, "dcnMtu": 9000}, ["dcnMtu=9000", "1300-8896"]),
    ("cluster name too long", {"clusterName": "a" * 41}, ["clusterName='" + "a" * 41, "1-40"]),
    ("cluster name bad characters", {"clusterName": "TPU_cluster"}, ["clusterName='TPU_cluster'", "lowercase"]),
    ("namespace not a dns label", {"namespace": "Training"}, ["namespace='Training'", "DNS-1123"]),
    ("namespace too long", {"namespace": "n" * 64}, ["namespace='" + "n" * 64, "1-63"]),
    ("service account bad name", {"serviceAccount": "trainer_sa"}, ["serviceAccount='trainer_sa'", "DNS-1123"]),
    ("bucket name with google", {"bucketName": "google-ckpt"}, ["bucketName='google-ckpt'", "google"]),
    ("bucket name too long", {"bucketName": "b" * 64}, ["bucketName='" + "b" * 64, "3-63"]),
    # (a derived name that is too long is shortened with a hash: tests/infra/test_reup_and_names.py)
    ("derived bucket name with google", {"project": "my-google-project"}, ["bucketName is unset",
                                                                          "set bucketName"]),
    ("project id invalid", {"project": "My Project"}, ["project='My Project'", "6-30"]),
    ("soft delete out of range", {"softDeleteDays": 3}, ["softDeleteDays=3", "7-90"]),
    ("autopilot with dcn", {"clusterMode": "autopilot", "dcn": True}, ["dcn=true", "clusterMode='autopilot'"]),
    ("autopilot with node pool option", {"clusterMode": "autopilot", "systemPoolNodes": 2},
     ["systemPoolNodes", "clusterMode='autopilot'"]),
    ("autopilot below its multislice minimum", {"clusterMode": "autopilot", "tpuGeneration": "v5e", "zone": "us-west4-a",
                                                "gkeVersion": "1.28"}, ["gkeVersion='1.28'", "multislice"]),
]


def _config(overrides):
    raw = {**MINIMAL, **overrides}
    return {key: value for key, value in raw.items() if value is not None}


@pytest.mark.parametrize("overrides,fragments", [(o, f) for _, o, f in BAD_CONFIGS],
                         ids=[case for case, _, _ in BAD_CONFIGS])
def test_bad_config_is_refused_with_one_clear_line(overrides, fragments):
    with pytest.raises(ConfigError) as error:
        build(_config(overrides))
    matching = [line for line in error.value.problems if all(fragment in line for fragment in fragments)]
    assert matching, f"no problem line contains {fragments}: {error.value.problems}"
    assert all("\n" not in line for line in error.value.problems)


def test_all_problems_are_reported_together():
    with pytest.raises(ConfigError) as error:
        build(_config({"slices": 0, "capacity": "reservation", "namespace": "BAD"}))
    assert len(error.value.problems) == 3


def test_bad_config_registers_nothing_and_has_no_traceback():
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as error:
        run_program(_config({"tpuTopology": "4x5"}), monitor=monitor)
    assert monitor.registrations == []
    assert "tpuTopology='4x5'" in str(error.value)
    # RunError is the Pulumi exception whose message is shown without a stack trace.
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_defaults_give_the_tutorial_slice_shape():
    config = build(MINIMAL)
    assert config.gcp.region == "us-east5"
    assert config.cluster.mode is ClusterMode.STANDARD and config.cluster.deletion_protection
    assert config.tpu.capacity is Capacity.ON_DEMAND
    assert (config.tpu.shape.topology, config.tpu.slices, config.tpu.total_chips, config.tpu.total_hosts) == \
        ("4x4", 2, 32, 8)
    assert config.storage.keep_on_destroy
    assert config.storage.bucket_name == "my-tpu-project-tpu-multislice-ckpt"


def test_the_version_floor_is_the_highest_minimum_of_the_enabled_features():
    assert build(MINIMAL).cluster.minimum_version == "1.31.2-gke.1115000"  # v6e needs more than the Ray add-on
    with_dranet = build({**MINIMAL, "dcn": True, "dranet": True})
    assert with_dranet.cluster.minimum_version == versions.DRANET_STANDARD
    autopilot = build({**MINIMAL, "clusterMode": "autopilot"})
    assert autopilot.cluster.minimum_version == "1.31.2-gke.1115000"
    assert build({**MINIMAL, "gkeVersion": "1.35"}).cluster.gke_version == "1.35"
    # Floors are checked, never created with: unset gkeVersion leaves the version to the release channel.
    assert build(MINIMAL).cluster.gke_version is None


def test_version_prefix_satisfies_minimum_of_same_minor():
    assert versions.satisfies("1.34", "1.34.1-gke.1829001")
    assert not versions.satisfies("1.34.0-gke.999", "1.34.1-gke.1829001")
    assert versions.satisfies("1.34.1-gke.1829001", "1.34.1-gke.1829001")
    assert not versions.satisfies("1.33", "1.34.1-gke.1829001")


@pytest.mark.parametrize("overrides, words", [
    # GKE flex-start: "TPU v3 and v4 are not supported" (cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model)
    ({"capacity": "flex-start", "tpuGeneration": "v4", "tpuTopology": "2x2x2", "model": "qwen3-0.6b",
      "zone": "us-central2-b"},
     ["capacity='flex-start'", "tpuGeneration='v4'"]),
    # Managed DRANET machine families: cluster-toolkit gke-node-pool is_dranet_supported_machine (ct6e-, tpu7x-).
    ({"dcn": "true", "dranet": "true", "tpuGeneration": "v5e", "model": "qwen3-0.6b", "zone": "us-west4-a"},
     ["dranet=true is not available on tpu-multislice:tpuGeneration='v5e'", "ct5lp-hightpu-4t"]),
])
def test_rules_of_gke_capacity_and_dranet(overrides, words):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, **overrides})
    [line] = error.value.problems
    for word in words:
        assert word in line


def test_flex_start_needs_its_gke_floor():
    assert dict(build({**MINIMAL, "capacity": "flex-start"}).cluster.version_floors)["capacity=flex-start"] == \
        "1.33.0-gke.1712000"


DATA = {"datasetType": "grain", "datasetPath": "gs://my-data/c4/en/train-*.array_record", "runName": "c4-v1"}
PREFETCH = "the data mounts (gcsfuseMetadataPrefetchOnMount)"
HOST_KSA = "the data mounts of host-network pods (hostNetworkPodKSA)"


@pytest.mark.parametrize("overrides, floors", [
    ({}, {}),                                                       # synthetic data: no mounts
    (DATA, {PREFETCH: "1.32.1-gke.1357001"}),
    # JobSet pods without DRANET run on the host network and mount with hostNetworkPodKSA.
    ({**DATA, "workloadBackend": "jobset"}, {PREFETCH: "1.32.1-gke.1357001", HOST_KSA: "1.33.3-gke.1226000"}),
])
def test_the_data_mounts_fuse_features_have_their_gke_floors(overrides, floors):
    """GKE "Optimize Cloud Storage FUSE CSI driver for GKE performance": gcsfuseMetadataPrefetchOnMount needs
    1.32.1-gke.1357001 or later; hostNetworkPodKSA (GKE "Cloud Storage FUSE for host network Pods")
    1.33.3-gke.1226000. Checked like every other floor: a gkeVersion below is refused, the channel's default
    too (infra/gke_versions.py check_offered reads the same floors)."""
    found = dict(build({**MINIMAL, **overrides}).cluster.version_floors)
    assert {k: v for k, v in found.items() if "data mounts" in k} == floors
    if floors:
        with pytest.raises(ConfigError) as error:
            build({**MINIMAL, **overrides, "gkeVersion": "1.32.0-gke.1000000"})
        assert any(f"the minimum for {PREFETCH}" in line for line in error.value.problems)


@pytest.mark.parametrize("stack", ["dev", "prod", "jobset", "pathways"])
@pytest.mark.parametrize("backend", ["rayjob", "jobset", "pathways"])
def test_a_backend_switch_is_told_everything_in_one_run(stack, backend):
    """Switching a stack's workloadBackend: one run names every key the new backend refuses, and doing what those
    lines say (`unset KEY`, `set KEY=VALUE`) builds; never a second round of refusals, one key per `pulumi up`."""
    import re

    from preview.stack_files import load_stack_config
    from tests.conftest import REPO

    raw = {**load_stack_config(stack, REPO), "workloadBackend": backend}
    try:
        build(raw)
        return
    except ConfigError as first:
        problems = first.problems
    for line in problems:
        # A key that does nothing says so first (`KEY=VALUE: unset it; ...`); other refusals end with the fix.
        fix = (re.match(r"tpu-multislice:(\w+)=.*?: unset it; ", line)
               or re.search(r"(?:unset (\w+)|set (\w+)=(\w+))$", line))
        assert fix, f"the refusal does not say what to do: {line}"
        if fix.group(1):
            raw.pop(fix.group(1), None)
        else:
            raw[fix.group(2)] = fix.group(3)
    build(raw)          # raises with the second round if the first did not say everything

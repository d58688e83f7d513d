"""What the training identities are granted, read against what the code they run calls."""
from __future__ import annotations

import pytest

from tests.conftest import committed_stack_run

BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"

# Cloud Storage IAM predefined roles (https://cloud.google.com/storage/docs/access-control/iam-roles): the bucket-level
# permissions each role the stack may grant on the checkpoint bucket carries.
BUCKET_PERMISSIONS = {
    "roles/storage.objectUser": set(),   # objects.*, folders.*, managedFolders.*, multipartUploads.*: no buckets.*
    "roles/storage.legacyBucketReader": {"storage.buckets.get"},
}


@pytest.mark.parametrize("stack", ["prod", "dev", "jobset", "pathways"])
def test_every_principal_that_writes_checkpoints_can_get_the_bucket(stack):
    """MaxText 0.2.5 maxtext/utils/gcs_utils.py `mkdir_and_check_permissions` (called from
    maxtext/common/checkpointing.py) calls `storage.Client().get_bucket(name)`: storage.buckets.get. Every principal
    that gets roles/storage.objectUser must get it too, on the bucket only (GoogleCloudPlatform/kubernetes-engine-samples
    ai-ml/gke-ray/tpu/get-started/cluster/main.tf grants roles/storage.legacyBucketReader for the same call)."""
    run = committed_stack_run(stack)
    bindings = [b.inputs for b in run.of_type(BUCKET_IAM)]
    writers = {b["member"] for b in bindings if b["role"] == "roles/storage.objectUser"}
    assert writers
    for member in writers:
        roles = {b["role"] for b in bindings if b["member"] == member}
        granted = set().union(*(BUCKET_PERMISSIONS[role] for role in roles))
        assert "storage.buckets.get" in granted, (stack, member, roles)
        assert roles == {"roles/storage.objectUser", "roles/storage.legacyBucketReader"}, roles


def test_maxtext_really_gets_the_bucket_before_it_writes():
    """The installed MaxText is what the rule is about: if it stopped calling get_bucket the role could go."""
    import inspect

    from maxtext.utils import gcs_utils

    source = inspect.getsource(gcs_utils.mkdir_and_check_permissions)
    assert ".get_bucket(" in source


WORKLOAD_KINDS = ("kubernetes:ray.io/v1:RayJob", "kubernetes:ray.io/v1:RayCluster", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet")


@pytest.mark.parametrize("stack", ["prod", "dev", "jobset", "pathways"])
def test_workloads_start_only_after_every_grant_of_their_identity_exists(stack):
    """A pod that starts before its bucket or goodput binding exists fails with 403 and burns a restart; Pulumi
    creates a resource only after everything it depends on (https://www.pulumi.com/docs/iac/concepts/options/dependson/).
    The grants are the IAM members the training principal (or, for host-network pods, the node account) gets."""
    from tests.infra.test_stack import depends_on

    run = committed_stack_run(stack)
    grants = run.of_type(BUCKET_IAM) + run.of_type("gcp:projects/iAMMember:IAMMember")
    grants = [g for g in grants if not g.name.startswith("nodes-")]   # the node account's own GKE role
    workloads = [r for r in run.resources if r.type in WORKLOAD_KINDS]
    assert grants and workloads
    for workload in workloads:
        for grant in grants:
            assert depends_on(run, workload, grant), (workload.name, grant.name)


CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"


@pytest.mark.parametrize("stack", ["prod", "pathways"])
def test_goodput_reads_its_logs_with_one_permission_not_logs_viewer(stack):
    """ml-goodput-measurement's GoodputMonitor reads its entries back with Logger.list_entries (goodput.py):
    Cloud Logging entries.list, which needs logging.logEntries.list
    (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list). roles/logging.viewer carries far more
    (sinks, buckets, views, metrics...: https://cloud.google.com/iam/docs/roles-permissions/logging), so a custom
    role holds exactly that one permission and roles/logging.viewer is granted to no one."""
    run = committed_stack_run(stack)
    [role] = run.of_type(CUSTOM_ROLE)
    assert role.inputs["permissions"] == ["logging.logEntries.list"]
    project = role.inputs["project"]
    granted = {b.inputs["role"]: b for b in run.of_type("gcp:projects/iAMMember:IAMMember")}
    assert "roles/logging.viewer" not in granted
    reader = granted[f"projects/{project}/roles/{role.inputs['roleId']}"]
    assert role.urn in reader.dependencies   # the role exists before it is granted


def test_goodput_monitor_really_lists_entries():
    """The installed library is what the rule is about."""
    import inspect

    from ml_goodput_measurement.src import goodput

    assert ".list_entries(" in inspect.getsource(goodput)

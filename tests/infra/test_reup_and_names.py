"""`pulumi up`, `pulumi destroy`, `pulumi up` again any day later, and the longest names config accepts.

Rules played here, with their sources:
- IAM keeps a deleted custom role's id: the Google provider undeletes a role of the same id within 7 days of its
  deletion, and between day 7 and day 37 creating it fails ("You can't create a role_id ... which has been marked
  for deletion", failedPrecondition): terraform-provider-google resource_google_project_iam_custom_role.go
  (resourceGoogleProjectIamCustomRoleCreate) and website/docs/r/google_project_iam_custom_role.html.markdown.
- A service account created again under a deleted one's name gets a new uniqueId
  (https://cloud.google.com/iam/docs/service-accounts-delete-undelete).
- The id formats: terraform-provider-google google/verify/validation.go (validateIAMCustomRoleID
  ^[a-zA-Z0-9_.]{3,64}$, ServiceAccountNameRegex ^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$, validateGCEName RFC 1035
  at most 63); GKE cluster names at most 40 and node pools at most 40 characters; bucket names
  (https://cloud.google.com/storage/docs/buckets#naming); Artifact Registry repository ids
  (https://cloud.google.com/artifact-registry/docs/repositories/create-repos: lowercase letters, digits, hyphens,
  starting with a letter, at most 63).
"""
from __future__ import annotations

import re

import pytest

from preview import harness
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO

ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"


class FakeIamRoles:
    """Custom role ids of one project as IAM and the Google provider treat them across deletions."""

    UNDELETE_DAYS, HELD_DAYS = 7, 37

    def __init__(self):
        self.live: set[str] = set()
        self.deleted: dict[str, int] = {}   # role id -> day it was deleted

    def create(self, role_id: str, day: int) -> None:
        if role_id in self.deleted:
            age = day - self.deleted[role_id]
            if self.UNDELETE_DAYS <= age < self.HELD_DAYS:
                raise RuntimeError(f"Error 400: You can't create a role_id ({role_id}) which has been marked for "
                                   "deletion., failedPrecondition")
            del self.deleted[role_id]   # undeleted (< 7 days) or released (>= 37 days)
        self.live.add(role_id)

    def delete(self, role_id: str, day: int) -> None:
        self.live.discard(role_id)
        self.deleted[role_id] = day


def _role_id(run) -> str:
    [role] = run.of_type(ROLE)
    return role.inputs["roleId"]


@pytest.mark.parametrize("down_days", [1, 8, 20, 36, 40])
def test_destroy_then_up_any_day_later_creates_the_goodput_role(monkeypatch, down_days):
    config = load_stack_config("prod", REPO)
    iam = FakeIamRoles()
    monkeypatch.setitem(harness.ACCOUNT_CREATION, "n", 0)
    first = run_program(config, stack="prod")
    iam.create(_role_id(first), day=0)
    # A second `up` of the living stack reads the same account, so the same role: nothing is replaced.
    assert _role_id(run_program(config, stack="prod")) == _role_id(first)
    # `pulumi destroy` deletes the role and the node account; the next `up` creates the account again.
    iam.delete(_role_id(first), day=1)
    monkeypatch.setitem(harness.ACCOUNT_CREATION, "n", 1)
    second = run_program(config, stack="prod")
    iam.create(_role_id(second), day=1 + down_days)
    assert _role_id(second) != _role_id(first)
    # The grant names the role this `up` creates.
    granted = {b.inputs["role"] for b in second.of_type(PROJECT_IAM)}
    assert f"projects/{config['project']}/roles/{_role_id(second)}" in granted


def test_the_fake_iam_refuses_a_fixed_role_id_inside_the_window():
    """The model above is not vacuous: an id kept across destroy fails on day 8 and on day 36."""
    for day in (9, 37):
        iam = FakeIamRoles()
        iam.create("tpuMultisliceGoodputReader_x", day=0)
        iam.delete("tpuMultisliceGoodputReader_x", day=1)
        with pytest.raises(RuntimeError, match="marked for deletion"):
            iam.create("tpuMultisliceGoodputReader_x", day=day)


RFC1035_63 = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# (type token, input) -> the rule its value must obey.
ID_RULES: dict[tuple[str, str], re.Pattern] = {
    (ROLE, "roleId"): re.compile(r"^[a-zA-Z0-9_.]{3,64}$"),
    ("gcp:serviceaccount/account:Account", "accountId"): re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$"),
    ("gcp:container/cluster:Cluster", "name"): re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$"),
    ("gcp:container/nodePool:NodePool", "name"): re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$"),
    ("gcp:compute/network:Network", "name"): RFC1035_63,
    ("gcp:compute/subnetwork:Subnetwork", "name"): RFC1035_63,
    ("gcp:compute/router:Router", "name"): RFC1035_63,
    ("gcp:compute/routerNat:RouterNat", "name"): RFC1035_63,
    ("gcp:compute/firewall:Firewall", "name"): RFC1035_63,
    ("gcp:compute/resourcePolicy:ResourcePolicy", "name"): RFC1035_63,
    ("gcp:storage/bucket:Bucket", "name"): re.compile(r"^[a-z0-9][-_a-z0-9]{1,61}[a-z0-9]$"),
    ("gcp:artifactregistry/repository:Repository", "repositoryId"): RFC1035_63,
}
# Inputs of Google Cloud resources that are the resource's own id.
ID_INPUTS = ("name", "accountId", "roleId", "repositoryId")

LONGEST_CLUSTER = "t" * 20 + "-" + "m" * 19           # 40: GKE's limit, and what config accepts
LONGEST_PROJECT = "p" + "-project" * 3 + "-long"     # 30: the longest project id
VARIANTS = {
    **{stack: {} for stack in COMMITTED_STACKS},
    "image": {"workerEnvironment": "image"},
    "tpu7x": {"zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x2", "model": "qwen3-0.6b",
              "workloadBackend": "jobset"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_id_derived_from_the_longest_names_is_valid(variant):
    assert len(LONGEST_CLUSTER) == 40 and len(LONGEST_PROJECT) == 30
    stack = variant if variant in COMMITTED_STACKS else "prod"
    config = {**load_stack_config(stack, REPO), **VARIANTS[variant],
              "clusterName": LONGEST_CLUSTER, "project": LONGEST_PROJECT}
    config.pop("bucketName", None)
    run = run_program(config, stack=stack)
    checked = set()
    for resource in run.resources:
        if not resource.custom or not resource.type.startswith("gcp:"):
            continue
        for key in ID_INPUTS:
            value = resource.inputs.get(key)
            if not isinstance(value, str):
                continue
            rule = ID_RULES.get((resource.type, key))
            assert rule is not None, f"{resource.type} {key}={value!r}: add the service's rule to ID_RULES"
            assert rule.match(value), f"{resource.type} {key}={value!r} breaks {rule.pattern}"
            checked.add((resource.type, key))
    assert (ROLE, "roleId") in checked and ("gcp:storage/bucket:Bucket", "name") in checked
    if variant == "image":
        assert ("gcp:artifactregistry/repository:Repository", "repositoryId") in checked
    if variant == "tpu7x":
        assert ("gcp:compute/resourcePolicy:ResourcePolicy", "name") in checked

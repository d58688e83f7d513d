"""Read access on the run's data and weights buckets is decided before anything registers (infra/bucket_access.py):
granted on a bucket of the stack's project, left to the owner of a bucket in another project (or one the deployer
cannot read), with the one command that owner runs, and `pulumi up` goes on.

Sources: a BucketIAMMember needs storage.buckets.setIamPolicy on its bucket (IAM permissions for Cloud Storage,
https://cloud.google.com/storage/docs/access-control/iam-permissions); the deployer holds roles/storage.admin on the
stack's project only (preview/deployer_roles.py). The bucket's project number is the Storage API's answer
(terraform-provider-google resource_storage_bucket.go setStorageBucket: d.Set("project_number",
res.ProjectNumber)). The owner's command: https://cloud.google.com/sdk/gcloud/reference/storage/buckets/
add-iam-policy-binding.
"""
from __future__ import annotations

import pytest

from infra.config import build
from infra.identity import workload_identity_member
from preview import harness
from preview.assumptions import assumptions
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO

DATA = "gs://shared-corpus/c4/train-*.array_record"
WEIGHTS = "gs://my-weights/llama3-8b/0/items"
IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
OTHER_PROJECT = "987654321098"


def _raw(stack: str = "prod") -> dict:
    raw = load_stack_config(stack, REPO)
    raw.update({"datasetType": "grain", "datasetPath": DATA, "loadParametersPath": WEIGHTS, "runName": "c4-v1"})
    if stack == "pathways":
        raw.update({"pathwaysElasticSlices": 0, "loadParametersPath": "gs://my-weights/qwen3-0.6b/0/items"})
    return raw


def _read_buckets(run) -> dict[str, set[str]]:
    """bucket -> members granted objectViewer on the run's data and weights (the workers' image build reads its
    own staging bucket, a grant of the stack's build: tests/infra/test_cloud_build.py)."""
    granted: dict[str, set[str]] = {}
    for r in run.of_type(IAM_MEMBER):
        if r.inputs["role"] == "roles/storage.objectViewer" and r.name != "builder-staging":
            granted.setdefault(r.inputs["bucket"], set()).add(r.inputs["member"])
    return granted


def _principal(raw: dict) -> str:
    config = build(raw)
    return workload_identity_member(harness.FAKE_PROJECT_NUMBER, config.gcp.project, config.kubernetes.namespace,
                                    config.kubernetes.service_account)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_buckets_of_the_stacks_project_are_granted_and_nothing_is_left_to_an_owner(caplog):
    raw = _raw()
    caplog.clear()
    run = run_program(raw, stack="prod")
    assert _read_buckets(run) == {"shared-corpus": {_principal(raw)}, "my-weights": {_principal(raw)}}
    assert not any("add-iam-policy-binding" in line for line in _warnings(caplog))


@pytest.mark.parametrize("answer, why", [
    (OTHER_PROJECT, f"is in another project (number {OTHER_PROJECT})"),
    ("googleapi: Error 403: deployer@p.iam.gserviceaccount.com does not have storage.buckets.get access to the "
     "Google Cloud Storage bucket. Permission 'storage.buckets.get' denied on resource (or it may not exist)., "
     "forbidden", "could not be read (googleapi: Error 403: deployer@p.iam.gserviceaccount.com does not have"),
])
def test_a_bucket_of_another_project_gets_no_binding_and_its_owner_gets_the_command(monkeypatch, caplog, answer,
                                                                                       why):
    """Without the decision the stack registered a BucketIAMMember on the other project's bucket, which fails
    `pulumi up` with 403 after the network, the bucket and the cluster exist."""
    monkeypatch.setitem(harness.BUCKET_PROJECTS, "shared-corpus", answer)
    raw = _raw()
    caplog.clear()
    run = run_program(raw, stack="prod")
    assert set(_read_buckets(run)) == {"my-weights"}               # the stack's own bucket is still granted
    assert run.outputs["clusterName"]                              # and the rest of the stack goes on
    lines = "\n".join(_warnings(caplog)).splitlines()
    first = next(i for i, line in enumerate(lines) if "bucket shared-corpus" in line)
    # The sentence, wrapped within 100 columns (infra/up_messages.py), ends with what follows it.
    start = next(i for i in range(first, len(lines)) if lines[i].endswith("its owner runs:"))
    assert why in " ".join(line.strip() for line in lines[first:start + 1])
    # The principal's pool in P= on the line before (each line within 100 columns), as a shell expands it.
    variable, value = lines[start + 1].strip().split("=", 1)
    command = " ".join(line.strip().rstrip("\\").strip() for line in lines[start + 2:start + 5])
    assert command.replace(f"${variable}", value) == (
        "gcloud storage buckets add-iam-policy-binding gs://shared-corpus "
        f"--member={_principal(raw)} --role=roles/storage.objectViewer")
    assert all(len(line) <= 100 for line in lines[first:start + 5]), lines[first:start + 5]


def test_host_network_pods_name_the_node_account_in_the_owners_grants_too(monkeypatch, caplog):
    """Pathways pods run on the host network and read as the node service account (infra/identity.py): the owner
    grants both identities, as the stack does on its own buckets."""
    monkeypatch.setitem(harness.BUCKET_PROJECTS, "shared-corpus", OTHER_PROJECT)
    raw = _raw("pathways")
    caplog.clear()
    run = run_program(raw, stack="pathways")
    assert "shared-corpus" not in _read_buckets(run)
    text = "\n".join(_warnings(caplog))
    config = build(raw)
    node = f"serviceAccount:{config.names.node_service_account}@{config.gcp.project}.iam.gserviceaccount.com"
    pool, _, subject = _principal(raw).partition("/workloadIdentityPools")
    assert f"P={pool}/workloadIdentityPools\n" in text and f"--member=$P{subject} \\" in text
    assert f"--member={node} \\" in text
    # The node account the command names is the one the stack creates.
    account = run.one("gcp:serviceaccount/account:Account", "nodes")
    assert node == f"serviceAccount:{account.inputs['accountId']}@{account.inputs['project']}.iam.gserviceaccount.com"


def test_the_offline_plan_assumes_the_stacks_project_and_says_so():
    raw = _raw()
    run = run_program(raw, stack="prod")
    assert set(_read_buckets(run)) == {"shared-corpus", "my-weights"}
    [line] = [line for line in assumptions(build(raw)) if line.startswith("read buckets")]
    assert "shared-corpus, my-weights" in line and "my-tpu-project" in line and "its owner" in line


def test_the_decision_is_made_before_anything_registers():
    """The bucket look-up is a plain invoke made before the first resource registers, so its answer decides which
    bindings register at all (nothing half-created, nothing decided inside an apply)."""
    seen: list[int] = []

    class Counting(harness.GcpMocks):
        monitor: harness.RecordingMonitor | None = None

        def call(self, args):
            if args.token == harness.GET_BUCKET_TOKEN and args.args.get("name") == "shared-corpus":
                seen.append(len(self.monitor.registrations))
            return super().call(args)

    mocks = Counting()
    mocks.monitor = harness.RecordingMonitor(mocks)
    run_program(_raw(), stack="prod", monitor=mocks.monitor)
    assert seen == [0]


def test_a_bucket_that_does_not_exist_is_named_so_and_gets_no_owner_command():
    """The Storage API answers 404 / notFound for a bucket that does not exist
    (https://cloud.google.com/storage/docs/json_api/v1/status-codes#404-not-found): a mistyped name, for which no
    owner can run anything."""
    from infra.bucket_access import decide

    def look_up(bucket):
        raise Exception("invoke of gcp:storage/getBucket:getBucket failed: googleapi: Error 404: The specified "
                        "bucket does not exist., notFound")
    raw = _raw()
    access = decide(build(raw), "123", look_up)
    assert access.granted == ()
    assert access.owner_grants and all("does not exist" in line for line in access.owner_grants)
    assert not any("its owner runs" in line or "add-iam-policy-binding" in line for line in access.owner_grants)

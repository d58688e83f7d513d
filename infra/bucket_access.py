"""Whether the stack can grant its training identity read access on each bucket the run reads (data, eval data,
starting weights), decided before anything registers.

Granting on a bucket is `storage.buckets.setIamPolicy` on that bucket. The deployer holds roles/storage.admin on
the stack's project only (preview/deployer_roles.py), so a bucket of another project (a shared dataset, a
third-party bucket) would fail `pulumi up` with 403 on its BucketIAMMember after the network, bucket and cluster
were created. Neither Cloud Storage's testIamPermissions nor any other permission test is exposed by pulumi-gcp
10.2.0 as a function (its storage functions read buckets, objects and IAM policies; reading a policy needs
getIamPolicy, which says nothing about setIamPolicy), so the look-up reads the bucket's project number
(`gcp.storage.get_bucket`: `project_number` is the Storage API's answer, terraform-provider-google
resource_storage_bucket.go setStorageBucket; its `project` is not, it falls back to the provider's project when
Compute's projects.get is refused) and compares it with the stack's:
- the stack's project: the stack grants (the deployer's storage.admin there covers it);
- another project, or a bucket whose metadata the deployer cannot read (storage.buckets.get, which every
  predefined role holding setIamPolicy also holds): the stack grants nothing there and prints the one command the
  bucket's owner runs, and goes on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from infra.config import NAMESPACE, StackConfig
from infra.identity import READ_ROLE, read_buckets, workload_identity_member

_INVOKE_FAILED = re.compile(r"^invoke of \S+ failed: |\s*\(\w+\)$")
# The Storage API's answer for a bucket that does not exist: 404, "notFound" (JSON API error codes,
# https://cloud.google.com/storage/docs/json_api/v1/status-codes#404-not-found). No owner can grant on it.
_NOT_FOUND = re.compile(r"Error 404|notFound|bucket does not exist", re.IGNORECASE)


@dataclass(frozen=True)
class ReadAccess:
    """Which read buckets the stack grants on, and the grant commands left to other buckets' owners."""
    granted: tuple[str, ...]
    owner_grants: tuple[str, ...] = ()     # warning lines: why, then the command (shell continuation lines)

    def grants_on(self, bucket: str) -> bool:
        return bucket in self.granted


def members(config: StackConfig, project_number: str) -> tuple[str, ...]:
    """Who reads the buckets: the training pods' identity, and the node account where the pods use the host
    network (as infra/identity.py grants)."""
    training = workload_identity_member(project_number, config.gcp.project, config.kubernetes.namespace,
                                        config.kubernetes.service_account)
    if not config.pods_use_host_network:
        return (training,)
    node_account = f"serviceAccount:{config.names.node_service_account}@{config.gcp.project}.iam.gserviceaccount.com"
    return training, node_account


# Where a Workload Identity principal is cut so that both parts fit a line (the whole runs to ~150 columns).
_POOLS = "/workloadIdentityPools"


def owner_command(bucket: str, member: str) -> str:
    """The grant the bucket's owner runs (https://cloud.google.com/sdk/gcloud/reference/storage/buckets/
    add-iam-policy-binding), one option per line. A Workload Identity principal is longer than a line: its
    pool's part goes in a shell variable on the line before (P=...), so every line fits 100 columns and the
    lines still paste into a shell as they are."""
    pool, marker, subject = member.partition(_POOLS)
    if marker:
        return (f"  P={pool}{marker}\n  gcloud storage buckets add-iam-policy-binding gs://{bucket} \\\n"
                f"    --member=$P{subject} \\\n    --role={READ_ROLE}")
    return (f"  gcloud storage buckets add-iam-policy-binding gs://{bucket} \\\n"
            f"    --member={member} \\\n    --role={READ_ROLE}")


def decide(config: StackConfig, project_number: str,
           bucket_project_number: Callable[[str], object]) -> ReadAccess:
    """`bucket_project_number(bucket)` returns the bucket's project number or raises what the look-up raised."""
    granted, lines = [], []
    for bucket in read_buckets(config):
        try:
            number, why = str(bucket_project_number(bucket)), None
        except Exception as error:  # noqa: BLE001 (the provider's invoke errors are plain Exceptions)
            text = str(error).strip()
            number, why = None, _INVOKE_FAILED.sub("", text.splitlines()[0]) if text else type(error).__name__
        if number == str(project_number):
            granted.append(bucket)
            continue
        if why is not None and _NOT_FOUND.search(why):
            lines.append(f"{NAMESPACE}: bucket {bucket} does not exist ({why}): check the bucket name in "
                         "datasetPath, evalDatasetPath and loadParametersPath")
            continue
        where = (f"is in another project (number {number})" if why is None
                 else f"could not be read ({why})")
        lines.append(f"{NAMESPACE}: bucket {bucket} {where}: the stack grants no read access there; "
                     "its owner runs:")
        lines += [owner_command(bucket, member) for member in members(config, project_number)]
    return ReadAccess(granted=tuple(granted), owner_grants=tuple(lines))


def look_up(config: StackConfig, project_number: str) -> ReadAccess:
    """The decision against Cloud Storage (one bucket read per read bucket)."""
    import pulumi_gcp as gcp
    return decide(config, project_number, lambda bucket: gcp.storage.get_bucket(name=bucket).project_number)

"""The checkpoint bucket."""
from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from infra.component import child_options, component_type
from infra.config import GcpSettings, StorageSettings

_DAY_SECONDS = 24 * 3600
# What the bucket keeps only for a while (object name prefix → days since the object was written). Never the
# checkpoints (maxtext/<run>/checkpoints: MaxText keeps the newest checkpointsToKeep itself) nor TensorBoard logs:
# - maxtext/jax_cache/: JAX's persistent compile cache (core/maxtext_args.py); a deleted entry is compiled again.
# - ray-results/: Ray Train's run state (trainer/entrypoint.py --storage-path); runs resume from MaxText's own
#   checkpoints, never from it.
# - pathways/: the Pathways servers' scratch (gcs_scratch_location, workloads/pathways/spec.py).
EXPIRING_PREFIXES: dict[str, int] = {"maxtext/jax_cache/": 30, "ray-results/": 30, "pathways/": 7}
BUCKET_LABELS = {"app": "tpu-multislice"}


def lifecycle_rules() -> list[gcp.storage.BucketLifecycleRuleArgs]:
    """One Delete rule per expiring prefix (Cloud Storage Object Lifecycle Management: `age` counts days since an
    object's creation, `matchesPrefix` limits the rule to names starting with the prefix;
    https://cloud.google.com/storage/docs/lifecycle). Deleted objects stay recoverable for softDeleteDays."""
    return [gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=days, matches_prefixes=[prefix]))
            for prefix, days in EXPIRING_PREFIXES.items()]


class CheckpointBucket(pulumi.ComponentResource):
    """Checkpoints and TensorBoard logs.

    Hierarchical namespace gives atomic directory renames, which Orbax relies on when it writes through
    GCS FUSE (docs/platform-notes.md §6). With keep_on_destroy the bucket is retained by `pulumi destroy` (the stack
    forgets it; the data stays), never force-destroyed, and adopted again by the next `pulumi up`.
    """

    def __init__(self, name: str, gcp_settings: GcpSettings, settings: StorageSettings,
                 depends_on: list[pulumi.Resource], adopt: bool = False, protect: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "CheckpointBucket"), name, None, opts)
        # adopt: a bucket kept by an earlier `pulumi destroy` exists under this name (infra/preflight.py looked it
        # up), so it is imported instead of created (creating it would fail with 409). Pulumi ignores `import_` once
        # the bucket is in the stack's state. Since Pulumi 3.174 an import whose inputs differ imports and then
        # updates the bucket to the inputs below: the look-up refuses a kept bucket in another location or without
        # hierarchical namespace (fixed at creation: the update would be a replace) before anything registers, and
        # warns, one line per setting, what the adoption changes (soft delete, lifecycle rules, labels).
        # protect: `pulumi destroy` and replacements refuse to touch the bucket until deletionProtection is off.
        self.bucket = gcp.storage.Bucket(
            "checkpoints",
            name=settings.bucket_name,
            project=gcp_settings.project,
            location=settings.location,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=True),
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                retention_duration_seconds=settings.soft_delete_days * _DAY_SECONDS),
            force_destroy=not settings.keep_on_destroy,
            lifecycle_rules=lifecycle_rules(),
            labels=dict(BUCKET_LABELS),
            opts=child_options(self, depends_on=depends_on, retain_on_delete=settings.keep_on_destroy,
                               import_=settings.bucket_name if adopt else None, protect=protect),
        )
        self.name = self.bucket.name
        self.url = self.bucket.url
        self.register_outputs({"name": self.name, "url": self.url})

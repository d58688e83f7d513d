"""The checkpoint bucket."""
from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from infra.component import child_options, component_type
from infra.config import GcpSettings, StorageSettings

_DAY_SECONDS = 24 * 3600


class CheckpointBucket(pulumi.ComponentResource):
    """Checkpoints and TensorBoard logs.

    Hierarchical namespace gives atomic directory renames, which Orbax relies on when it writes through
    GCS FUSE (docs/platform-notes.md §6). With keep_on_destroy the bucket is retained by `pulumi destroy` (the stack
    forgets it; the data stays) and never force-destroyed.
    """

    def __init__(self, name: str, gcp_settings: GcpSettings, settings: StorageSettings,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "CheckpointBucket"), name, None, opts)
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
            labels={"app": "tpu-multislice"},
            opts=child_options(self, depends_on=depends_on, retain_on_delete=settings.keep_on_destroy),
        )
        self.name = self.bucket.name
        self.url = self.bucket.url
        self.register_outputs({"name": self.name, "url": self.url})

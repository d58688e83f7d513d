"""Resuming after `pulumi destroy`: a kept checkpoint bucket is adopted by the next `pulumi up`, never re-created.

Sources: the Google provider does not adopt an existing bucket, so creating one whose name exists fails with 409;
Pulumi has no "adopt if exists" (pulumi/pulumi#3388) but `import_` adopts a resource by ID, fails when it does not
exist, and is ignored once that ID is in the stack's state (https://www.pulumi.com/docs/iac/concepts/options/import/).
The look-up is `gcp.storage.get_bucket`, which raises the Storage API's 404 when the bucket is absent
(terraform-provider-google data_source_google_storage_bucket.go returns the Buckets.Get error).
"""
from __future__ import annotations

import pytest

from preview import harness
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO

BUCKET = "gcp:storage/bucket:Bucket"
PROD_BUCKET = "my-tpu-project-tpu-multislice-prod-ckpt"


def _bucket(run):
    [bucket] = run.of_type(BUCKET)
    return bucket


def test_up_destroy_up_adopts_the_kept_bucket(monkeypatch):
    prod = load_stack_config("prod", REPO)
    # First up: nothing exists, the bucket is created.
    first = _bucket(run_program(prod, stack="prod"))
    assert first.import_id == "" and first.retain_on_delete     # destroy keeps it (keepCheckpointsOnDestroy)
    # `pulumi destroy` retained the bucket: it still exists, the stack no longer holds it.
    monkeypatch.setitem(harness.EXISTING, "buckets", {PROD_BUCKET})
    second = _bucket(run_program(prod, stack="prod"))
    assert second.import_id == PROD_BUCKET
    # Same inputs as the first up, or the import would fail on a diff.
    assert second.inputs == first.inputs


def test_a_bucket_that_destroy_deletes_is_never_looked_up_or_imported(monkeypatch):
    dev = load_stack_config("dev", REPO)
    monkeypatch.setitem(harness.EXISTING, "buckets", {f"{dev['project']}-tpu-multislice-dev-ckpt"})
    bucket = _bucket(run_program(dev, stack="dev"))
    assert bucket.import_id == "" and not bucket.retain_on_delete


@pytest.mark.parametrize("stack,protected", [("prod", True), ("dev", False)])
def test_deletion_protection_also_protects_the_bucket(stack, protected):
    """Prod data survives destroy: with deletionProtection (default true) the bucket is `protect`ed, so destroy and
    replacements refuse to touch it until the user turns deletionProtection off."""
    assert _bucket(run_program(load_stack_config(stack, REPO), stack=stack)).protect is protected


def test_a_bucket_name_that_cannot_be_read_is_refused_in_one_line(monkeypatch):
    """A 403 (the name belongs to another project) is neither "absent" nor "ours": refused before anything exists."""
    class Forbidden(harness.GcpMocks):
        def call(self, args):
            if args.token == harness.GET_BUCKET_TOKEN:
                return {}, [("name", "googleapi: Error 403: caller does not have storage.buckets.get access, forbidden")]
            return super().call(args)

    monitor = harness.RecordingMonitor(Forbidden())
    with pytest.raises(Exception) as error:
        run_program(load_stack_config("prod", REPO), stack="prod", monitor=monitor)
    assert "\n" not in str(error.value) and f"bucket '{PROD_BUCKET}'" in str(error.value)
    assert [r for r in monitor.registrations if r.custom] == []

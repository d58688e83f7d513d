"""Resuming after `pulumi destroy`: a kept checkpoint bucket is adopted by the next `pulumi up`, never re-created.

Sources: the Google provider does not adopt an existing bucket, so creating one whose name exists fails with 409;
Pulumi has no "adopt if exists" (pulumi/pulumi#3388) but `import_` adopts a resource by ID, fails when it does not
exist, and is ignored once that ID is in the stack's state (https://www.pulumi.com/docs/iac/concepts/options/import/).
The look-up is `gcp.storage.get_bucket`, which raises the Storage API's 404 when the bucket is absent
(terraform-provider-google data_source_google_storage_bucket.go returns the Buckets.Get error).
"""
from __future__ import annotations

import re

import pytest

from preview import harness
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO

BUCKET = "gcp:storage/bucket:Bucket"
PROD_BUCKET = "my-tpu-project-tpu-multislice-prod-ckpt"


def _bucket(run):
    return run.one(BUCKET, "checkpoints")


def kept_bucket(inputs: dict, **changes) -> dict:
    """What `get_bucket` reads of a bucket the stack created with `inputs` (wire keys), with `changes`; Cloud
    Storage reports the location in upper case. As the provider answers a data source: `labels` empty (only keys a
    configuration set; a data source has none), every label of the bucket in `effectiveLabels`, with the one
    pulumi-gcp adds to what it creates (terraform-provider-google resource_storage_bucket.go setStorageBucket,
    google/tpgresource/labels.go SetLabels)."""
    found = {
        "location": inputs["location"].upper(),
        "hierarchicalNamespaces": [{"enabled": inputs["hierarchicalNamespace"]["enabled"]}],
        "softDeletePolicies": [{"retentionDurationSeconds": inputs["softDeletePolicy"]["retentionDurationSeconds"],
                                "effectiveTime": "2026-01-01T00:00:00Z"}],
        "lifecycleRules": [{"actions": [{"type": rule["action"]["type"], "storageClass": ""}],
                            "conditions": [dict(rule["condition"])]} for rule in inputs["lifecycleRules"]],
        "labels": {},
        "effectiveLabels": {**inputs["labels"], "goog-pulumi-provisioned": "true"},
    }
    return {**found, **changes}


def _play_kept(monkeypatch, inputs: dict, **changes) -> None:
    monkeypatch.setitem(harness.EXISTING, "buckets", {PROD_BUCKET})
    monkeypatch.setitem(harness.KEPT_BUCKETS, PROD_BUCKET, kept_bucket(inputs, **changes))


def _adoption_warnings(caplog) -> list[str]:
    lines = [r.getMessage() for r in caplog.records]
    start = next((i for i, line in enumerate(lines) if line.startswith("adopting kept bucket")), len(lines))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def test_up_destroy_up_adopts_the_kept_bucket(monkeypatch, caplog):
    prod = load_stack_config("prod", REPO)
    # First up: nothing exists, the bucket is created.
    first = _bucket(run_program(prod, stack="prod"))
    assert first.import_id == "" and first.retain_on_delete     # destroy keeps it (keepCheckpointsOnDestroy)
    # `pulumi destroy` retained the bucket: it still exists as the first up made it, the stack no longer holds it.
    _play_kept(monkeypatch, first.inputs)
    second = _bucket(run_program(prod, stack="prod"))
    assert second.import_id == PROD_BUCKET
    # Same inputs as the first up: the import changes nothing, and nothing is announced.
    assert second.inputs == first.inputs
    assert _adoption_warnings(caplog) == []


@pytest.mark.parametrize("stack_location,kept_location", [("us-east5", "US-CENTRAL1"), ("US", "EU")])
def test_a_kept_bucket_in_another_location_is_refused_in_one_line_before_anything_registers(
        monkeypatch, stack_location, kept_location):
    """A bucket cannot move (https://cloud.google.com/storage/docs/moving-buckets): adopting one in another location
    would be a replace, which `protect` refuses, or a 409 on its name. Refused by the look-up at start."""
    prod = {**load_stack_config("prod", REPO), "bucketLocation": stack_location}
    first = _bucket(run_program(prod, stack="prod"))
    _play_kept(monkeypatch, first.inputs, location=kept_location)
    monitor = harness.RecordingMonitor(harness.GcpMocks())
    with pytest.raises(Exception) as error:
        run_program(prod, stack="prod", monitor=monitor)
    # The message as `pulumi up` prints it: each problem on a line of its own, wrapped under its indent (read whole).
    message = re.sub(r"\n {4,}", " ", str(error.value))
    [line] = [line for line in message.splitlines() if "bucketLocation" in line]
    assert f"bucketLocation={stack_location!r}" in line and kept_location in line and PROD_BUCKET in line
    assert "Traceback" not in str(error.value)
    assert [r for r in monitor.registrations if r.custom] == []


def test_a_kept_bucket_without_hierarchical_namespace_is_refused(monkeypatch):
    """Hierarchical namespace is set only when a bucket is created (https://cloud.google.com/storage/docs/
    hns-overview), so adopting a flat bucket would replace it."""
    prod = load_stack_config("prod", REPO)
    first = _bucket(run_program(prod, stack="prod"))
    _play_kept(monkeypatch, first.inputs, hierarchicalNamespaces=[{"enabled": False}])
    monitor = harness.RecordingMonitor(harness.GcpMocks())
    with pytest.raises(Exception) as error:
        run_program(prod, stack="prod", monitor=monitor)
    assert "hierarchical namespace" in str(error.value) and f"bucketName={PROD_BUCKET!r}" in str(error.value)
    assert [r for r in monitor.registrations if r.custom] == []


def test_adoption_names_every_setting_it_changes(monkeypatch, caplog):
    """Pulumi >= 3.174 imports a resource whose inputs differ and then updates it (pulumi/pulumi CHANGELOG): the
    kept bucket's soft delete, lifecycle rules and labels become the stack's. `pulumi up` warns each, before it
    registers anything, and still adopts the bucket."""
    prod = load_stack_config("prod", REPO)
    first = _bucket(run_program(prod, stack="prod"))
    one_rule = {**first.inputs, "lifecycleRules": first.inputs["lifecycleRules"][:1]}
    _play_kept(monkeypatch, one_rule, softDeletePolicies=[{"retentionDurationSeconds": 30 * 86400,
                                                           "effectiveTime": "2026-01-01T00:00:00Z"}],
               effectiveLabels={"team": "ml", "goog-pulumi-provisioned": "true"})
    caplog.clear()
    assert _bucket(run_program(prod, stack="prod")).import_id == PROD_BUCKET
    changes = _adoption_warnings(caplog)
    assert changes[0] == f"adopting kept bucket {PROD_BUCKET}, which changes:"
    assert changes[1:] == [
        "  soft delete 30 days -> 7 days",
        "  lifecycle rules: + pathways/ 7d, + ray-results/ 30d",
        "  labels {'team': 'ml'} -> {'app': 'tpu-multislice'}"]
    assert all(len(line) <= 100 for line in changes)


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


def _training_principal(raw: dict) -> str:
    """This stack's training identity as IAM names it (Workload Identity Federation principal)."""
    from infra.config import build
    from infra.identity import workload_identity_member
    config = build(raw)
    return workload_identity_member(harness.FAKE_PROJECT_NUMBER, config.gcp.project, config.kubernetes.namespace,
                                    config.kubernetes.service_account)


def test_the_bucket_this_stack_holds_is_not_announced_as_an_adoption(monkeypatch, caplog):
    """A later `up` of a living prod stack finds its own bucket. What tells it apart from one kept by a destroy is
    what exists: the bucket's IAM policy still grants this stack's training identity the checkpoint role (destroy
    deletes that binding; infra/preflight.py holds_bucket). Its settings differ from the config here (the user
    changed softDeleteDays): that is an ordinary update the preview shows, not an adoption."""
    prod = load_stack_config("prod", REPO)
    first = _bucket(run_program(prod, stack="prod"))
    _play_kept(monkeypatch, first.inputs, softDeletePolicies=[{"retentionDurationSeconds": 30 * 86400,
                                                               "effectiveTime": "2026-01-01T00:00:00Z"}])
    monkeypatch.setitem(harness.BUCKET_POLICIES, PROD_BUCKET, {"bindings": [
        {"role": "roles/storage.legacyBucketReader", "members": [_training_principal(prod)]},
        {"role": "roles/storage.objectUser", "members": ["user:someone@example.com", _training_principal(prod)]}]})
    caplog.clear()
    assert _bucket(run_program(prod, stack="prod")).import_id == PROD_BUCKET    # ignored by Pulumi when held
    assert _adoption_warnings(caplog) == []
    # The same bucket after a destroy: the binding is gone, so the next `up` announces what it changes.
    monkeypatch.setitem(harness.BUCKET_POLICIES, PROD_BUCKET, {"bindings": [
        {"role": "roles/storage.objectUser", "members": ["user:someone@example.com"]}]})
    caplog.clear()
    run_program(prod, stack="prod")
    assert _adoption_warnings(caplog)[1:] == ["  soft delete 30 days -> 7 days"]


def test_labels_google_adds_are_not_changes_and_a_label_the_user_added_is(monkeypatch, caplog):
    """Labels are compared as the bucket has them (`effectiveLabels`) less Google's own goog-* keys: the data
    source's `labels` is always empty (tpgresource/labels.go), which made every kept bucket "change labels"."""
    prod = load_stack_config("prod", REPO)
    first = _bucket(run_program(prod, stack="prod"))
    _play_kept(monkeypatch, first.inputs, effectiveLabels={**first.inputs["labels"], "goog-pulumi-provisioned":
                                                           "true", "goog-terraform-provisioned": "true"})
    caplog.clear()
    run_program(prod, stack="prod")
    assert _adoption_warnings(caplog) == []
    _play_kept(monkeypatch, first.inputs, effectiveLabels={**first.inputs["labels"], "cost-center": "ml"})
    caplog.clear()
    run_program(prod, stack="prod")
    assert _adoption_warnings(caplog)[1:] == [
        "  labels {'app': 'tpu-multislice', 'cost-center': 'ml'} -> {'app': 'tpu-multislice'}"]

"""What keeps billing after a run: the bucket expires only caches, Ray's run state and Pathways scratch (never
checkpoints or TensorBoard logs), and the worker image repository cleans up old images but keeps the newest."""
from __future__ import annotations

import pytest

from infra.config import build
from infra.storage import EXPIRING_PREFIXES
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, MINIMAL, REPO, committed_stack_run
from workloads import common
from workloads.pathways import spec as pathways_spec
from workloads.ray import spec as ray_spec

BUCKET = "gcp:storage/bucket:Bucket"


def written_prefixes() -> dict[str, str]:
    """What the workloads write where, as bucket-relative prefixes (the Ray and the Pathways backend)."""
    ray, pathways = build(MINIMAL), build({**MINIMAL, "workloadBackend": "pathways"})

    def relative(config, url: str) -> str:
        return url.removeprefix(f"gs://{config.storage.bucket_name}/").rstrip("/") + "/"

    output = relative(ray, common.output_directory(ray))
    command = ray_spec.entrypoint(ray)
    return {"checkpoints": f"{output}{ray.workload.run.run_name}/",
            "compile cache": f"{output}jax_cache/",    # core/maxtext_args.py: <base_output_directory>/jax_cache
            "ray results": relative(ray, command[command.index("--storage-path") + 1]),
            "pathways scratch": relative(pathways, pathways_spec.scratch_location(pathways))}


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_bucket_expires_caches_and_old_run_state_but_never_checkpoints(stack):
    """Cloud Storage lifecycle rules (https://cloud.google.com/storage/docs/lifecycle): Delete at `age` days after
    creation for names matching `matchesPrefix`. Each expiring prefix is one the workloads write a cache or run
    state to, and none covers the checkpoints."""
    rules = committed_stack_run(stack).one(BUCKET, "checkpoints").inputs["lifecycleRules"]
    expiring = {}
    for rule in rules:
        assert rule["action"] == {"type": "Delete"}
        [prefix] = rule["condition"]["matchesPrefixes"]
        expiring[prefix] = rule["condition"]["age"]
    assert expiring == EXPIRING_PREFIXES
    written = written_prefixes()
    assert {written["compile cache"], written["ray results"], written["pathways scratch"]} == set(expiring)
    assert not any(written["checkpoints"].startswith(prefix) for prefix in expiring)
    assert all(days >= 7 for days in expiring.values())


def test_the_image_repository_deletes_old_images_and_keeps_the_newest():
    """Artifact Registry cleanup policies: a version matching a delete and a keep policy is kept
    (https://cloud.google.com/artifact-registry/docs/repositories/cleanup-policy-overview); dry run off, or
    nothing is deleted."""
    run = run_program({**MINIMAL, "workerEnvironment": "image"}, stack="img-cleanup")
    repo = run.one("gcp:artifactregistry/repository:Repository").inputs
    assert repo["cleanupPolicyDryRun"] is False
    policies = {p["id"]: p for p in repo["cleanupPolicies"]}
    delete = [p for p in policies.values() if p["action"] == "DELETE"]
    keep = [p for p in policies.values() if p["action"] == "KEEP"]
    assert [p["condition"] for p in delete] == [{"tagState": "ANY", "olderThan": "2592000s"}]
    assert [p["mostRecentVersions"]["keepCount"] for p in keep] == [5]

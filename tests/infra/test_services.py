"""The APIs the stack enables for what it creates."""
from __future__ import annotations

from preview.harness import run_program
from tests.conftest import MINIMAL
from tests.infra.test_stack import SERVICE, depends_on

REPOSITORY = "gcp:artifactregistry/repository:Repository"


def test_the_image_path_enables_artifact_registry_before_creating_its_repository():
    """A new project has the Artifact Registry API off; creating a repository then fails ("Enable the Artifact
    Registry API", https://cloud.google.com/artifact-registry/docs/enable-service)."""
    run = run_program({**MINIMAL, "workerEnvironment": "image"}, stack="img")
    api = run.one(SERVICE, "artifactregistry")
    assert api.inputs["service"] == "artifactregistry.googleapis.com"
    assert api.inputs["disableOnDestroy"] is False
    assert depends_on(run, run.one(REPOSITORY), api)


def test_the_runtime_path_enables_no_registry_it_does_not_use():
    run = run_program({**MINIMAL, "workerEnvironment": "runtime"}, stack="runtime")
    enabled = {s.inputs["service"] for s in run.of_type(SERVICE)}
    assert not enabled & {"artifactregistry.googleapis.com", "cloudbuild.googleapis.com",
                          "containerfilesystem.googleapis.com"}


def test_every_google_cloud_resource_waits_for_the_stacks_apis():
    """On a new project the APIs the stack enables are off until their gcp.projects.Service exists; anything that calls
    one before (the custom role: iam.googleapis.com; project IAM bindings; the tpu7x workload policy:
    compute.googleapis.com) fails its first `pulumi up`. Every Google Cloud resource waits for them, directly or
    through what it depends on."""
    for variant in (MINIMAL, {**MINIMAL, "zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x2",
                              "model": "qwen3-0.6b", "workloadBackend": "jobset"}):
        run = run_program(variant, stack="apis")
        services = run.of_type(SERVICE)
        assert services
        for resource in run.resources:
            if resource.custom and resource.type.startswith("gcp:") and resource.type != SERVICE:
                assert any(depends_on(run, resource, api) for api in services), resource.type + " " + resource.name

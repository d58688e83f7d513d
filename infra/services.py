"""The Google Cloud APIs the stack needs, enabled by the stack itself."""
from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from infra.component import child_options, component_type

# Why each API is here: compute (VPCs, firewalls, TPU VMs), container (GKE), storage (checkpoints),
# iam (node service account), cloudresourcemanager (project-number lookup, IAM bindings),
# logging/monitoring (GKE system and Ray logs/metrics).
REQUIRED_APIS = (
    "compute.googleapis.com",
    "container.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
)
# workerEnvironment=image: the stack creates an Artifact Registry repository and pushes the worker image to it; the
# Artifact Registry API is off in a new project ("Enable the Artifact Registry API",
# https://cloud.google.com/artifact-registry/docs/enable-service).
# Its TPU pools stream the image (infra/tpu_pools.py image_streaming), which needs the Container File System API
# (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, "Requirements").
IMAGE_APIS = ("artifactregistry.googleapis.com", "containerfilesystem.googleapis.com")
# imageBuilder=cloud-build: Cloud Build runs the build (https://cloud.google.com/build/docs/build-push-docker-image:
# "Enable the Cloud Build API").
CLOUD_BUILD_APIS = ("cloudbuild.googleapis.com",)


def required_apis(image_builder: str | None) -> tuple[str, ...]:
    """The APIs this stack's resources need: the base set, plus Artifact Registry when it builds an image
    (image_builder: the config's imageBuilder, None without an image), plus Cloud Build when that builds it."""
    if image_builder is None:
        return REQUIRED_APIS
    return REQUIRED_APIS + IMAGE_APIS + (CLOUD_BUILD_APIS if image_builder == "cloud-build" else ())


class ProjectServices(pulumi.ComponentResource):
    """Enables the APIs; everything else in the stack waits for `self.ready`."""

    def __init__(self, name: str, project: str, apis: tuple[str, ...] = REQUIRED_APIS,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "ProjectServices"), name, None, opts)
        self.services = [
            gcp.projects.Service(
                api.split(".")[0],
                project=project,
                service=api,
                # Other workloads in the project may use these APIs: never switch them off on destroy.
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=child_options(self),
            )
            for api in apis
        ]
        self.ready: list[pulumi.Resource] = list(self.services)
        self.register_outputs({"services": [s.service for s in self.services]})

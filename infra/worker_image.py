"""The workers' image, built from worker_env/Dockerfile and pushed to an Artifact Registry repository the stack
owns (config workerEnvironment=image).

The image holds what changes rarely: the base and the locked environment. The code reaches the pods through the
stack's ConfigMap (Ray's working_dir, JobSet's PYTHONPATH), so a code edit neither rebuilds nor re-pulls it.
The tag is the content hash of exactly the build context (the Dockerfile and every file its .dockerignore admits,
the lock: infra/build_context.py), and the repository keeps tags immutable: a tag names exactly one image, so
pods can use it as a plain string (the manifests stay pure and their names hash it) while an unchanged lock
never rebuilds. Pods wait for the push through
dependencies. The node account may only read this repository (roles/artifactregistry.reader on it).
Two builders (imageBuilder): cloud-build, the default, needs no Docker where `pulumi up` runs (infra/cloud_build.py
says why and how); docker builds with a local daemon: pulumi-docker-build `Image` (BuildKit;
https://www.pulumi.com/registry/packages/docker-build/), pushing with a short-lived OAuth token of the deploying
identity as Artifact Registry documents for Docker ("oauth2accesstoken",
https://cloud.google.com/artifact-registry/docs/docker/authentication#token).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker_build as docker_build
import pulumi_gcp as gcp

from infra.build_context import context_tag
from infra.cloud_build import CloudBuildImage, CloudBuildSpec
from infra.component import child_options, component_type

# Relative to the project directory, where Pulumi runs the program: state then holds no machine's paths.
CONTEXT = "."
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = "worker_env/Dockerfile"
IMAGE_NAME = "worker"
READER_ROLE = "roles/artifactregistry.reader"
# Every change to the image's inputs pushes a new multi-GB image: keep the newest few (what runs, and what a
# rollback would run) and delete the rest after a month. A version matching both a delete and a keep policy is
# kept (Artifact Registry "Cleanup policies", https://cloud.google.com/artifact-registry/docs/repositories/
# cleanup-policy-overview).
KEEP_NEWEST_IMAGES = 5
DELETE_IMAGES_OLDER_THAN = f"{30 * 24 * 3600}s"


def cleanup_policies() -> list[gcp.artifactregistry.RepositoryCleanupPolicyArgs]:
    return [
        gcp.artifactregistry.RepositoryCleanupPolicyArgs(
            id="delete-older-than-30-days", action="DELETE",
            condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
                tag_state="ANY", older_than=DELETE_IMAGES_OLDER_THAN)),
        gcp.artifactregistry.RepositoryCleanupPolicyArgs(
            id=f"keep-newest-{KEEP_NEWEST_IMAGES}", action="KEEP",
            most_recent_versions=gcp.artifactregistry.RepositoryCleanupPolicyMostRecentVersionsArgs(
                keep_count=KEEP_NEWEST_IMAGES)),
    ]


@dataclass(frozen=True)
class WorkerImageSpec:
    project: str
    region: str
    repository_id: str
    tag: str
    builder: str = "cloud-build"           # imageBuilder: cloud-build | docker
    staging_bucket: str | None = None      # cloud-build: where the build context is uploaded
    build_account_id: str | None = None    # cloud-build: the account the build runs as
    build_region: str | None = None        # cloud-build: where the build runs (default: the repository's region)

    @property
    def registry(self) -> str:
        return f"{self.region}-docker.pkg.dev"

    @property
    def ref(self) -> str:
        return f"{self.registry}/{self.project}/{self.repository_id}/{IMAGE_NAME}:{self.tag}"


def base_image(root: Path | None = None) -> str:
    """The image worker_env/Dockerfile builds on (its FROM line)."""
    for line in ((root or PROJECT_ROOT) / DOCKERFILE).read_text().splitlines():
        if line.upper().startswith("FROM "):
            return line.split()[1]
    raise ValueError(f"{DOCKERFILE} has no FROM line")


def image_tag(root: Path | None = None) -> str:
    """16 hex characters of the build context the provider hashes: any change it would rebuild for gives a new,
    immutable tag (a rebuild pushed under an existing tag is refused by the repository)."""
    return context_tag(root or PROJECT_ROOT, DOCKERFILE)


class WorkerImage(pulumi.ComponentResource):
    def __init__(self, name: str, spec: WorkerImageSpec, node_service_account: pulumi.Input[str],
                 depends_on: list[pulumi.Resource], deployer: str | None = None, admin_managed: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "WorkerImage"), name, None, opts)
        self.repository = gcp.artifactregistry.Repository(
            "images", project=spec.project, location=spec.region, repository_id=spec.repository_id,
            format="DOCKER", description="tpu-multislice worker images",
            docker_config=gcp.artifactregistry.RepositoryDockerConfigArgs(immutable_tags=True),
            cleanup_policies=cleanup_policies(), cleanup_policy_dry_run=False,
            opts=child_options(self, depends_on=depends_on))
        self.node_reader = gcp.artifactregistry.RepositoryIamMember(
            "node-reader", project=spec.project, location=spec.region, repository=self.repository.repository_id,
            role=READER_ROLE, member=pulumi.Output.concat("serviceAccount:", node_service_account),
            opts=child_options(self))
        if spec.builder == "cloud-build":
            cloud_build = CloudBuildImage(
                self, CloudBuildSpec(project=spec.project, region=spec.build_region or spec.region,
                                     repository_region=spec.region, image_ref=spec.ref,
                                     staging_bucket=spec.staging_bucket or "",
                                     account_id=spec.build_account_id or ""),
                self.repository, depends_on, deployer, admin_managed)
            self.built: pulumi.Resource = cloud_build.build
            digest: pulumi.Input[str] | None = None      # the build's own record has it (gcloud builds list)
        else:
            token = gcp.organizations.get_client_config_output().access_token
            image = docker_build.Image(
                "worker",
                context=docker_build.BuildContextArgs(location=CONTEXT),
                dockerfile=docker_build.DockerfileArgs(location=DOCKERFILE),
                # TPU VMs are x86_64; the lock is resolved for manylinux_2_31 x86_64.
                platforms=[docker_build.Platform.LINUX_AMD64],
                push=True,
                tags=[spec.ref],
                registries=[docker_build.RegistryArgs(address=spec.registry, username="oauth2accesstoken",
                                                      password=pulumi.Output.secret(token))],
                opts=child_options(self, depends_on=[self.repository]))
            self.built = image
            digest = image.digest
        self.ref = spec.ref
        self.ready: list[pulumi.Resource] = [self.built, self.node_reader]
        self.register_outputs({"ref": self.ref, "digest": digest})

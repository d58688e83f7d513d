"""The workers' image built by Cloud Build (imageBuilder=cloud-build): no Docker daemon where `pulumi up` runs.

Why Cloud Build, submitted by the program with `gcloud builds submit`: the machine that runs `pulumi up` already
needs gcloud and the deploying identity (the README's deploy block), and nothing else is added: no daemon, no
privileged container, no cluster to exist first (an in-cluster builder would put the build behind the cluster
on the critical path, and its pushes behind Workload Identity). The build runs in Google's network, so the
multi-GB push never leaves it; only the allow-listed context (the lock, about 0.4 MB) is uploaded. It runs in
imageBuildRegion (infra/config/build_region.py: by default one of the six regions every project may build in),
while the repository stays in the cluster's region: the push crosses regions once per lock change, and every
node pulls from its own region.

What it is made of, each least privilege:
- a staging bucket of the stack's for the uploaded context (objects deleted after a week: a context is
  needed only while its build runs), readable by the build's service account only;
- a build service account of the stack's that may write to the stack's image repository, read the staging
  bucket and write its logs, and nothing else (a user-specified account instead of the project's default build
  account, whose grants differ by project age and organisation policy:
  https://cloud.google.com/build/docs/cloud-build-service-account-updates);
- the recipe worker_env/cloudbuild.yaml (a Build resource, checked against the service's discovery document);
- a `command` resource whose create runs the build and waits for it (submit_script: a tag already pushed is not
  built again, a submit refused while new grants propagate is tried again); its trigger is the image tag, the
  build context's digest (the Dockerfile and the lock: the code is not in the image), so an unchanged lock never
  builds again and a changed one always does.

A failed build fails that resource with one line saying what failed and where the build's log is, and every pod
that runs the image depends on it, so nothing that runs the image is created after a failed build.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from infra.component import child_options

RECIPE = "worker_env/cloudbuild.yaml"
UPLOAD_IGNORE_FILE = "worker_env/Dockerfile.gcloudignore"
WRITER_ROLE = "roles/artifactregistry.writer"
STAGING_READER_ROLE = "roles/storage.objectViewer"
LOG_WRITER_ROLE = "roles/logging.logWriter"
ACT_AS_ROLE = "roles/iam.serviceAccountUser"
STAGING_OBJECT_DAYS = 7
BUILD_ACCOUNT_DISPLAY_NAME = "tpu-multislice worker image builds"


@dataclass(frozen=True)
class CloudBuildSpec:
    project: str
    region: str             # where Cloud Build runs the build (imageBuildRegion: infra/config/build_region.py)
    image_ref: str          # <region>-docker.pkg.dev/<project>/<repository>/worker:<lock digest>
    staging_bucket: str     # the bucket name the stack creates for uploaded contexts
    account_id: str         # the build's service account, created by the stack
    repository_region: str = ""   # the repository's (and staging bucket's) region; default: region

    @property
    def storage_region(self) -> str:
        return self.repository_region or self.region


def builds_console_url(project: str, region: str) -> str:
    """Where a build's log is: the region's build history (the failed build is on top)."""
    return f"https://console.cloud.google.com/cloud-build/builds;region={region}?project={project}"


def submit_argv(spec: CloudBuildSpec, service_account_email: str) -> list[str]:
    """`gcloud builds submit` of the build context with the recipe, run from the project directory.

    The uploaded files are the ones its ignore file admits (the Dockerfile's own allow-list, so the upload is the
    context the tag is the digest of); the build waits (no --async) so the resource ends when the push has.
    """
    return ["gcloud", "builds", "submit", ".",
            f"--project={spec.project}", f"--region={spec.region}", f"--config={RECIPE}",
            f"--ignore-file={UPLOAD_IGNORE_FILE}",
            f"--substitutions=_IMAGE={spec.image_ref}",
            f"--service-account=projects/{spec.project}/serviceAccounts/{service_account_email}",
            f"--gcs-source-staging-dir=gs://{spec.staging_bucket}/source"]


def pushed_argv(spec: CloudBuildSpec) -> list[str]:
    """Whether the repository already has the tag: `gcloud artifacts docker images describe IMAGE:TAG` exits 0
    only when it does (https://cloud.google.com/sdk/gcloud/reference/artifacts/docker/images/describe)."""
    return ["gcloud", "artifacts", "docker", "images", "describe", spec.image_ref, f"--project={spec.project}"]


# gcloud prints where the build's log is as soon as the build exists: "Logs are available at [ URL ]." (older
# releases without the spaces; googlecloudsdk command_lib/builds/submit_util.py `log.status.Print`).
LOG_URL_PATTERN = r"https://console\.cloud\.google\.com/cloud-build/builds[^] ]*"
# A project restricted to the six regions gets "FAILED_PRECONDITION: ... cannot run builds in this region"
# elsewhere (https://cloud.google.com/build/docs/locations, "Restricted regions for some projects").
RESTRICTED_REGION_PATTERN = "FAILED_PRECONDITION.*region"
# What a grant not yet in effect looks like: the submit refused (PERMISSION_DENIED / 403, actAs on the build
# account) or the build unable to read its uploaded source (storage.objects.get). IAM "Access change propagation"
# (https://cloud.google.com/iam/docs/access-change-propagation): a new grant usually applies within 2 minutes and
# can take 7 minutes or more, and the stack creates the build account and its grants seconds before the submit.
PROPAGATION_PATTERN = ("PERMISSION_DENIED|HTTPError 403|does not have .*permission|iam[.]serviceAccounts[.]actAs"
                       "|storage[.]objects[.]get")
# Seconds to wait before the 2nd, 3rd, ... submit: 7.5 minutes in all, past the 7 the page names; then give up.
RETRY_WAITS_S = (30, 60, 120, 240)


def submit_script(spec: CloudBuildSpec, service_account_email: str) -> str:
    """The shell text the command resource runs (POSIX sh, so it runs wherever `pulumi up` does).

    1. A tag the repository already has is not built again: its tag is the digest of what the image holds, and the
       repository's tags are immutable, so a rebuild could only be refused (a build that pushed and then lost its
       gcloud, e.g. Ctrl-C or a dropped connection while polling, leaves exactly that).
    2. A submit refused while the stack's new grants propagate is tried again after a wait, bounded, one line a try.
    3. A region this project may not build in ends in one line naming imageBuildRegion and the allowed regions.
    gcloud's own output goes to `pulumi up`'s log as it comes; any other failure ends in one line naming what
    failed and where the log is: the failed build's own log when gcloud printed it, else the region's history."""
    missing = "the worker image is built with gcloud (imageBuilder=cloud-build): install the Google Cloud CLI"
    failed = f"worker image build failed (Cloud Build, {spec.region}): its log is at "
    history = builds_console_url(spec.project, spec.region)
    have = f"worker image {spec.image_ref} is already in the repository: not built again"
    after_push = (f"worker image build: gcloud failed, but {spec.image_ref} was pushed (the build finished): "
                  "using it")
    restricted = (f"worker image build: this project may not run Cloud Build in {spec.region}; "
                  "set imageBuildRegion=auto")
    tries = len(RETRY_WAITS_S) + 1
    waits = " ".join(str(w) for w in RETRY_WAITS_S)
    return (f"command -v gcloud >/dev/null || {{ echo {shlex.quote(missing)} >&2; exit 127; }}\n"
            'out=$(mktemp) || exit 1\n'
            'trap \'rm -f "$out" "$out.rc"\' EXIT\n'
            f"pushed() {{ {shlex.join(pushed_argv(spec))} >/dev/null 2>&1; }}\n"
            f"if pushed; then echo {shlex.quote(have)}; exit 0; fi\n"
            f"try=1\n"
            f"for wait in {waits} last; do\n"
            # The pipe keeps gcloud's output flowing; its exit status travels in a file (POSIX sh has no pipefail).
            f'  {{ {shlex.join(submit_argv(spec, service_account_email))} 2>&1; echo $? > "$out.rc"; }} '
            '| tee "$out"\n'
            '  [ "$(cat "$out.rc")" = 0 ] && exit 0\n'
            f"  if pushed; then echo {shlex.quote(after_push)}; exit 0; fi\n"
            f"  if grep -Eq {shlex.quote(RESTRICTED_REGION_PATTERN)} \"$out\"; then\n"
            f"    echo {shlex.quote(restricted)} >&2; exit 1\n"
            "  fi\n"
            f"  [ \"$wait\" = last ] || ! grep -Eq {shlex.quote(PROPAGATION_PATTERN)} \"$out\" && break\n"
            f'  echo "worker image build: try $try of {tries} refused (new IAM grants take minutes to apply); '
            'next in ${wait} s"\n'
            '  sleep "$wait"\n'
            "  try=$((try + 1))\n"
            "done\n"
            f"url=$(grep -o {shlex.quote(LOG_URL_PATTERN)} \"$out\" | tail -n 1)\n"
            f'echo {shlex.quote(failed)}"${{url:-{history}}}" >&2\n'
            "exit 1")


class CloudBuildImage:
    """The Cloud Build resources of a WorkerImage (created as its children, so their URNs sit under it)."""

    def __init__(self, parent: pulumi.Resource, spec: CloudBuildSpec, repository: gcp.artifactregistry.Repository,
                 depends_on: list[pulumi.Resource], deployer: str | None = None, admin_managed: bool = False):
        self.staging = gcp.storage.Bucket(
            "build-staging", name=spec.staging_bucket, project=spec.project, location=spec.storage_region,
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            # Only build inputs live here, re-uploaded by every build: nothing to keep on destroy.
            force_destroy=True,
            lifecycle_rules=[gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=STAGING_OBJECT_DAYS))],
            opts=child_options(parent, depends_on=depends_on))
        if admin_managed:
            # adminBootstrap: the admin's step created this account and granted the deployer actAs on it.
            self.account = None
            email: pulumi.Output[str] = pulumi.Output.from_input(
                f"{spec.account_id}@{spec.project}.iam.gserviceaccount.com")
        else:
            self.account = gcp.serviceaccount.Account(
                "worker-builder", project=spec.project, account_id=spec.account_id,
                display_name=BUILD_ACCOUNT_DISPLAY_NAME,
                opts=child_options(parent, depends_on=depends_on))
            email = self.account.email
        member = email.apply(lambda address: f"serviceAccount:{address}")
        self.grants = [
            gcp.artifactregistry.RepositoryIamMember(
                "builder-push", project=spec.project, location=spec.storage_region,
                repository=repository.repository_id,
                role=WRITER_ROLE, member=member, opts=child_options(parent)),
            gcp.storage.BucketIAMMember("builder-staging", bucket=self.staging.name, role=STAGING_READER_ROLE,
                                        member=member, opts=child_options(parent)),
            gcp.projects.IAMMember("builder-logs", project=spec.project, role=LOG_WRITER_ROLE, member=member,
                                   opts=child_options(parent)),
        ]
        # Submitting a build that runs as this account needs actAs on it
        # (https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts): granted
        # to whoever runs `pulumi up` on this account alone, as the node account's is (infra/identity.py).
        if deployer is not None and self.account is not None:
            self.grants.append(gcp.serviceaccount.IAMMember(
                "builder-deployer-act-as", service_account_id=self.account.name, role=ACT_AS_ROLE, member=deployer,
                opts=child_options(parent)))
        self.build = command.local.Command(
            "worker-build",
            create=email.apply(lambda address: submit_script(spec, address)),
            # The project directory, where Pulumi runs the program: the state holds no machine's paths.
            dir=".",
            triggers=[spec.image_ref],
            opts=child_options(parent, depends_on=[repository, self.staging, *self.grants]))

"""The workers' image built by Cloud Build (imageBuilder=cloud-build): no Docker daemon where `pulumi up` runs.

Checked here: the recipe is a Build the Cloud Build API accepts (its discovery document, shipped with
google-api-python-client: googleapiclient/discovery_cache/documents/cloudbuild.v1.json, made strict by
tests/infra/discovery_schema.py); gcloud uploads exactly the build context the tag is the digest of
(.gcloudignore syntax mirrors .gitignore's: `gcloud topic gcloudignore`,
https://cloud.google.com/sdk/gcloud/reference/topic/gcloudignore; pathspec implements git's rules); the stack
wires the build's least-privilege account, its staging bucket and the pods' dependency on the build; and the
command the stack runs really runs: with a stand-in `gcloud` it passes the flags `gcloud builds submit`
documents (https://cloud.google.com/sdk/gcloud/reference/builds/submit), and a failed build or a missing
gcloud ends in one line saying what failed and where the log is.
"""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import jsonschema
import pathspec
import pytest
import yaml

from infra.build_context import context_files
from infra.config.build_region import ALWAYS_ALLOWED
from infra.config.build_region import build_region as build_region_of
from infra.cloud_build import RECIPE, RETRY_WAITS_S, UPLOAD_IGNORE_FILE, CloudBuildSpec, submit_script
from infra.worker_image import DOCKERFILE
from preview.harness import run_program
from tests.conftest import MINIMAL, REPO
from tests.infra.discovery_schema import load_discovery, to_json_schema
from tests.infra.test_stack import depends_on

IMAGE_CONFIG = {**MINIMAL, "workerEnvironment": "image", "imageBuilder": "cloud-build"}
SPEC = CloudBuildSpec(project="my-proj", region="us-east5",
                      image_ref="us-east5-docker.pkg.dev/my-proj/imgs/worker:0123456789abcdef",
                      staging_bucket="my-proj-tpu-builds", account_id="tpu-builds")
ACCOUNT = "tpu-builds@my-proj.iam.gserviceaccount.com"
RAYJOB, JOBSET = "kubernetes:ray.io/v1:RayJob", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _recipe() -> dict:
    return yaml.safe_load((REPO / RECIPE).read_text())


def test_the_recipe_is_a_build_the_api_accepts():
    discovery = load_discovery("googleapiclient", "cloudbuild.v1.json")
    validator = jsonschema.Draft202012Validator(to_json_schema(discovery, "Build"))
    errors = sorted(validator.iter_errors(_recipe()), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_the_strict_schema_refuses_a_misspelt_field():
    """The check above can fail: a field the Build schema does not have is refused."""
    discovery = load_discovery("googleapiclient", "cloudbuild.v1.json")
    validator = jsonschema.Draft202012Validator(to_json_schema(discovery, "Build"))
    assert list(validator.iter_errors({**_recipe(), "image": ["x"]}))
    assert list(validator.iter_errors({**_recipe(), "options": {"logging": "CLOUD_LOGGING"}}))


def test_the_recipe_builds_the_workers_dockerfile_and_pushes_the_substituted_image():
    recipe = _recipe()
    [step] = recipe["steps"]
    args = step["args"]
    assert args[0] == "build" and args[args.index("--file") + 1] == DOCKERFILE and args[-1] == "."
    assert args[args.index("--tag") + 1] == "$_IMAGE" and recipe["images"] == ["$_IMAGE"]
    # Dockerfile.dockerignore (the allow-list) is read only by BuildKit.
    assert "DOCKER_BUILDKIT=1" in step["env"]
    # A user-specified build account needs its logs in Cloud Logging or a bucket of ours
    # (https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts).
    assert recipe["options"]["logging"] == "CLOUD_LOGGING_ONLY"
    # Every substitution used must be passed: a build without _IMAGE fails instead of pushing somewhere else.
    assert recipe["options"]["substitutionOption"] == "MUST_MATCH"


def _uploaded(root: Path) -> set[str]:
    spec = pathspec.GitIgnoreSpec.from_lines((root / UPLOAD_IGNORE_FILE).read_text().splitlines())
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    return {f for f in files if not spec.match_file(f)}


def test_gcloud_uploads_exactly_the_build_context_and_the_files_the_build_reads(tmp_path):
    """What gcloud uploads = what the tag hashes (context_files) + the Dockerfile and its ignore file (BuildKit
    reads them beside the context). Checked on the repository and on a tree with the files a developer has."""
    expected_extra = {DOCKERFILE, f"{DOCKERFILE}.dockerignore"}
    assert _uploaded(REPO) == set(context_files(REPO, DOCKERFILE)) | expected_extra
    for relative in ("core/x.py", "trainer/local/run.py", "trainer/__pycache__/a.pyc", ".venv/lib/a.py",
                     "worker_env/requirements.in", "worker_env/requirements.lock", DOCKERFILE,
                     f"{DOCKERFILE}.dockerignore", UPLOAD_IGNORE_FILE, "secrets.json", "tests/t.py"):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    (tmp_path / f"{DOCKERFILE}.dockerignore").write_text((REPO / f"{DOCKERFILE}.dockerignore").read_text())
    (tmp_path / UPLOAD_IGNORE_FILE).write_text((REPO / UPLOAD_IGNORE_FILE).read_text())
    assert _uploaded(tmp_path) == set(context_files(tmp_path, DOCKERFILE)) | expected_extra
    assert _uploaded(tmp_path) == {"worker_env/requirements.lock"} | expected_extra


def test_the_stack_builds_with_its_own_account_and_every_pod_waits_for_the_build():
    run = run_program(IMAGE_CONFIG, stack="img")
    assert not run.of_type("docker-build:index:Image")
    build = run.one("command:local:Command", "worker-build")
    [ref] = build.inputs["triggers"]
    assert ref.startswith("us-east5-docker.pkg.dev/my-tpu-project/tpu-multislice-images/worker:")
    script = build.inputs["create"]
    account = run.one("gcp:serviceaccount/account:Account", "worker-builder").inputs
    email = f"{account['accountId']}@my-tpu-project.iam.gserviceaccount.com"
    # The build runs where every project may build (imageBuildRegion=auto), the repository stays by the cluster.
    for flag in ("--project=my-tpu-project", "--region=us-central1", f"--config={RECIPE}",
                 f"--ignore-file={UPLOAD_IGNORE_FILE}", f"--substitutions=_IMAGE={ref}",
                 f"--service-account=projects/my-tpu-project/serviceAccounts/{email}",
                 "--gcs-source-staging-dir=gs://my-tpu-project-tpu-multislice-builds/source"):
        assert flag in script, flag
    assert build.inputs["dir"] == "."
    # Least privilege: push to this repository, read this bucket, write logs; nothing project-wide but logs.
    grants = {g.name: g.inputs for g in run.resources if g.name.startswith("builder-")}
    assert {n: g["role"] for n, g in grants.items()} == {
        "builder-push": "roles/artifactregistry.writer", "builder-staging": "roles/storage.objectViewer",
        "builder-logs": "roles/logging.logWriter", "builder-deployer-act-as": "roles/iam.serviceAccountUser"}
    assert grants["builder-push"]["repository"] == "tpu-multislice-images"
    assert grants["builder-staging"]["bucket"] == "my-tpu-project-tpu-multislice-builds"
    # The deployer may act as the build account alone (it submits builds that run as it).
    act_as = grants.pop("builder-deployer-act-as")
    assert act_as["member"] == run.one("gcp:serviceaccount/iAMMember:IAMMember", "nodes-deployer-act-as").inputs["member"]
    assert all(g["member"] == f"serviceAccount:{email}" for g in grants.values())
    staging = run.one("gcp:storage/bucket:Bucket", "build-staging").inputs
    assert staging["publicAccessPrevention"] == "enforced" and staging["uniformBucketLevelAccess"] is True
    assert staging["lifecycleRules"][0]["condition"]["age"] == 7
    # The build runs after its grants; the job's pods after the build.
    for name in grants:
        assert depends_on(run, build, run.one(next(r.type for r in run.resources if r.name == name), name))
    assert depends_on(run, run.one("kubernetes:ray.io/v1:RayJob"), build)
    services = {s.inputs["service"] for s in run.of_type("gcp:projects/service:Service")}
    assert {"cloudbuild.googleapis.com", "artifactregistry.googleapis.com",
            "containerfilesystem.googleapis.com"} <= services


@pytest.mark.parametrize("region, build_region", [
    ("us-east5", "us-central1"), ("us-central1", "us-central1"), ("us-west4", "us-west2"),
    ("us-south1", "us-central1"), ("europe-west4", "europe-west1"), ("asia-northeast1", "asia-east1"),
    ("asia-southeast1", "asia-east1"), ("australia-southeast2", "australia-southeast1"),
    ("southamerica-west1", "southamerica-east1"), ("northamerica-northeast1", "us-central1"),
])
def test_auto_builds_in_the_nearest_region_every_project_may_use(region, build_region):
    """Cloud Build "Locations": some projects may build only in ALWAYS_ALLOWED
    (https://cloud.google.com/build/docs/locations)."""
    assert set(ALWAYS_ALLOWED) == {"us-central1", "us-west2", "europe-west1", "asia-east1",
                                   "australia-southeast1", "southamerica-east1"}
    assert build_region_of("auto", region) == build_region in ALWAYS_ALLOWED
    assert build_region_of("us-east5", region) == "us-east5"      # the user's choice stands


def test_an_explicit_build_region_moves_the_build_not_the_repository():
    run = run_program({**IMAGE_CONFIG, "imageBuildRegion": "europe-west1"}, stack="img")
    build = run.one("command:local:Command", "worker-build")
    assert "--region=europe-west1" in build.inputs["create"]
    assert build.inputs["triggers"][0].startswith("us-east5-docker.pkg.dev/")
    assert run.one("gcp:storage/bucket:Bucket", "build-staging").inputs["location"].lower() == "us-east5"


def test_two_clusters_in_one_project_get_their_own_build_account_and_bucket():
    names = set()
    for cluster in ("tpu-a", "tpu-b"):
        run = run_program({**IMAGE_CONFIG, "clusterName": cluster}, stack=cluster)
        names.add((run.one("gcp:serviceaccount/account:Account", "worker-builder").inputs["accountId"],
                   run.one("gcp:storage/bucket:Bucket", "build-staging").inputs["name"]))
    assert len(names) == 2


def test_every_pool_streams_the_image_only_when_it_runs_one():
    """GKE Image streaming (gcfsConfig) on the TPU pools and the system pool (the Ray head, the JobSet submitter)
    with the image; nothing to stream on the runtime path."""
    def streaming(config):
        pools = run_program(config, stack="s").of_type("gcp:container/nodePool:NodePool")
        assert any(p.name == "system" for p in pools) and any(p.name.startswith("slice-") for p in pools)
        return {bool((p.inputs["nodeConfig"].get("gcfsConfig") or {}).get("enabled")) for p in pools}
    assert streaming(IMAGE_CONFIG) == {True}
    assert streaming({**MINIMAL, "workerEnvironment": "runtime"}) == {False}


@pytest.mark.parametrize("config, granted", [(IMAGE_CONFIG, True), ({**IMAGE_CONFIG, "imageBuilder": "docker"}, True),
                                             ({**MINIMAL, "workerEnvironment": "runtime"}, False)])
def test_the_node_account_may_stream_only_when_there_is_an_image(config, granted):
    """GKE Image streaming, Requirements: a custom node service account needs
    roles/serviceusage.serviceUsageConsumer on the project that hosts the image
    (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming)."""
    run = run_program(config, stack="s")
    node = run.one("gcp:serviceaccount/account:Account", "nodes").inputs["accountId"]
    roles = {g.inputs["role"] for g in run.of_type("gcp:projects/iAMMember:IAMMember")
             if g.inputs["member"] == f"serviceAccount:{node}@my-tpu-project.iam.gserviceaccount.com"}
    assert ("roles/serviceusage.serviceUsageConsumer" in roles) is granted
    assert "roles/container.defaultNodeServiceAccount" in roles


# What gcloud prints once the build exists (googlecloudsdk command_lib/builds/submit_util.py), as a build log shows.
BUILD_LOG = "https://console.cloud.google.com/cloud-build/builds;region=us-east5/3938235f-904e?project=5539254765"
# What gcloud says on a project restricted to six regions (https://cloud.google.com/build/docs/locations) and on a
# grant not yet in effect (https://cloud.google.com/iam/docs/access-change-propagation).
RESTRICTED = ("ERROR: (gcloud.builds.submit) FAILED_PRECONDITION: project 5539254765 cannot run builds in this "
              "region")
DENIED = ("ERROR: (gcloud.builds.submit) PERMISSION_DENIED: caller does not have permission to act as service "
          "account tpu-builds@my-proj.iam.gserviceaccount.com")


class StandIn:
    """A `gcloud` and a `sleep` on PATH. gcloud plays Artifact Registry (`artifacts docker images describe`
    succeeds once a build has pushed the tag) and Cloud Build (`builds submit` takes the next outcome: ok pushes
    and succeeds; pushed-then-lost pushes and fails, as when gcloud loses its connection while polling; any other
    is printed and fails). sleep only records how long it was asked to wait."""

    def __init__(self, tmp_path: Path, outcomes: list[str], already_pushed: bool = False):
        self.dir = tmp_path / "bin"
        self.dir.mkdir()
        (self.dir / "outcomes").write_text("".join(f"{o}\n" for o in outcomes))
        if already_pushed:
            (self.dir / "pushed").write_text("")
        self._script("gcloud", f"""d={self.dir}
echo "$*" >> "$d/calls"
if [ "$1" = artifacts ]; then
  [ -f "$d/pushed" ] && exit 0
  echo "ERROR: (gcloud.artifacts.docker.images.describe) NOT_FOUND: image not found" >&2; exit 1
fi
outcome=$(head -n 1 "$d/outcomes"); tail -n +2 "$d/outcomes" > "$d/rest"; mv "$d/rest" "$d/outcomes"
case "$outcome" in
  ok) : > "$d/pushed"; echo "Logs are available at [ {BUILD_LOG} ]."; exit 0;;
  pushed-then-lost) : > "$d/pushed"; echo "ERROR: (gcloud.builds.submit) connection reset" >&2; exit 1;;
  *) echo "$outcome" >&2; exit 1;;
esac
""")
        self._script("sleep", f'echo "$1" >> {self.dir}/slept\n')

    def _script(self, name: str, body: str) -> None:
        path = self.dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)

    def run(self, cwd: Path) -> subprocess.CompletedProcess:
        return _run(submit_script(SPEC, ACCOUNT), f"{self.dir}:/usr/bin:/bin", cwd)

    def submits(self) -> list[list[str]]:
        calls = (self.dir / "calls").read_text().splitlines() if (self.dir / "calls").exists() else []
        return [call.split(" ") for call in calls if call.startswith("builds submit")]

    def slept(self) -> list[str]:
        return (self.dir / "slept").read_text().split() if (self.dir / "slept").exists() else []


def _run(script: str, path: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", script], cwd=cwd, env={**os.environ, "PATH": path},
                          capture_output=True, text=True, timeout=30)


def test_the_command_runs_gcloud_builds_submit_and_waits(tmp_path):
    gcloud = StandIn(tmp_path, ["ok"])
    done = gcloud.run(tmp_path)
    assert done.returncode == 0, done.stderr
    [argv] = gcloud.submits()
    assert argv[:3] == ["builds", "submit", "."] and "--async" not in argv
    assert f"--substitutions=_IMAGE={SPEC.image_ref}" in argv
    assert f"--service-account=projects/my-proj/serviceAccounts/{ACCOUNT}" in argv
    assert "--region=us-east5" in argv and gcloud.slept() == []


def test_a_tag_the_repository_already_has_is_not_built_again(tmp_path):
    """The tag is the digest of what the image holds and the repository's tags are immutable: a rebuild could
    only be refused, so an up after a build that pushed (and then failed to say so) uses the pushed image."""
    gcloud = StandIn(tmp_path, ["ok"], already_pushed=True)
    done = gcloud.run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert gcloud.submits() == []
    assert done.stdout.strip() == f"worker image {SPEC.image_ref} is already in the repository: not built again"


def test_a_build_that_pushed_before_gcloud_failed_counts_as_built(tmp_path):
    gcloud = StandIn(tmp_path, ["pushed-then-lost", "ok"])
    done = gcloud.run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(gcloud.submits()) == 1
    assert "was pushed (the build finished): using it" in done.stdout


def test_a_refused_first_submit_is_tried_again_while_grants_propagate(tmp_path):
    gcloud = StandIn(tmp_path, [DENIED, DENIED, "ok"])
    done = gcloud.run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(gcloud.submits()) == 3
    assert gcloud.slept() == [str(w) for w in RETRY_WAITS_S[:2]]
    tries = [line for line in done.stdout.splitlines() if line.startswith("worker image build: try")]
    assert tries == [f"worker image build: try {n} of {len(RETRY_WAITS_S) + 1} refused (new IAM grants take "
                     f"minutes to apply); next in {w} s" for n, w in ((1, 30), (2, 60))]
    assert all(len(line) <= 100 for line in tries)


def test_the_tries_are_bounded(tmp_path):
    gcloud = StandIn(tmp_path, [DENIED] * 10)
    done = gcloud.run(tmp_path)
    assert done.returncode == 1
    assert len(gcloud.submits()) == len(RETRY_WAITS_S) + 1
    assert gcloud.slept() == [str(w) for w in RETRY_WAITS_S]
    assert done.stderr.strip().splitlines()[-1].startswith("worker image build failed (Cloud Build, us-east5)")


def test_a_restricted_region_is_named_at_once_with_the_key_that_moves_the_build(tmp_path):
    gcloud = StandIn(tmp_path, [RESTRICTED, "ok"])
    done = gcloud.run(tmp_path)
    assert done.returncode == 1
    assert len(gcloud.submits()) == 1 and gcloud.slept() == []
    assert done.stderr.strip().splitlines()[-1] == (
        "worker image build: this project may not run Cloud Build in us-east5; set imageBuildRegion=auto")


@pytest.mark.parametrize("printed, where", [
    # The build was created and failed: its own log.
    (f"Logs are available at [ {BUILD_LOG} ].", BUILD_LOG),
    (f"Logs are available at [{BUILD_LOG}].", BUILD_LOG),      # older gcloud releases, no spaces
    # gcloud failed before a build existed (e.g. the upload): the region's build history.
    ("ERROR: (gcloud.builds.submit) INVALID_ARGUMENT: bad substitution", "https://console.cloud.google.com/"
                                                                         "cloud-build/builds;region=us-east5"
                                                                         "?project=my-proj"),
])
def test_a_failed_build_ends_in_one_line_naming_what_failed_and_where_the_log_is(tmp_path, printed, where):
    gcloud = StandIn(tmp_path, [printed])
    done = gcloud.run(tmp_path)
    assert done.returncode == 1
    # gcloud's own output still reaches pulumi's log, and a failure that is no grant is not tried again.
    assert printed in done.stdout and len(gcloud.submits()) == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"worker image build failed (Cloud Build, us-east5): its log is at {where}"


def test_without_gcloud_the_command_says_what_to_install(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(["/bin/sh", "-c", submit_script(SPEC, ACCOUNT)], cwd=tmp_path,
                          env={"PATH": str(empty)}, capture_output=True, text=True, timeout=30)
    assert done.returncode == 127
    assert done.stderr.strip().splitlines() == [
        "the worker image is built with gcloud (imageBuilder=cloud-build): install the Google Cloud CLI"]


@pytest.mark.parametrize("extra", [
    {},
    {"workloadBackend": "jobset"},
    # A reservation's pools are warm (they bill from creation), and tpu7x shapes its slices by a resource policy.
    {"capacity": "reservation", "reservationName": "tpu-res"},
    {"zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"},
])
def test_no_tpu_resource_is_created_before_the_build_has_pushed(extra):
    """A failed build fails its command resource, and Pulumi creates nothing that depends on a failed resource:
    with every slice pool (and tpu7x's slice policy) and the training job waiting for the build, a failed build
    leaves no TPU behind."""
    run = run_program({**IMAGE_CONFIG, **extra}, stack="img")
    build = run.one("command:local:Command", "worker-build")
    reader = run.one("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember", "node-reader")
    tpu = [p for p in run.of_type("gcp:container/nodePool:NodePool") if p.name.startswith("slice-")]
    tpu += run.of_type("gcp:compute/resourcePolicy:ResourcePolicy")
    assert len(tpu) >= 2
    tpu += [r for r in run.resources if r.type in (RAYJOB, JOBSET)]
    assert len(tpu) >= 3
    for resource in tpu:
        assert depends_on(run, resource, build), f"{resource.type} {resource.name} does not wait for the build"
        assert depends_on(run, resource, reader), f"{resource.type} {resource.name} may pull before it can read"

"""The offline plan shows what it cannot verify as assumptions, not as facts: the versions GKE offers today, that an
image tag exists, the KubeRay of the GKE Ray add-on, the MegaScale NIC flag."""
from __future__ import annotations

import pytest

from infra.config import build
from preview.assumptions import assumptions
from preview.stack_files import load_stack_config
from tests.conftest import REPO


RUNTIME = {"workerEnvironment": "runtime"}


@pytest.mark.parametrize("stack, expected", [
    ("prod", ["REGULAR channel's default", "worker image base: rayproject/ray:2.60.0-py312", "KubeRay >= 1.5.1",
              "MegaScale", "RayJob-owned cluster", "built by Cloud Build"]),
    ("dev", ["REGULAR channel's default", "worker image base: rayproject/ray:2.60.0-py312", "KubeRay",
             "RayJob-owned cluster", "RayJob submitter"]),
    ("jobset", ["worker image base: rayproject/ray:2.60.0-py312", "MegaScale", "slice pools from zero",
                "image streaming"]),
    ("pathways", ["pathways/server", "pathways/proxy_server", "tpu_pre_training"]),
])
def test_each_stack_lists_what_it_cannot_verify(stack, expected):
    lines = assumptions(build(load_stack_config(stack, REPO)))
    for word in expected:
        assert any(word in line for line in lines), (word, lines)


@pytest.mark.parametrize("stack, expected", [
    ("prod", ["image rayproject/ray:2.60.0-py312"]),
    ("jobset", ["image python:3.12.11-slim-bookworm", "install cache"]),
])
def test_the_runtime_install_lists_the_images_it_installs_into(stack, expected):
    lines = assumptions(build({**load_stack_config(stack, REPO), **RUNTIME}))
    for word in expected:
        assert any(word in line for line in lines), (word, lines)
    assert not any(line.startswith(("worker image", "image streaming")) for line in lines), lines


def test_a_version_the_user_pins_is_an_assumption_too_and_the_image_path_is_built_at_deploy():
    config = build({**load_stack_config("prod", REPO), "gkeVersion": "1.35", "workerEnvironment": "image"})
    lines = assumptions(config)
    assert any("gkeVersion=1.35 is assumed to be offered" in line for line in lines)
    assert any("built by Cloud Build from worker_env/cloudbuild.yaml during `pulumi up`" in line for line in lines)
    assert any(line.startswith("image streaming:") for line in lines)
    assert not any(line.startswith("image rayproject") for line in lines)
    docker = assumptions(build({**load_stack_config("prod", REPO), "workerEnvironment": "image",
                                "imageBuilder": "docker"}))
    assert any("built from worker_env/Dockerfile during `pulumi up` (needs Docker" in line for line in docker)


def test_the_plan_names_the_recipe_the_run_follows():
    from preview.model import build_plan
    from preview.k8s.validation import default_schemas_dir
    from tests.conftest import committed_stack_run
    plan = build_plan(committed_stack_run("prod"), build(load_stack_config("prod", REPO)), "prod", default_schemas_dir())
    assert plan.recipe[0].startswith("recipe: AI-Hypercomputer/tpu-recipes")
    assert plan.as_dict()["recipe"] == plan.recipe


def test_what_a_first_real_up_reads_from_the_project_is_listed():
    """infra/preflight.py's look-ups and the cluster's access and upgrade settings only the cloud can confirm
    (sources in docs/assumptions.md)."""
    lines = assumptions(build(load_stack_config("prod", REPO)))
    for words in ("gcloud services enable cloudresourcemanager.googleapis.com container.googleapis.com --project "
                  "my-tpu-project", "container.clusters.connect", "logging.logEntries.list",
                  "NO_MINOR_OR_NODE_UPGRADES", "imports a bucket kept by an earlier destroy"):
        assert any(words in line for line in lines), words
    dev = assumptions(build(load_stack_config("dev", REPO)))
    assert not any("imports a bucket" in line for line in dev)   # dev's bucket is deleted with the stack


def test_the_image_user_the_install_cache_is_handed_to_is_the_ray_backends_assumption_alone():
    """Ray pods run as the Ray image's user (uid 1000: ray-project/ray docker/base-deps/Dockerfile RAY_UID) and an
    init container hands the node's cache directory to it; JobSet pods install as root with no such step."""
    from workloads.backends import backend_for

    dev = build({**load_stack_config("dev", REPO), **RUNTIME})
    assert any("uid 1000" in line for line in backend_for(dev).assumptions(dev))
    jobset = assumptions(build({**load_stack_config("jobset", REPO), **RUNTIME}))
    assert any(line.startswith("install cache:") for line in jobset)
    assert not any("Ray image" in line or "uid 1000" in line for line in jobset), jobset


def test_the_hbm_assumption_names_what_the_workers_really_run():
    """The lock's jax and libtpu where the backend runs the worker environment; a backend with images of its own
    (Pathways) is not said to run the lock."""
    prod = [line for line in assumptions(build(load_stack_config("prod", REPO))) if line.startswith("HBM")]
    assert "the workers run jax" in prod[0]
    pathways = [line for line in assumptions(build(load_stack_config("pathways", REPO))) if line.startswith("HBM")]
    assert "the workers run jax" not in pathways[0] and "pathways/server" in pathways[0]


def test_an_eval_step_is_shown_as_compiled_by_the_eval_compile_or_estimated_when_off():
    """MaxText 0.2.5's train_compile lowers and compiles train.train_step only (maxtext/trainers/pre_train/
    train_compile.py main); compileCheck compiles the eval step with aot/eval_compile.py, built from MaxText's source
    as train.py builds it (an assumption the plan names). With compileCheck=off its HBM is the estimate only."""
    raw = {**load_stack_config("dev", REPO), "datasetType": "grain", "datasetPath": "gs://my-data/train-*.array_record",
           "evalDatasetPath": "gs://my-data/eval-*.array_record", "evalSteps": 1}
    [line] = [line for line in assumptions(build(raw)) if line.startswith("eval step")]
    assert "XLA decides it before anything is created" in line and "aot/eval_compile.py" in line
    [line] = [line for line in assumptions(build({**raw, "compileCheck": "off"})) if line.startswith("eval step")]
    assert "never XLA's (compileCheck=off)" in line
    # MaxText 0.2.5 trainers/pre_train/train.py compiles the eval step ahead of time at the run's start, so a step
    # that does not fit ends the run there, not at its first evaluation.
    assert "ahead of time at the run's start" in line and "first evaluation" not in line
    assert not [line for line in assumptions(build(load_stack_config("dev", REPO))) if line.startswith("eval step")]


def test_an_eval_split_s_size_against_the_hosts_is_shown_as_an_assumption():
    """MaxText 0.2.5 cannot pad the eval pass of a host with no eval record (multihost_dataloading.py
    _make_padding_batch); the split's size is counted only at run start (trainer/eval_split.py), so the plan
    names the host count the split must cover."""
    raw = {**load_stack_config("jobset", REPO), "datasetType": "grain",
           "datasetPath": "gs://my-data/c4/train-*.array_record",
           "evalDatasetPath": "gs://my-data/c4/eval-*.array_record", "evalSteps": "2"}
    config = build(raw)
    hosts = config.tpu.slices * config.tpu.shape.hosts
    [line] = [line for line in assumptions(config) if line.startswith("eval split size")]
    assert f"each data-loading host (up to {hosts}" in line and "evalDatasetPath" in line
    assert not any(line.startswith("eval split size") for line in assumptions(build(load_stack_config("jobset",
                                                                                                       REPO))))

"""Pathways images and head sizing against their public sources.

- Images: Google's "Introduction to Pathways on Cloud" page names the scheme (`pathways/server:jax-<jax version>`,
  `pathways/proxy_server:jax-<jax version>`, the proxy and the servers of one release); the server must match the
  JAX of the client. MaxText's docs/release_notes.md (AI-Hypercomputer/maxtext @e591f30c): v0.2.4 "Upgraded JAX to
  version 0.10.2 for pre-training", v0.2.3 "to version 0.10.0". The 0.10.2 server/proxy release is pinned by digest
  (docs/assumptions.md: the tags cannot be verified offline).
- Head sizing: xpk (AI-Hypercomputer/xpk @367c8382) src/xpk/templates/pathways_workload_create.yaml.j2 (proxy cpu 16 /
  memory 100G, resource manager cpu 8 / memory 32G) and src/xpk/core/docker_resources.py
  get_main_container_resources (the Pathways user container: cpu 24 / memory 100G).
"""
from __future__ import annotations

import re

from core.pathways import PROXY_RESOURCES, RM_RESOURCES, TRAINER_RESOURCES, head_requests
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.pathways.component import pathways_objects
from workloads.pathways.manifests import HEAD_JOB

# MaxText release -> the JAX its pre-training image runs (maxtext docs/release_notes.md @e591f30c).
MAXTEXT_PRETRAINING_JAX = {"0.2.3": "0.10.0", "0.2.4": "0.10.2"}


def pathways_jax(image: str) -> str:
    tag = image.partition("@")[0].rsplit(":", 1)[1]
    match = re.fullmatch(r"(?:jax-|\d{8}-jax_)(\d+\.\d+\.\d+)", tag)
    assert match, image
    return match.group(1)


def test_default_images_are_one_pinned_pathways_release_for_the_trainers_jax():
    config = build(load_stack_config("pathways", REPO))
    server, proxy, trainer = (config.pathways.server_image, config.pathways.proxy_image,
                              config.pathways.trainer_image)
    for image in (server, proxy):
        assert image.startswith("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/")
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), "pinned by digest: the bytes cannot change under a tag"
    assert server.partition("@")[0].rsplit(":", 1)[1] == proxy.partition("@")[0].rsplit(":", 1)[1]
    maxtext = trainer.rsplit(":", 1)[1]
    assert trainer.startswith("us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:")
    # MaxText >= 0.2.4 for the elastic keys the Pathways stack sets (the config refuses older ones).
    assert tuple(int(p) for p in maxtext.split(".")) >= (0, 2, 4)
    assert pathways_jax(server) == pathways_jax(proxy) == MAXTEXT_PRETRAINING_JAX[maxtext]


def test_head_containers_are_sized_as_xpk_sizes_them():
    assert PROXY_RESOURCES == {"cpu": "16", "memory": "100G"}
    assert RM_RESOURCES == {"cpu": "8", "memory": "32G"}
    assert TRAINER_RESOURCES == {"cpu": "24", "memory": "100G"}
    jobset = pathways_objects(build(load_stack_config("pathways", REPO)))["pathways-jobset"]
    [head] = [j for j in jobset["spec"]["replicatedJobs"] if j["name"] == HEAD_JOB]
    pod = head["template"]["spec"]["template"]["spec"]
    sizes = {c["name"]: c["resources"]["limits"] for c in pod["initContainers"] + pod["containers"]}
    assert sizes == {"pathways-proxy": PROXY_RESOURCES, "pathways-rm": RM_RESOURCES, "maxtext": TRAINER_RESOURCES}
    cpu, memory_gib = head_requests()
    # xpk only offers head machines with >= 49 vCPUs and >= 233 GiB (src/xpk/core/pathways.py
    # get_pathways_machine_types): the head's 48 vCPU / 232 GB plus system pods.
    assert cpu == 48 and round(memory_gib * 2**30 / 1e9) == 232

"""Config agrees with the workers' locked environment (worker_env/requirements.lock).

The lock is resolved for CPython 3.12 (maxtext 0.2.5 declares Requires-Python >= 3.12 and its [tpu] extra asks
jax >= 0.11.1, which needs Python >= 3.12 — the maxtext 0.2.5 and jax 0.11.1 wheel METADATA), so images must
run Python 3.12; the Ray image must be the lock's Ray (Ray refuses a runtime environment whose Ray differs).
"""
from __future__ import annotations

import pytest

from core.maxtext_facts import PINNED_MAXTEXT
from core.worker_lock import load_pins
from infra.config import KEYS_BY_NAME, ConfigError, build
from tests.conftest import MINIMAL, REPO

PINS = load_pins(REPO)
RUNTIME = {"workerEnvironment": "runtime"}     # rayImage and jobsetImage are the runtime install's


def test_the_defaults_and_the_trainer_name_the_locked_versions():
    assert KEYS_BY_NAME["maxtextVersion"].default == PINNED_MAXTEXT == PINS["maxtext"]
    assert KEYS_BY_NAME["rayImage"].default.split(":")[1].startswith(PINS["ray"] + "-py312")


@pytest.mark.parametrize("overrides, key, words", [
    ({"rayImage": "rayproject/ray:2.60.0-py311"}, "rayImage", "Python 3.12"),
    ({"rayImage": "rayproject/ray:2.59.0-py312"}, "rayImage", "Ray 2.60.0"),
    ({"maxtextVersion": "0.2.4"}, "maxtextVersion", "0.2.5, the MaxText of the workers' locked environment"),
    ({"workloadBackend": "jobset", "jobsetImage": "python:3.11.9-slim-bookworm"}, "jobsetImage", "Python 3.12"),
])
def test_an_image_or_version_the_lock_does_not_hold_is_refused(overrides, key, words):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, **RUNTIME, **overrides})
    [line] = error.value.problems
    assert line.startswith(f"tpu-multislice:{key}={overrides[key]!r}") and words in line


def test_an_image_pinned_by_digest_is_accepted():
    build({**MINIMAL, **RUNTIME, "rayImage": "us-docker.pkg.dev/p/r/worker@sha256:" + "a" * 64})


@pytest.mark.parametrize("overrides, key", [
    ({"rayImage": "rayproject/ray:2.60.0-py312"}, "rayImage"),
    ({"workloadBackend": "jobset", "jobsetImage": "python:3.12.11-slim-bookworm"}, "jobsetImage"),
])
def test_the_runtime_images_are_refused_with_the_built_image_in_one_line(overrides, key):
    """With the default workerEnvironment=image every pod runs the image built from worker_env/Dockerfile: a
    runtime image set anyway would be silently ignored."""
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, **overrides})
    [line] = error.value.problems
    assert line.startswith(f"tpu-multislice:{key}={overrides[key]!r}: unset it") and "workerEnvironment" in line


def test_the_built_image_starts_from_the_runtime_installs_ray_image():
    """Both paths run the lock's Ray on the same base: the Dockerfile's FROM is rayImage's default."""
    from infra.worker_image import base_image
    assert base_image(REPO) == KEYS_BY_NAME["rayImage"].default

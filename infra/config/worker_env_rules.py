"""Config build, step 2: the workers' locked environment (worker_env/requirements.lock). The MaxText version and
the runtime images a backend installs on must be the lock's; one line per mistake, as rules.py."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from core.worker_lock import LOCK_PATH, PYTHON, load_pins
from infra import naming
from infra.config.parse import problem
from infra.config.schema import KEYS_BY_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCKED_PYTHON = ".".join(map(str, PYTHON))


@functools.lru_cache(maxsize=1)
def locked_pins() -> dict[str, str]:
    return load_pins(REPO_ROOT)


def _image_python(key: str, image: str) -> str | None:
    """The Python an image's tag names: rayproject/ray:2.60.0-py312 → 3.12, python:3.12.11-slim → 3.12."""
    tag = naming.image_tag(image)
    if match := re.search(r"(?:^|-)py3(\d+)(?:-|$)", tag):
        return f"3.{match.group(1)}"
    if image.rsplit(":", 1)[0].rsplit("/", 1)[-1] == "python" and (match := re.match(r"3\.(\d+)", tag)):
        return f"3.{match.group(1)}"
    return None


def check_worker_environment(v: dict[str, Any], problems: list[str]) -> None:
    """Every backend that installs Python packages installs the one lock (worker_env/requirements.lock), made for
    CPython 3.12 (maxtext 0.2.5 and jax >= 0.11.1 need Python >= 3.12): the images must run that Python, the Ray
    image that Ray, and maxtextVersion must be the lock's."""
    pins = locked_pins()
    backend = v["workloadBackend"]
    version = v["maxtextVersion"]
    if backend in ("rayjob", "jobset") and version is not None and version != pins["maxtext"]:
        problems.append(problem("maxtextVersion", version, f"{pins['maxtext']}, the MaxText of the workers' locked "
                                f"environment ({LOCK_PATH}; change it there with scripts/lock_worker_env.sh)"))
    images = {"rayjob": "rayImage", "jobset": "jobsetImage"}
    key = images.get(backend)
    # With the built image (workerEnvironment=image) the runtime images are not used: a user's is refused as
    # doing nothing (check_applies), once.
    image = v[key] if key and v["workerEnvironment"] == "runtime" else None
    if image is None:
        return
    python = _image_python(key, image)
    if python is not None and python != LOCKED_PYTHON:
        problems.append(problem(key, image, f"an image with Python {LOCKED_PYTHON}, the Python the workers' "
                                f"environment is locked for (e.g. {KEYS_BY_NAME[key].default})"))
    if key == "rayImage":
        match = re.match(r"(\d+\.\d+\.\d+)", naming.image_tag(image))
        if match and match.group(1) != pins["ray"]:
            problems.append(problem(key, image, f"Ray {pins['ray']}, the Ray of the workers' locked environment "
                                    f"(e.g. {KEYS_BY_NAME[key].default})"))

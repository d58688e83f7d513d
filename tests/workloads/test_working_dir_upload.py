"""The RayJob's working_dir upload holds one copy of the code, not three.

The submitter uploads the code mount (a ConfigMap volume) as the job's working_dir. The kubelet writes such a
volume with its AtomicWriter (kubernetes pkg/volume/util/atomic_writer.go): the files in a hidden
`..<timestamp>` directory, `..data` a symlink to it, each top-level path a symlink through `..data`. Ray 2.60 zips
the working_dir with `_zip_files` (ray/_private/runtime_env/packaging.py), whose `_dir_travel` follows symlinked
directories (Path.is_dir, iterdir), and applies the runtime env's `excludes` (gitwildmatch, relative to the
working_dir, `_get_excludes`). Played here with Ray's own function on that layout.
"""
from __future__ import annotations

import os
import zipfile

import pytest
import yaml

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.bundle import load_bundle
from workloads.common import CODE_MOUNT
from workloads.ray.component import ray_objects

packaging = pytest.importorskip("ray._private.runtime_env.packaging")

FILES = {"trainer/entrypoint.py": "print('train')\n", "core/planner.py": "PLAN = 1\n", "core/__init__.py": ""}


def configmap_volume(root) -> None:
    """The AtomicWriter's layout of a volume holding FILES under their repository paths."""
    stamp = root / "..2026_12_01_21_00_00.123456789"
    for path, text in FILES.items():
        (stamp / path).parent.mkdir(parents=True, exist_ok=True)
        (stamp / path).write_text(text)
    os.symlink(stamp.name, root / "..data")
    for top in sorted({path.split("/")[0] for path in FILES}):
        os.symlink(f"..data/{top}", root / top)


def uploaded(root, excludes: list[str], tmp_path) -> list[str]:
    archive = tmp_path / "pkg.zip"
    packaging._zip_files(str(root), excludes, str(archive), include_gitignore=False)
    with zipfile.ZipFile(archive) as handle:
        return sorted(name for name in handle.namelist() if not name.endswith("/"))


@pytest.fixture
def stack_runtime_env():
    job = ray_objects(build(load_stack_config("dev", REPO)), load_bundle())["ray-job"]
    return yaml.safe_load(job["spec"]["runtimeEnvYAML"])


def test_the_upload_holds_each_file_once(stack_runtime_env, tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    configmap_volume(root)
    assert uploaded(root, stack_runtime_env["excludes"], tmp_path) == sorted(FILES)


def test_without_the_excludes_ray_uploads_three_copies(tmp_path):
    """Why the excludes are there: Ray follows the volume's symlinks."""
    root = tmp_path / "code"
    root.mkdir()
    configmap_volume(root)
    names = uploaded(root, [], tmp_path)
    assert len(names) == 3 * len(FILES)
    assert sum(name.startswith("..data/") for name in names) == len(FILES)


def test_the_submitter_uploads_with_the_same_excludes(stack_runtime_env):
    job = ray_objects(build(load_stack_config("dev", REPO)), load_bundle())["ray-job"]
    command = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["command"]
    submitted = yaml.safe_load(command[command.index("--runtime-env-json") + 1])
    assert submitted["excludes"] == stack_runtime_env["excludes"] and submitted["working_dir"] == CODE_MOUNT

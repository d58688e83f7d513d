"""The worker image's tag is derived from exactly its build context.

Sources: pulumi/pulumi-docker-build provider/internal/context.go (hashBuildContext, hashFile: the Dockerfile's text,
then every file the ignore-file admits with its path and mode; getIgnorePatterns: <Dockerfile>.dockerignore first);
moby/patternmatcher ignorefile/ignorefile.go (ReadAll) and patternmatcher.go (Pattern.compile, Pattern.match,
MatchesOrParentMatches); the semantics table below follows patternmatcher_test.go's cases and Docker's
".dockerignore file" reference (https://docs.docker.com/build/concepts/context/#dockerignore-files).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infra import worker_image
from infra.build_context import IgnoreRules, context_files, context_tag, read_ignore_file
from preview.harness import run_program
from tests.conftest import MINIMAL, REPO

DOCKERFILE = "worker_env/Dockerfile"


@pytest.mark.parametrize("patterns,path,excluded", [
    (["*"], "core/a.py", True),                        # '*' matches the top-level directory, so all below it
    (["*", "!core/"], "core/a.py", False),             # "core/" is cleaned to "core"; its files come back
    (["*", "!core/", "core/x"], "core/x/y.py", True),  # the last matching pattern decides
    (["**/__pycache__"], "__pycache__/m.pyc", True),   # "**/" also matches no directory at all
    (["**/__pycache__"], "a/b/__pycache__/m.pyc", True),
    (["**/*.pyc"], "a/b/m.pyc", True),
    (["*.pyc"], "a/m.pyc", False),                      # '*' never crosses '/'
    (["a/?.py"], "a/b.py", True),
    (["a/?.py"], "a/bc.py", False),
    (["/a/b"], "a/b/c", True),                          # a leading '/' is dropped
    (["a/**"], "a/b/c", True),
    (["docs"], "docsx/a", False),
    (["# comment", "a"], "a", True),
    (["a.b"], "axb", False),                            # '.' is literal
    (["[a-c].txt"], "b.txt", True),
    (["a", "!a/keep"], "a/keep", False),
])
def test_ignore_rules_follow_patternmatcher(patterns, path, excluded):
    rules = IgnoreRules(read_ignore_file("\n".join(patterns)))
    assert rules.excluded(path) is excluded


def test_read_ignore_file_like_ignorefile_readall():
    text = "\ufeff# c\n\n  ./core/  \n!  trainer//x/../y \n/abs\n"
    assert read_ignore_file(text) == ["core", "!trainer/y", "abs"]


def test_the_context_is_exactly_what_the_dockerfile_copies():
    """The lock alone: the code reaches the pods through the ConfigMap (Ray's working_dir, JobSet's PYTHONPATH),
    so it is neither in the image nor in its tag."""
    assert context_files(REPO, DOCKERFILE) == ["worker_env/requirements.lock"]
    copies = [line.split()[1] for line in (REPO / DOCKERFILE).read_text().splitlines() if line.startswith("COPY ")]
    assert copies == ["worker_env/requirements.lock"]


def _copy_context(tmp_path: Path) -> Path:
    """The repository's context inputs plus files the context leaves out."""
    root = tmp_path / "repo"
    for part in ("core", "trainer", "worker_env"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "README.md").write_text("not in the image\n")
    (root / "trainer" / "__pycache__").mkdir(exist_ok=True)
    (root / "trainer" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    return root


def _edit(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\n")


# Every kind of change to what the image holds, and what leaves the image (and so its tag) alone: the code.
CHANGES = {
    "lock": lambda r: _edit(r / "worker_env" / "requirements.lock"),
    "Dockerfile": lambda r: _edit(r / DOCKERFILE),
    "dockerignore": lambda r: (r / "worker_env" / "Dockerfile.dockerignore").write_text(
        (r / "worker_env" / "Dockerfile.dockerignore").read_text() + "!README.md\n"),
    "mode": lambda r: os.chmod(r / "worker_env" / "requirements.lock", 0o755),
}
UNCHANGED = {
    "python": lambda r: _edit(r / "core" / "tpu_catalog.py"),
    "json": lambda r: _edit(r / "core" / "xla_calibration.json"),
    "new file": lambda r: (r / "trainer" / "notes.txt").write_text("x\n"),
    "new directory": lambda r: ((r / "core" / "data").mkdir(), (r / "core" / "data" / "v.bin").write_bytes(b"\1")),
    "removed file": lambda r: (r / "trainer" / "smoke.py").unlink(),
    "renamed file": lambda r: (r / "trainer" / "smoke.py").rename(r / "trainer" / "smoke2.py"),
    "code mode": lambda r: os.chmod(r / "core" / "tpu_catalog.py", 0o755),
    "trainer/local": lambda r: _edit(r / "trainer" / "local" / "__init__.py"),
    "bytecode": lambda r: _edit(r / "trainer" / "__pycache__" / "x.cpython-311.pyc"),
    "outside": lambda r: _edit(r / "README.md"),
    "requirements.in": lambda r: _edit(r / "worker_env" / "requirements.in"),
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_every_kind_of_change_in_the_context_gives_a_new_tag(tmp_path, kind):
    root = _copy_context(tmp_path)
    before = context_tag(root, DOCKERFILE)
    CHANGES[kind](root)
    assert context_tag(root, DOCKERFILE) != before


@pytest.mark.parametrize("kind", sorted(UNCHANGED))
def test_a_change_outside_the_context_keeps_the_tag(tmp_path, kind):
    root = _copy_context(tmp_path)
    before = context_tag(root, DOCKERFILE)
    UNCHANGED[kind](root)
    assert context_tag(root, DOCKERFILE) == before


class ImmutableTagRegistry:
    """An Artifact Registry repository with immutable tags: a tag, once pushed, names one image
    (https://cloud.google.com/artifact-registry/docs/docker/manage-images#immutable_tags)."""

    def __init__(self):
        self.images: dict[str, bytes] = {}

    def push(self, ref: str, content: bytes) -> None:
        if self.images.setdefault(ref, content) != content:
            raise RuntimeError(f"{ref}: tag is immutable and already names another image")


def _image_content(root: Path) -> bytes:
    """What the built image holds from the context, read the Dockerfile's way (COPY the lock), independently of
    the tag's code."""
    lock = root / "worker_env" / "requirements.lock"
    return oct(lock.stat().st_mode).encode() + lock.read_bytes() + (root / DOCKERFILE).read_bytes()


def _built_ref(run, builder: str) -> str:
    """The image reference a build pushes: the Docker build's tag, or what the Cloud Build command builds on
    (its trigger: a new reference is a new build)."""
    if builder == "docker":
        [ref] = run.one("docker-build:index:Image").inputs["tags"]
    else:
        [ref] = run.one("command:local:Command", "worker-build").inputs["triggers"]
    return ref


def _pod_images(run) -> set[str]:
    """Every image reference of the stack's registry in the job's manifests (RayJob or JobSet)."""
    found: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and "-docker.pkg.dev/" in value:
            found.add(value)
    for resource in run.resources:
        if resource.type in ("kubernetes:ray.io/v1:RayJob", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"):
            walk(resource.inputs)
    return found


@pytest.mark.parametrize("builder, backend", [("docker", "rayjob"), ("cloud-build", "rayjob"),
                                              ("cloud-build", "jobset")])
def test_a_code_edit_keeps_the_image_and_a_lock_edit_pushes_a_new_tag(tmp_path, monkeypatch, builder, backend):
    """`pulumi up`, a code edit (core/ and trainer/), `pulumi up`: the same tag, so nothing is built, pushed or
    pulled again (the pods get the code from the ConfigMap); a lock edit, `pulumi up`: a new tag, and the push
    does not meet an existing one in the immutable repository."""
    root = _copy_context(tmp_path)
    monkeypatch.setattr(worker_image, "PROJECT_ROOT", root)
    registry = ImmutableTagRegistry()
    config = {**MINIMAL, "workerEnvironment": "image", "imageBuilder": builder, "workloadBackend": backend}

    def up() -> str:
        run = run_program(config, stack="img")
        ref = _built_ref(run, builder)
        assert ref.endswith(":" + context_tag(root, DOCKERFILE)) and _pod_images(run) == {ref}
        registry.push(ref, _image_content(root))
        return ref

    first = up()
    UNCHANGED["python"](root)
    UNCHANGED["new file"](root)
    UNCHANGED["json"](root)
    assert up() == first
    CHANGES["lock"](root)
    assert up() != first
    assert len(registry.images) == 2

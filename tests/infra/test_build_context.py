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
    files = context_files(REPO, DOCKERFILE)
    assert "worker_env/requirements.lock" in files and "core/xla_calibration.json" in files
    assert {f.split("/")[0] for f in files} == {"core", "trainer", "worker_env"}
    assert not [f for f in files if f.startswith("trainer/local/") or "__pycache__" in f]
    tracked = {p.relative_to(REPO).as_posix() for d in ("core", "trainer") for p in (REPO / d).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and "local" not in p.relative_to(REPO / d).parts[:1]}
    assert tracked <= set(files)


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


# Every kind of file in the context, and what leaves the context alone.
CHANGES = {
    "python": lambda r: _edit(r / "core" / "tpu_catalog.py"),
    "json": lambda r: _edit(r / "core" / "xla_calibration.json"),
    "lock": lambda r: _edit(r / "worker_env" / "requirements.lock"),
    "Dockerfile": lambda r: _edit(r / DOCKERFILE),
    "dockerignore": lambda r: (r / "worker_env" / "Dockerfile.dockerignore").write_text(
        (r / "worker_env" / "Dockerfile.dockerignore").read_text() + "!README.md\n"),
    "new file": lambda r: (r / "trainer" / "notes.txt").write_text("x\n"),
    "new directory": lambda r: ((r / "core" / "data").mkdir(), (r / "core" / "data" / "v.bin").write_bytes(b"\1")),
    "removed file": lambda r: (r / "trainer" / "smoke.py").unlink(),
    "renamed file": lambda r: (r / "trainer" / "smoke.py").rename(r / "trainer" / "smoke2.py"),
    "mode": lambda r: os.chmod(r / "core" / "tpu_catalog.py", 0o755),
}
UNCHANGED = {
    "trainer/local": lambda r: _edit(r / "trainer" / "local" / "__init__.py"),
    "bytecode": lambda r: _edit(r / "trainer" / "__pycache__" / "x.cpython-311.pyc"),
    "outside": lambda r: _edit(r / "README.md"),
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
    """What the built image holds from the context, read the Dockerfile's way (COPY lock, core/, trainer/ without
    trainer/local and bytecode), independently of the tag's code."""
    paths = [root / "worker_env" / "requirements.lock"] + sorted(
        p for d in ("core", "trainer") for p in (root / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.relative_to(root).as_posix().startswith(
            "trainer/local/"))
    return b"".join(p.relative_to(root).as_posix().encode() + oct(p.stat().st_mode).encode() + p.read_bytes()
                    for p in paths) + (root / DOCKERFILE).read_bytes()


def _built_ref(run, builder: str) -> str:
    """The image reference a build pushes: the Docker build's tag, or what the Cloud Build command builds on
    (its trigger: a new reference is a new build)."""
    if builder == "docker":
        [ref] = run.one("docker-build:index:Image").inputs["tags"]
    else:
        [ref] = run.one("command:local:Command", "worker-build").inputs["triggers"]
    return ref


@pytest.mark.parametrize("builder", ["docker", "cloud-build"])
def test_up_after_a_change_to_a_file_the_old_tag_did_not_hash_pushes_a_new_tag(tmp_path, monkeypatch, builder):
    """`pulumi up` (image built and pushed), a change to core/xla_calibration.json (in the context, not a .py file),
    `pulumi up` again: the provider rebuilds on any context change, and the push must not meet an existing tag.
    The program's tag is context_tag of the project (so every kind of change above reaches it)."""
    root = _copy_context(tmp_path)
    monkeypatch.setattr(worker_image, "PROJECT_ROOT", root)
    registry = ImmutableTagRegistry()
    config = {**MINIMAL, "workerEnvironment": "image", "imageBuilder": builder}
    for step in ("first up", "change", "second up"):
        if step == "change":
            CHANGES["json"](root)
            continue
        ref = _built_ref(run_program(config, stack="img"), builder)
        assert ref.endswith(":" + context_tag(root, DOCKERFILE))
        registry.push(ref, _image_content(root))
    assert len(registry.images) == 2

"""The pinned CRDs a plain clone fetches for itself (preview/k8s/crd_fetch.py), and the plan without them.

The download runs against a loopback HTTP server laid out like GitHub's raw files
(https://raw.githubusercontent.com/OWNER/REPO/TAG/PATH), serving copies of the CRD bundle beside the repository;
the pins are the files and digests of KubeRay v1.7.0, JobSet v0.12.0 and Kueue v0.19.2 (the bundle's SOURCES.txt).
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from preview.k8s import crd_fetch
from tests.conftest import REPO


def _mirror(root: Path, schemas_dir: Path, corrupt: str | None = None) -> None:
    """The pinned files under root/OWNER/REPO/TAG/PATH; `corrupt`: the name of one served with a changed byte."""
    for pin in crd_fetch.PINS:
        target = root / pin.repo / pin.tag / pin.path
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (schemas_dir / pin.local).read_bytes()
        if pin.name == corrupt:
            data = data.replace(b"type: object", b"type: objecT", 1)
        target.write_bytes(data)


@pytest.fixture
def server(tmp_path):
    """(base URL, served directory) of an HTTP server on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def plain_clone(tmp_path, monkeypatch):
    """A repository root with nothing beside it and an empty cache: what a user's clone has."""
    root = tmp_path / "clone" / "repo"
    root.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(crd_fetch.ENV_OVERRIDE, raising=False)
    return root


def test_the_pins_are_the_bundles_files(schemas_dir):
    for pin in crd_fetch.PINS:
        assert hashlib.sha256((schemas_dir / pin.local).read_bytes()).hexdigest() == pin.sha256, pin.local
    assert crd_fetch.check_directory(schemas_dir) == []


def test_a_good_fetch_fills_the_cache_and_the_lookup_finds_it(server, schemas_dir, plain_clone):
    base, served = server
    _mirror(served, schemas_dir)
    assert crd_fetch.find_schemas(plain_clone).directory is None
    directory = crd_fetch.fetch(base_url=base, timeout=30)
    assert directory == crd_fetch.cache_dir()
    assert sorted(p.name for p in directory.rglob("*.yaml")) == sorted(p.name for p in crd_fetch.PINS)
    found = crd_fetch.find_schemas(plain_clone)
    assert (found.directory, found.source) == (directory, "cache")
    # A second fetch downloads nothing: the server is gone and it still succeeds.
    shutil.rmtree(served)
    assert crd_fetch.fetch(base_url=base, timeout=5) == directory


def test_a_checksum_mismatch_is_refused_in_one_line_and_nothing_is_kept(server, schemas_dir, plain_clone):
    base, served = server
    _mirror(served, schemas_dir, corrupt="jobset.x-k8s.io_jobsets.yaml")
    with pytest.raises(crd_fetch.CrdFetchError) as refused:
        crd_fetch.fetch(base_url=base, timeout=30)
    message = str(refused.value)
    assert "\n" not in message and "jobset/jobset.x-k8s.io_jobsets.yaml: SHA-256" in message
    assert "not the pinned d022b8762451" in message
    assert not (crd_fetch.cache_dir() / "jobset" / "jobset.x-k8s.io_jobsets.yaml").exists()
    assert list(crd_fetch.cache_dir().rglob("*.part")) == []
    # A file corrupted in the cache afterwards is not used either.
    _mirror(served, schemas_dir)
    crd_fetch.fetch(base_url=base, timeout=30)
    cached = crd_fetch.cache_dir() / "kueue" / "kueue.x-k8s.io_localqueues.yaml"
    cached.write_bytes(cached.read_bytes() + b"\n# edited\n")
    lookup = crd_fetch.find_schemas(plain_clone)
    assert lookup.directory is None and "kueue.x-k8s.io_localqueues.yaml has SHA-256" in lookup.notes[0]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_host_fails_quickly_in_one_line(plain_clone):
    """What setup.sh meets on a machine without GitHub: its step prints one line and setup goes on."""
    started = time.monotonic()
    env = {**os.environ, "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]}
    proc = subprocess.run([sys.executable, "-m", "preview.k8s.crd_fetch", "--timeout", "3", "--dest",
                           str(plain_clone / "crds"), "--base-url", f"http://127.0.0.1:{_closed_port()}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 15
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 100, proc.stdout
    assert lines[0].startswith("CRDs not fetched (127.0.0.1:") and "unreachable" in lines[0]
    assert f"{crd_fetch.ENV_OVERRIDE}=DIR" in lines[0]


def test_lookup_order_override_then_shared_then_cache(tmp_path, schemas_dir, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(schemas_dir, crd_fetch.cache_dir())
    root = tmp_path / "dev" / "repo"
    shutil.copytree(schemas_dir, tmp_path / "dev" / "shared" / "schemas")
    monkeypatch.delenv(crd_fetch.ENV_OVERRIDE, raising=False)
    assert crd_fetch.find_schemas(root).source == "shared"
    override = tmp_path / "offline-copy"
    for pin in crd_fetch.PINS:                      # any layout: the files' names and digests are what count
        override.mkdir(exist_ok=True)
        shutil.copy(schemas_dir / pin.local, override / pin.name)
    monkeypatch.setenv(crd_fetch.ENV_OVERRIDE, str(override))
    assert (crd_fetch.find_schemas(root).directory, crd_fetch.find_schemas(root).source) == (override, "override")
    (override / "ray.io_rayjobs.yaml").write_text("kind: CustomResourceDefinition\n")
    refused = crd_fetch.find_schemas(root)
    assert refused.directory is None
    assert refused.refused.startswith(f"{crd_fetch.ENV_OVERRIDE}={override}: ray.io_rayjobs.yaml has SHA-256")
    monkeypatch.delenv(crd_fetch.ENV_OVERRIDE)
    shutil.rmtree(tmp_path / "dev" / "shared")
    assert crd_fetch.find_schemas(root).source == "cache"


def _plan(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "preview", "--stack", "dev", "--root", str(root), *args],
                          cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)


def test_a_plain_clone_without_crds_says_so_first_and_fails_unless_opted_out(plain_clone):
    for name in ("Pulumi.dev.yaml", "__main__.py"):
        shutil.copy(REPO / name, plain_clone / name)
    proc = _plan(plain_clone)
    assert proc.returncode == 1, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("CRD check NOT run: no verified KubeRay v1.7.0, JobSet v0.12.0, Kueue v0.19.2 CRDs")
    opening = proc.stdout.split("Offline plan of stack")[0]
    assert "--no-crd-check" in opening and max(map(len, opening.splitlines())) <= 100
    opted_out = _plan(plain_clone, "--no-crd-check")
    assert opted_out.returncode == 0, opted_out.stderr
    assert opted_out.stdout.splitlines()[0] == crd_fetch.OPTED_OUT
    # A copy named by the override is checked and used; a wrong one is refused in one line before planning.
    bad = plain_clone.parent / "bad"
    bad.mkdir()
    (bad / "ray.io_rayjobs.yaml").write_text("kind: CustomResourceDefinition\n")
    refused = _plan(plain_clone, **{crd_fetch.ENV_OVERRIDE: str(bad)})
    assert refused.returncode == 2 and refused.stdout == ""
    # One refusal, laid out within 100 columns (a long path wraps under its key).
    assert refused.stderr.startswith(f"python -m preview: {crd_fetch.ENV_OVERRIDE}=")
    assert f"{crd_fetch.ENV_OVERRIDE}={bad}:" in "".join(refused.stderr.split())
    assert all(len(line) <= 100 for line in refused.stderr.splitlines())

"""The worker lock pairs jax with the jaxlib and libtpu that jax itself asks for on TPU.

Why: jax's `[tpu]` extra pins the libtpu of its own release train (the jax 0.12.0.1 wheel METADATA:
`Requires-Dist: libtpu==0.0.50.*; extra == "tpu"` and `jaxlib<=0.12.0.1,>=0.12.0.1; extra == "tpu"`). A lock made
from bare `jax` leaves libtpu to MaxText's floor (maxtext[tpu]: libtpu>=0.0.46), so the resolver takes the newest
libtpu (0.0.52 when this was written), a pair jax was never released or tested with. worker_env/requirements.in now
names `jax[tpu]`; this test refuses any lock whose jax, jaxlib and libtpu jax's metadata does not allow.

jax's metadata is read from a recorded copy (tests/worker_env/jax_metadata/jax-<version>.txt: the Name, Version,
Requires-Python and Requires-Dist lines of the wheel's METADATA), so the pairing check runs offline.
`test_the_recorded_metadata_is_the_index_s` re-reads the wheel from the package index (PEP 691 Simple API, the
index uv resolves against) and fails when the copy differs or is missing for the locked jax; with
UPDATE_GOLDENS=1 it writes the copy instead. Like tests/worker_env/test_lock_resolves.py, that one test needs
network access to the index (it downloads the ~3.5 MB jax wheel).
"""
from __future__ import annotations

import io
import json
import os
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from core.worker_lock import canonical, load_pins, parse_pins

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parent / "jax_metadata"
INDEX = os.environ.get("UV_INDEX_URL", "https://pypi.org/simple").rstrip("/")
_KEPT_FIELDS = ("Name:", "Version:", "Requires-Python:", "Requires-Dist:")

# The cluster's marker environment (scripts/lock_worker_env.sh: CPython 3.12, manylinux_2_31 x86_64).
CLUSTER = {"python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
           "platform_machine": "x86_64", "os_name": "posix"}


def recorded_path(jax_version: str) -> Path:
    return RECORDED / f"jax-{jax_version}.txt"


def requires_dist(metadata: str, extra: str) -> list[Requirement]:
    """Requirements that apply on the cluster when jax is installed with `extra` (base requirements included)."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        if requirement.marker is None or requirement.marker.evaluate({**CLUSTER, "extra": extra}):
            out.append(requirement)
    return out


def pairing_problems(pins: dict[str, str], metadata: str) -> list[str]:
    """One line per jax[tpu] requirement the locked pins break (absent or outside the specifier)."""
    problems = []
    for requirement in requires_dist(metadata, "tpu"):
        name = canonical(requirement.name)
        if name not in pins:
            problems.append(f"jax {pins['jax']}[tpu] requires {requirement}, the lock has no {name}")
        elif not requirement.specifier.contains(Version(pins[name]), prereleases=True):
            problems.append(f"jax {pins['jax']}[tpu] requires {requirement}, the lock has {name}=={pins[name]}")
    return problems


def _locked_metadata(pins: dict[str, str]) -> str:
    path = recorded_path(pins["jax"])
    assert path.exists(), (f"no recorded metadata for the locked jax {pins['jax']} ({path.name}): run "
                           f"UPDATE_GOLDENS=1 pytest {Path(__file__).relative_to(REPO_ROOT)} (needs the index)")
    return path.read_text()


def test_the_lock_pairs_jax_with_the_jaxlib_and_libtpu_jax_tpu_asks_for():
    pins = load_pins(REPO_ROOT)
    metadata = _locked_metadata(pins)
    names = {canonical(r.name) for r in requires_dist(metadata, "tpu")}
    assert {"jaxlib", "libtpu"} <= names, f"jax {pins['jax']}'s [tpu] extra no longer names jaxlib and libtpu"
    problems = pairing_problems(pins, metadata)
    assert not problems, "worker_env/requirements.lock:\n" + "\n".join(problems)


def test_a_libtpu_from_another_train_is_refused():
    """The lock as bare `jax` made it (libtpu 0.0.52 beside jax 0.12.0.1), and a jaxlib of another release."""
    pins = load_pins(REPO_ROOT)
    metadata = _locked_metadata(pins)
    libtpu = next(r for r in requires_dist(metadata, "tpu") if canonical(r.name) == "libtpu")
    assert libtpu.specifier == SpecifierSet("==0.0.50.*") or pins["jax"] != "0.12.0.1"
    other_train = {**pins, "libtpu": "0.0.52"}
    assert pairing_problems(other_train, metadata) == [
        f"jax {pins['jax']}[tpu] requires {libtpu}, the lock has libtpu==0.0.52"]
    assert pairing_problems({**pins, "jaxlib": "0.11.2"}, metadata), "a jaxlib of another jax release passed"
    assert pairing_problems({k: v for k, v in pins.items() if k != "libtpu"}, metadata), "no libtpu passed"
    # The parser reads the lock's own format (names with extras, hashes on continuation lines).
    assert parse_pins("libtpu==0.0.52 \\\n    --hash=sha256:00\n")["libtpu"] == "0.0.52"


# ---- the recorded copy is the index's (network) -------------------------------------------------------------

def _index_metadata(version: str) -> str:
    """The kept lines of METADATA in jax's py3-none-any wheel of `version`, from the package index."""
    request = urllib.request.Request(f"{INDEX}/jax/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    wheel = next(f for f in files if f["filename"] == f"jax-{version}-py3-none-any.whl")
    with urllib.request.urlopen(wheel["url"], timeout=120) as response:
        data = response.read()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return "".join(line + "\n" for line in text.splitlines() if line.startswith(_KEPT_FIELDS))


def test_the_recorded_metadata_is_the_index_s():
    version = load_pins(REPO_ROOT)["jax"]
    fresh = _index_metadata(version)
    path = recorded_path(version)
    if os.environ.get("UPDATE_GOLDENS"):
        path.write_text(fresh)
    assert path.exists(), f"{path.name} missing: UPDATE_GOLDENS=1 records it from the index"
    assert path.read_text() == fresh, f"{path.name} differs from jax {version}'s METADATA on {INDEX}"
    assert "libtpu" in {canonical(r.name) for r in requires_dist(fresh, "tpu")}

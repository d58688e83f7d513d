"""The workers' libtpu for the pre-flight compile: the version worker_env/requirements.lock pins (what every TPU
pod installs), so that XLA's verdict here is the workers' XLA.

jax loads the libtpu.so named by TPU_LIBRARY_PATH instead of its own libtpu package (jax/_src/cloud_tpu_init.py
and the TPU PJRT plugin look-up), and the .so does not depend on the Python version, so the workers' libtpu compiles
here under the jax of the compile's Python (aot/compile_python.py: this one, jax 0.10.2 on Python 3.11, or the one
TPU_MULTISLICE_COMPILE_PYTHON names; the workers' jax 0.12 needs Python >= 3.12); the plan names which front end
compiled, and calls it an assumption when it is not the workers'.

Where it is looked for, in order:
1. ENV_OVERRIDE=PATH: a libtpu.so of the pinned version (a machine without PyPI: the .so from an unpacked wheel or
   a site-packages, with its libtpu-<version>.dist-info beside its directory, which says its version);
   ENV_OVERRIDE=local: the libtpu installed here (jax[tpu]'s pin), on purpose;
2. the user's cache, `$XDG_CACHE_HOME/tpu-multislice/libtpu/<version>/` (default ~/.cache), filled by `python -m
   aot.workers_libtpu --fetch` (scripts/setup.sh runs it, best effort): pip downloads the pinned wheel by version
   with the lock's hashes (--require-hashes), its SHA-256 is checked again here against the lock's, and it is
   unpacked. A cached copy whose recorded digest is not one of the lock's is not used.
Not found: the compile falls back to the local libtpu and the plan says so (its verdicts are keyed under that
version, so they never stand for the workers').
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from core.worker_lock import LOCK_PATH

ENV_OVERRIDE = "TPU_MULTISLICE_LIBTPU_SO"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
MARKER = "wheel.sha256"          # in the cache directory: the digest of the wheel it was unpacked from


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: frozenset[str]       # sha256 of every wheel the lock accepts


@dataclass(frozen=True)
class Found:
    so: Path | None              # None: the local libtpu (jax[tpu]'s)
    version: str
    note: str | None = None      # one line when it is not the workers' libtpu


def lock_pin(root: Path = PROJECT_ROOT) -> Pin:
    """libtpu's version and hashes in the workers' lock (`libtpu==V \\` then `--hash=sha256:H` lines)."""
    text = (root / LOCK_PATH).read_text()
    block = re.search(r"^libtpu==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", text, re.M)
    if block is None:
        raise ValueError(f"{LOCK_PATH} pins no libtpu with hashes")
    return Pin(block.group(1), frozenset(re.findall(r"sha256:([0-9a-f]{64})", block.group(2))))


def cache_dir(version: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tpu-multislice" / "libtpu" / version


def so_version(so: Path) -> str | None:
    """The version of the libtpu.so at `so`: its libtpu-<version>.dist-info beside its package directory."""
    infos = sorted(so.resolve().parents[1].glob("libtpu-*.dist-info"))
    return infos[-1].name[len("libtpu-"):-len(".dist-info")] if infos else None


def find(root: Path = PROJECT_ROOT) -> Found:
    """The libtpu the pre-flight compile loads (see the module docstring)."""
    pin = lock_pin(root)
    try:
        local = importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        local = "not installed"
    override = os.environ.get(ENV_OVERRIDE, "")
    if override == "local":
        return Found(None, local, f"the local libtpu {local} compiled ({ENV_OVERRIDE}=local), not the "
                                  f"workers' {pin.version}")
    if override:
        so = Path(override)
        version = so_version(so) if so.is_file() else None
        if version != pin.version:
            found = "no such file" if not so.is_file() else f"libtpu {version or 'of unknown version'}"
            return Found(None, local, f"{ENV_OVERRIDE} is {found}, not {pin.version}: "
                                      f"local libtpu {local} compiled")
        return Found(so, version)
    cached = cache_dir(pin.version)
    so = cached / "libtpu" / "libtpu.so"
    marker = cached / MARKER
    if so.is_file() and marker.is_file() and marker.read_text().strip() in pin.hashes:
        return Found(so, pin.version)
    return Found(None, local, f"the workers' libtpu {pin.version} is not fetched (python -m aot.workers_libtpu "
                              f"--fetch): the local libtpu {local} compiled")


def fetch(root: Path = PROJECT_ROOT, out=sys.stderr) -> Path:
    """Download the pinned libtpu wheel with pip (by version, --require-hashes with the lock's hashes), check its
    SHA-256 against the lock's, and unpack it into the cache. Returns the libtpu.so."""
    pin = lock_pin(root)
    target = cache_dir(pin.version)
    with tempfile.TemporaryDirectory(prefix="libtpu-") as scratch:
        requirement = Path(scratch) / "requirements.txt"
        requirement.write_text(f"libtpu=={pin.version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(pin.hashes))
                               + "\n")
        wheels = Path(scratch) / "wheels"
        print(f"libtpu: downloading the workers' libtpu {pin.version} (about 215 MB) with pip", file=out, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary",
                        ":all:", "--progress-bar", "off", "-q", "-r", str(requirement), "-d", str(wheels)],
                       check=True)
        [wheel] = wheels.glob("libtpu-*.whl")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest not in pin.hashes:
            raise ValueError(f"{wheel.name}: sha256 {digest} is not one of {LOCK_PATH}'s for libtpu {pin.version}")
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        (unpacked / MARKER).write_text(digest + "\n")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(unpacked), target)
    return target / "libtpu" / "libtpu.so"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot.workers_libtpu",
                                     description="The workers' libtpu for the pre-flight compile.")
    parser.add_argument("--fetch", action="store_true", help="download and check it into the user's cache")
    args = parser.parse_args(argv)
    found = find()
    if args.fetch and found.so is None and not os.environ.get(ENV_OVERRIDE):
        try:
            fetch()
        except (OSError, ValueError, subprocess.CalledProcessError) as error:
            print(f"libtpu: not fetched: {str(error)[:80]}", file=sys.stderr)
            return 1
        found = find()
    print(found.so if found.so else found.note)
    return 0 if found.so else 1


if __name__ == "__main__":
    sys.exit(main())

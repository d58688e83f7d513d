"""The committed worker lock is what the pinned uv resolves from worker_env/requirements.in today.

Runs `scripts/lock_worker_env.sh --check`, which re-resolves requirements.in for CPython 3.12 on
manylinux_2_31 x86_64 (the cluster's rayproject/ray:2.60.0-py312 workers) against the package index and
diffs the result, hashes included, with worker_env/requirements.lock. It fails when
- requirements.in no longer resolves, e.g. the old worker command's pair: maxtext 0.2.5's [tpu] extra asks
  jax>=0.11.1 (the maxtext 0.2.5 wheel METADATA, `Requires-Dist`), so adding `jax==0.10.2` makes
  uv report "your requirements are unsatisfiable"; and jax 0.11.1 needs Python >= 3.12
  (the package index's Simple API page for jax: requires-python of jax-0.11.1-py3-none-any.whl), or
- the lock is stale: requirements.in changed, a pinned version or file hash no longer matches the index,
  or the lock was written by another uv version.
New upstream releases alone do not fail it: the script keeps the committed pins as uv preferences.

Needs network access to the package index (CI has it); takes 10-40 s, network-bound (uv itself uses ~1 s
of CPU). Skipped only when uv is not installed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "lock_worker_env.sh"
LOCK = REPO_ROOT / "worker_env" / "requirements.lock"


def find_uv() -> str | None:
    """uv as the project installs it (requirements.txt pins it into .venv), else the one beside this Python."""
    candidates = [
        os.environ.get("UV"),
        str(REPO_ROOT / ".venv" / "bin" / "uv"),
        str(Path(sys.executable).parent / "uv"),
        shutil.which("uv"),
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _uv_version(uv: str) -> str:
    return subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]


def test_committed_lock_matches_a_fresh_resolution():
    uv = find_uv()
    if uv is None:
        pytest.skip("uv is not installed (pip install -r requirements.txt installs the pinned uv)")
    header = re.search(r"by uv (\S+):", LOCK.read_text())
    assert header, f"{LOCK.name} has no 'by uv X.Y.Z' header: regenerate it with scripts/lock_worker_env.sh"
    assert _uv_version(uv) == header.group(1), (
        f"{uv} is uv {_uv_version(uv)}, the lock was made by uv {header.group(1)}: install the uv pinned in "
        "requirements.txt, or relock with the new one (scripts/lock_worker_env.sh) and commit both"
    )
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--check"],
        env={**os.environ, "UV": uv},
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.monotonic() - start
    print(f"lock_worker_env.sh --check took {elapsed:.1f} s\n{proc.stderr}")
    assert proc.returncode != 2, f"requirements.in did not resolve (or uv failed):\n{proc.stderr}"
    assert proc.returncode == 0, f"worker_env/requirements.lock is stale:\n{proc.stderr}"

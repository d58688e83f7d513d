"""The code the cluster runs: this repository's core/ and trainer/ packages, as files.

The content hash names the ConfigMap and the RayJob, so a change to the code relaunches the job and an
unchanged tree changes nothing on the next `pulumi up`.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from core.worker_lock import LOCK_PATH

REPO_ROOT = Path(__file__).resolve().parent.parent
# trainer/ imports only core/ (a test guards that): ship exactly those two packages. trainer/local/ runs only
# on a developer's machine and is not shipped.
# The workers' lock travels with the code: pods that install their environment at start install exactly it.
SHIPPED = ("core/*.py", "trainer/*.py", "worker_env/requirements.lock")
# Read from the mounted code only by pods that install it at start (JobSet with workerEnvironment=runtime); Ray
# takes the pins into its runtime env at render time, Pathways and the worker image install nothing. It is over
# half of the code's bytes, and a ConfigMap, like any object, is refused above 1 MiB: where it is shipped it gets a
# ConfigMap of its own (workloads/common.py code_volume).
LOCK_FILE = LOCK_PATH


def short_digest(*parts: str) -> str:
    """8 hex characters naming an object by its content (code + command), so a change relaunches it."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class TrainerBundle:
    files: dict[str, str]   # repository-relative path → text

    @property
    def digest(self) -> str:
        hasher = hashlib.sha256()
        for path in sorted(self.files):
            hasher.update(path.encode() + b"\0" + self.files[path].encode() + b"\0")
        return hasher.hexdigest()

    @property
    def short_digest(self) -> str:
        return self.digest[:8]

    @property
    def code_files(self) -> dict[str, str]:
        """The Python packages without the lock."""
        return {path: text for path, text in self.files.items() if path != LOCK_FILE}

    @property
    def lock_files(self) -> dict[str, str]:
        return {path: text for path, text in self.files.items() if path == LOCK_FILE}


def load_bundle(root: Path = REPO_ROOT) -> TrainerBundle:
    paths = sorted({p for pattern in SHIPPED for p in root.glob(pattern)})
    files = {p.relative_to(root).as_posix(): p.read_text() for p in paths}
    return TrainerBundle(files)

"""The pinned KubeRay, JobSet and Kueue CRDs the offline plan validates custom resources against.

A clone of the project has no CRDs of its own: they are the projects' release files, fetched once (by
`scripts/setup.sh`, or `python -m preview.k8s.crd_fetch`) from the public repositories at pinned tags and
checked against pinned SHA-256 digests before any use. Where they are looked for, in order:

1. `TPU_MULTISLICE_CRDS=DIR` (a machine without GitHub: a copy of the files, in any layout under DIR);
2. `../shared/schemas` beside the repository (the development layout; CI uses it);
3. the user's cache: `$XDG_CACHE_HOME/tpu-multislice/crds/<pin set>/` (default `~/.cache`).

A file whose digest is not the pinned one is never used: from the override it is refused in one line; from the
cache it is not used and the plan says why. The pins are the files of each project's tag (raw file URL form
https://raw.githubusercontent.com/OWNER/REPO/TAG/PATH):
- ray-project/kuberay v1.7.0 ray-operator/config/crd/bases/ray.io_*.yaml;
- kubernetes-sigs/jobset v0.12.0 config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml;
- kubernetes-sigs/kueue v0.19.2 config/components/crd/bases/kueue.x-k8s.io_*.yaml.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from core.cli_errors import OneLineParser

ENV_OVERRIDE = "TPU_MULTISLICE_CRDS"
RAW_BASE_URL = "https://raw.githubusercontent.com"
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pin:
    project: str        # the directory the file sits in (kuberay, jobset, kueue)
    repo: str           # OWNER/REPO on GitHub
    tag: str
    path: str           # inside the repository
    sha256: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def local(self) -> str:
        return f"{self.project}/{self.name}"

    def url(self, base: str = RAW_BASE_URL) -> str:
        return f"{base.rstrip('/')}/{self.repo}/{self.tag}/{self.path}"


_KUBERAY = ("kuberay", "ray-project/kuberay", "v1.7.0", "ray-operator/config/crd/bases")
_JOBSET = ("jobset", "kubernetes-sigs/jobset", "v0.12.0", "config/components/crd/bases")
_KUEUE = ("kueue", "kubernetes-sigs/kueue", "v0.19.2", "config/components/crd/bases")


def _pin(source: tuple[str, str, str, str], name: str, sha256: str) -> Pin:
    project, repo, tag, directory = source
    return Pin(project, repo, tag, f"{directory}/{name}", sha256)


# The digests of the files at those tags (git show TAG:PATH, byte for byte). KubeRay's RayCronJob CRD is left out:
# the stack creates none.
PINS: tuple[Pin, ...] = (
    _pin(_KUBERAY, "ray.io_rayclusters.yaml", "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1"),
    _pin(_KUBERAY, "ray.io_rayjobs.yaml", "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5"),
    _pin(_KUBERAY, "ray.io_rayservices.yaml", "0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab"),
    _pin(_JOBSET, "jobset.x-k8s.io_jobsets.yaml", "d022b87624512cf0b6741b31b24a2bea9945b5a838b50713af29332c878bb6fe"),
    _pin(_KUEUE, "kueue.x-k8s.io_resourceflavors.yaml",
         "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173"),
    _pin(_KUEUE, "kueue.x-k8s.io_clusterqueues.yaml",
         "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55"),
    _pin(_KUEUE, "kueue.x-k8s.io_localqueues.yaml", "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed"),
    _pin(_KUEUE, "kueue.x-k8s.io_workloadpriorityclasses.yaml",
         "0b755726aab05b8def9a53ee15b201eed3846bcffd1ff5528fed123f4ae03519"),
    _pin(_KUEUE, "kueue.x-k8s.io_topologies.yaml", "f703575d3bb64d26f6e839f831e01646367ed41a89b3abf163f8e842ca1c4d2b"),
    _pin(_KUEUE, "kueue.x-k8s.io_cohorts.yaml", "61fbe5ec55d45e7fae2d65321fb32517b197257ab78ad55316673183aac911c2"),
)

VERSIONS = "KubeRay v1.7.0, JobSet v0.12.0, Kueue v0.19.2"
# The offline plan's first lines when no verified CRDs are found, or when the user opted out (each within 100
# columns).
MISSING = (f"CRD check NOT run: no verified {VERSIONS} CRDs found (exit 1)",
           f"  get them: bash scripts/setup.sh where GitHub is reachable, or {ENV_OVERRIDE}=DIR (a copy);",
           "  or plan without the check: --no-crd-check")
OPTED_OUT = "CRD check NOT run (--no-crd-check): custom resources are not checked against their CRDs"


# The rest of setup's one line when the fetch fails (the reason goes before it).
NOT_FETCHED_HINT = f"set {ENV_OVERRIDE}=DIR to a copy"


class CrdFetchError(RuntimeError):
    """One line: what could not be fetched or used, and why."""


def cache_dir() -> Path:
    """Where fetched CRDs live: one directory per pin set, so a new pin never mixes with the old files."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    pin_set = "+".join(dict.fromkeys(f"{p.project}-{p.tag}" for p in PINS))
    return Path(base) / "tpu-multislice" / "crds" / pin_set


def shared_dir(repository_root: Path = REPOSITORY_ROOT) -> Path:
    """The development layout: the CRD bundle beside the repository (docs/platform-notes.md §7)."""
    return repository_root.parent / "shared" / "schemas"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_directory(directory: Path) -> list[str]:
    """Why `directory` cannot be used (a pinned file missing or not the pinned bytes); empty when it can. A file
    may sit anywhere under the directory: only its name and digest matter."""
    found: dict[str, list[Path]] = {}
    for path in directory.rglob("*.yaml"):
        found.setdefault(path.name, []).append(path)
    problems = []
    for pin in PINS:
        candidates = found.get(pin.name, [])
        if not candidates:
            problems.append(f"{pin.name} is missing")
        for path in candidates:
            digest = sha256_of(path)
            if digest != pin.sha256:
                problems.append(f"{path.relative_to(directory)} has SHA-256 {digest[:12]}..., not the pinned "
                                f"{pin.sha256[:12]}... of {pin.repo} {pin.tag}")
    return problems


@dataclass
class SchemaLookup:
    """The verified CRD directory (None: none found) and what the search met on the way."""
    directory: Path | None
    source: str = ""                  # override, shared or cache
    refused: str | None = None        # the override failed its check: the one line to refuse with
    notes: list[str] = field(default_factory=list)


def find_schemas(repository_root: Path = REPOSITORY_ROOT) -> SchemaLookup:
    """The override, else ../shared/schemas, else the cache; each used only when every pinned file is there with
    its pinned digest."""
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        directory = Path(override).expanduser()
        problems = check_directory(directory) if directory.is_dir() else ["not a directory"]
        if problems:
            return SchemaLookup(None, "override", refused=f"{ENV_OVERRIDE}={override}: {problems[0]}"
                                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        return SchemaLookup(directory, "override")
    notes = []
    for source, directory in (("shared", shared_dir(repository_root)), ("cache", cache_dir())):
        if not directory.is_dir():
            continue
        problems = check_directory(directory)
        if not problems:
            return SchemaLookup(directory, source, notes=notes)
        notes.append(f"{directory} not used: {problems[0]}")
    return SchemaLookup(None, notes=notes)


def fetch(destination: Path | None = None, base_url: str = RAW_BASE_URL, timeout: float = 10.0) -> Path:
    """Download every pinned file that `destination` (default: the cache) lacks, verify its digest, and move it in
    place only then; returns the directory. Raises CrdFetchError (one line) on the first failure; `timeout` bounds
    the whole fetch, so an unreachable host costs at most that long."""
    destination = destination or cache_dir()
    deadline = time.monotonic() + timeout
    for pin in PINS:
        target = destination / pin.local
        if target.is_file() and sha256_of(target) == pin.sha256:
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CrdFetchError(f"timed out after {timeout:g} s before {pin.name}")
        url = pin.url(base_url)
        try:
            with urllib.request.urlopen(url, timeout=remaining) as response:   # noqa: S310 (https or a test URL)
                data = response.read()
        except urllib.error.HTTPError as error:
            raise CrdFetchError(f"{_host(url)}: HTTP {error.code} for {pin.name}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            timed_out = isinstance(getattr(error, "reason", error), TimeoutError)
            raise CrdFetchError(f"{_host(url)} {'timed out' if timed_out else 'unreachable'}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != pin.sha256:
            raise CrdFetchError(f"{pin.local}: SHA-256 {digest[:12]}... is not the pinned {pin.sha256[:12]}..., "
                                "not used")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(data)
        partial.replace(target)      # atomic: a reader never sees half a file
    return destination


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m preview.k8s.crd_fetch",
                           description=f"Download the pinned CRDs ({VERSIONS}) into the cache.")
    parser.add_argument("--timeout", type=float, default=10.0, help="give up after this many seconds (default 10)")
    parser.add_argument("--base-url", default=RAW_BASE_URL, help="a mirror with GitHub's raw file layout")
    parser.add_argument("--dest", type=Path, help="download here instead of the cache")
    args = parser.parse_args(argv)
    lookup = find_schemas()
    if lookup.refused:
        print(lookup.refused)
        return 1
    if args.dest is None and lookup.directory is not None:
        print(f"CRD schemas ({VERSIONS}): verified in {lookup.directory}")
        return 0
    try:
        directory = fetch(args.dest, args.base_url, args.timeout)
    except CrdFetchError as error:
        print(f"CRDs not fetched ({error}); {NOT_FETCHED_HINT}")
        return 1
    print(f"CRD schemas ({VERSIONS}): fetched and verified in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

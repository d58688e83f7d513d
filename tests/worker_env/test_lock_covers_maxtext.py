"""The worker lock (worker_env/requirements.lock) covers what MaxText's training path imports.

Why this test exists: the MaxText wheel declares no base dependencies. Everything it needs comes from the
`[tpu]` extra (maxtext 0.2.5 metadata, the maxtext 0.2.5 wheel METADATA, `Requires-Dist`: every
entry carries `extra == ...`; read here from the installed METADATA), and that extra asks `jax>=0.11.1`.
Both need Python >= 3.12: the index's Simple API (the Simple API page for maxtext and
the package index's Simple API page for jax, PEP 691 JSON) gives `requires-python` ">=3.12" for
maxtext-0.2.5-py3-none-any.whl and jax-0.11.1-py3-none-any.whl (jax 0.10.2: ">=3.11"). A lock that
forgot the extra, or was made for the wrong Python, would install a MaxText that dies on its first import
on the cluster. Two independent checks, both against the committed lock:

1. Static imports. Starting at maxtext/trainers/pre_train/train.py (the module the workers run), walk the
   AST of every maxtext module it imports, transitively, and collect the third-party top-level modules.
   Each must map to a distribution pinned in the lock.
2. MaxText's own declaration. Every `Requires-Dist` of the installed maxtext whose marker holds for
   `extra == "tpu"` on CPython 3.12 / linux / x86_64 must be pinned in the lock at a version inside its
   specifier.

The maxtext installed here (scripts/install_maxtext.sh: `--no-deps`, Python 3.11) is only read, never
imported: module files are located with importlib's path finder, which executes nothing.
"""
from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]
# Module-level so a test (or a person checking that this test can fail) can point it at another lock.
LOCK_PATH = REPO_ROOT / "worker_env" / "requirements.lock"

ENTRY_MODULE = "maxtext.trainers.pre_train.train"
ROOT_PACKAGE = "maxtext"

# Where the cluster runs: the marker environment MaxText's requirements are evaluated in.
CLUSTER_MARKERS = {
    "extra": "tpu",
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}

# Import name -> distribution, for modules on the training path whose distribution is not installed on the
# machine running this test (this dev venv installs MaxText's dependencies by hand, see
# requirements-trainer.txt, and these are not among them). Installed distributions are read from their
# RECORD files first; the test fails naming any import that neither source maps.
KNOWN_DISTRIBUTIONS = {
    "datasets": "datasets",  # Hugging Face input pipeline (dataset_type=hf)
    "google_cloud_mldiagnostics": "google-cloud-mldiagnostics",  # managed_mldiagnostics=True
    "google.cloud.monitoring_v3": "google-cloud-monitoring",  # goodput / metrics upload
}

# Modules MaxText imports only inside functions that the TPU training path does not call, and that
# maxtext[tpu] deliberately leaves out (they are not in its Requires-Dist for the tpu extra). Each is
# excluded by name, with the reason, so a *new* lazy import still fails this test until someone decides.
NOT_ON_TPU_PATH = {
    "tensorflow": "only tfds / c4_mlperf input pipelines (dataset_type=tfds); train.py guards its own import",
    "transformer_engine": "NVIDIA GPU kernels (cuDNN attention, TE MoE/quantization): the cuda12 extra",
    "wandb": "only with enable_wandb=True; MaxText's comment calls it an optional dependency",
}

# Handlers that make a failed import non-fatal: an import guarded by one of these is optional.
_GUARD_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}

_LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def read_lock(path: Path) -> dict[str, Version]:
    """Canonical distribution name -> pinned version, from a `uv pip compile` output file."""
    pins: dict[str, Version] = {}
    for line in path.read_text().splitlines():
        match = _LOCK_LINE.match(line)
        if match:
            pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


@functools.lru_cache(maxsize=None)
def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Spec of dotted `name`, found without importing anything (cached: the walk asks for parents often).

    importlib.util.find_spec("a.b") would import package "a" to read its __path__; PathFinder.find_spec
    with an explicit search path does not, so each component is looked up in its parent's folder.
    """
    parent, _, last = name.rpartition(".")
    if not parent:
        return importlib.machinery.PathFinder.find_spec(name)
    parent_spec = _find_spec(parent)
    if parent_spec is None or parent_spec.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(last, parent_spec.submodule_search_locations)


def _module_file(name: str) -> Path | None:
    """The source file of module `name` (a package's __init__.py), or None if `name` is not a module."""
    spec = _find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _is_guard(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:  # bare `except:`
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _GUARD_EXCEPTIONS for t in types)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportCollector:
    """Absolute names a module imports, sorted into three kinds.

    - eager: run when the module is imported (module and class level): a missing one kills the import.
    - lazy: inside a function body: run only when the training path calls that function, which may depend
      on the run's config (MaxText imports tensorflow only for tfds pipelines, wandb only with
      enable_wandb, transformer_engine only on GPU).
    - optional: inside a `try` whose handler swallows ImportError (or broader): MaxText copes without it
      (train.py does that for tensorflow).
    `if TYPE_CHECKING:` blocks never run and are skipped. Import is a statement, so only statement lists
    are walked, never expressions (an order of magnitude faster than visiting every node).
    """

    def __init__(self, module: str, is_package: bool):
        self.package = module if is_package else module.rpartition(".")[0]
        self.eager: set[str] = set()
        self.lazy: set[str] = set()
        self.optional: set[str] = set()

    def _add(self, name: str, guarded: bool, lazy: bool) -> None:
        (self.optional if guarded else self.lazy if lazy else self.eager).add(name)

    def walk(self, body: list[ast.stmt], guarded: bool = False, lazy: bool = False) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._add(alias.name, guarded, lazy)
            elif isinstance(node, ast.ImportFrom):
                for name in self._from_names(node):
                    self._add(name, guarded, lazy)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.walk(node.body, guarded, lazy=True)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                self.walk(node.body, guarded or any(_is_guard(h) for h in node.handlers), lazy)
                for handler in node.handlers:
                    self.walk(handler.body, guarded, lazy)
                self.walk(node.orelse, guarded, lazy)
                self.walk(node.finalbody, guarded, lazy)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                self.walk(node.orelse, guarded, lazy)
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    self.walk(case.body, guarded, lazy)
            else:  # class bodies, if/for/while/with blocks: same kind as where they stand
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        self.walk(inner, guarded, lazy)

    def _from_names(self, node: ast.ImportFrom) -> list[str]:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # `from pkg import name`: name may be a submodule; the walker keeps it only if a file exists.
        return [prefix] + [f"{prefix}.{alias.name}" for alias in node.names if alias.name != "*"]


EAGER, LAZY, OPTIONAL = 0, 1, 2


def training_path_imports(entry: str = ENTRY_MODULE) -> dict[str, int]:
    """Third-party module (dotted, as imported) -> how the training path needs it (EAGER, LAZY or OPTIONAL).

    Follows maxtext.* imports transitively from `entry`. A maxtext module reached only from inside a
    function makes its own imports LAZY at best; one reached only through a guarded import is not
    followed (its failure is caught). Each module keeps the strongest kind by which it is reached.
    """
    found: dict[str, int] = {}
    visited: dict[str, int] = {}
    queue = [(entry, EAGER)]
    while queue:
        module, kind = queue.pop()
        if visited.get(module, OPTIONAL + 1) <= kind:
            continue  # already walked at this strength or stronger
        visited[module] = kind
        path = _module_file(module)
        if path is None:
            continue  # an attribute imported with `from x import attr`, not a module
        collector = _ImportCollector(module, is_package=path.name == "__init__.py")
        collector.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
        for names, how in ((collector.eager, EAGER), (collector.lazy, LAZY), (collector.optional, OPTIONAL)):
            how = max(how, kind)
            for name in names:
                top = name.split(".")[0]
                if top == ROOT_PACKAGE:
                    if how != OPTIONAL:
                        parts = name.split(".")
                        # Importing a.b.c runs a/__init__.py and a/b/__init__.py too.
                        queue.extend((".".join(parts[:i]), how) for i in range(1, len(parts) + 1))
                elif top and top not in sys.stdlib_module_names:
                    found[name] = min(found.get(name, OPTIONAL), how)
    return found


def installed_module_index() -> dict[str, set[str]]:
    """Dotted module or package name -> the installed distributions whose files provide it.

    Built from each distribution's RECORD, so namespace packages resolve per sub-package:
    "google" maps to many distributions, "google.protobuf" to protobuf alone.
    (importlib.metadata.packages_distributions() stops at the top level, which is ambiguous for `google`.)
    """
    index: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        for file in dist.files or []:
            parts = list(file.parts)
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] in ("..", "bin"):
                continue
            last = parts[-1]
            if last.endswith((".py", ".so", ".pyd")):
                parts[-1] = last.split(".")[0]
                if parts[-1] == "__init__":
                    parts.pop()
            else:
                parts.pop()  # data file: only its folders name modules
            for i in range(1, len(parts) + 1):
                if all(p.isidentifier() for p in parts[:i]):
                    index.setdefault(".".join(parts[:i]), set()).add(name)
    return index


def distribution_for(module: str, index: dict[str, set[str]]) -> str | None:
    """The one distribution that provides dotted `module`, trying its longest prefix first; None if unknown.

    A prefix counts only if exactly one installed distribution provides it; otherwise the explicit
    KNOWN_DISTRIBUTIONS table (for modules whose distribution is not installed here) is asked.
    """
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if len(index.get(prefix, ())) == 1:
            return next(iter(index[prefix]))
        if prefix in KNOWN_DISTRIBUTIONS:
            return canonicalize_name(KNOWN_DISTRIBUTIONS[prefix])
    return None


def needed_distributions(found: dict[str, int], index: dict[str, set[str]]) -> tuple[dict[str, str], list[str]]:
    """Map each non-optional import to a distribution: (distribution -> an importing name, unmapped names).

    A name that maps to nothing is fine when a longer imported name extends it (`from google.cloud import
    monitoring_v3` records both "google.cloud", a namespace shared by many distributions, and
    "google.cloud.monitoring_v3", which names one).
    """
    needed: dict[str, str] = {}
    unmapped = []
    names = [n for n, how in found.items() if how != OPTIONAL and n.split(".")[0] not in NOT_ON_TPU_PATH]
    for name in sorted(names):
        dist = distribution_for(name, index)
        if dist is not None:
            needed.setdefault(dist, name)
        elif not any(other.startswith(name + ".") for other in names):
            unmapped.append(name)
    return needed, unmapped


def _require_maxtext() -> None:
    if importlib.util.find_spec(ROOT_PACKAGE) is None:
        pytest.skip("maxtext is not installed here (scripts/install_maxtext.sh installs it)")


def _lock() -> dict[str, Version]:
    assert LOCK_PATH.is_file(), f"{LOCK_PATH} is missing: run scripts/lock_worker_env.sh"
    return read_lock(LOCK_PATH)


def test_training_path_imports_are_locked():
    """Every third-party module reachable from MaxText's train.py maps to a distribution in the lock.

    Walked from the installed maxtext 0.2.5 (its wheel METADATA). Guarded imports
    and the NOT_ON_TPU_PATH modules are left out, each for the reason given where they are defined.
    """
    _require_maxtext()
    pins = _lock()
    found = training_path_imports()
    # Sanity: the walk really followed maxtext's imports (train.py imports jax/flax/absl/numpy directly;
    # omegaconf, pydantic and orbax come from modules it reaches).
    tops = {name.split(".")[0] for name, how in found.items() if how == EAGER}
    assert {"jax", "flax", "numpy", "absl", "omegaconf", "pydantic", "orbax"} <= tops, sorted(tops)
    needed, unmapped = needed_distributions(found, installed_module_index())
    assert not unmapped, f"no distribution known for {unmapped}: add them to KNOWN_DISTRIBUTIONS"
    missing = sorted(f"{dist} (imports {name})" for dist, name in needed.items() if dist not in pins)
    assert not missing, f"imported by MaxText's training path but not in {LOCK_PATH.name}: {missing}"


def test_lock_satisfies_maxtext_tpu_extra():
    """The lock pins every `maxtext[tpu]` requirement at a version MaxText accepts (CPython 3.12, linux x86_64).

    Source: the installed maxtext 0.2.5's METADATA (the same `requires_dist` as
    the maxtext 0.2.5 wheel METADATA), e.g. `jax>=0.11.1; extra == 'tpu'` and
    `libtpu>=0.0.46; (platform_machine == 'x86_64' and sys_platform == 'linux') and extra == 'tpu'`.
    """
    _require_maxtext()
    pins = _lock()
    assert pins.get("maxtext") == Version(importlib.metadata.version("maxtext")), (
        "the lock's maxtext differs from the installed one this test reads metadata from"
    )
    problems = []
    checked = 0
    for line in importlib.metadata.requires("maxtext") or []:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate(CLUSTER_MARKERS):
            continue
        checked += 1
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req} (not in lock)")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req} (lock has {pins[name]})")
    assert checked > 50, f"only {checked} requirements applied to the tpu extra: marker evaluation is off"
    assert not problems, f"{LOCK_PATH.name} violates maxtext[tpu]: {problems}"


def test_lock_has_gcsfs_and_the_images_ray():
    """gcsfs makes JAX's gs:// compile cache work; Ray must be the image's (rayproject/ray:2.60.0-py312)."""
    pins = _lock()
    assert "gcsfs" in pins, "without gcsfs, jax_cache_dir=gs://... silently compiles every time"
    assert pins.get("ray") == Version("2.60.0"), f"lock's ray {pins.get('ray')} != image's 2.60.0"
    # Pinned in CPython 3.12 terms: a lock resolved for 3.11 could not contain jax>=0.11.1.
    assert pins["jax"] >= Version("0.11.1"), f"lock's jax {pins['jax']} predates maxtext 0.2.5's floor 0.11.1"

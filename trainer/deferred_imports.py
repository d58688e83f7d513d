"""Libraries MaxText imports at module level but uses only behind settings our runs leave off: loaded on first use.

Every worker process imports MaxText's train module each time a worker group starts (the first start, every
restart after a loss, every resize, on every host), and MaxText 0.2.5 imports at module level, through its
dependencies, three libraries that only an optional feature touches:

- `google.cloud.aiplatform` (Vertex AI): maxtext/common/vertex_tensorboard.py imports
  cloud_accelerator_diagnostics' tensorboard uploader, whose module does `from google.cloud import aiplatform`;
  it is called only when `use_vertex_tensorboard` is set. About 3-4 s of CPU, a third of the whole import.
- `scipy.stats`: ml_goodput_measurement/src/goodput_utils.py (`from scipy import stats`), used when goodput
  statistics are computed.
- `fastapi`: pathwaysutils/profiling.py, used when Pathways' profiling server is started.

`install()` makes the import system hand out these modules as importlib.util.LazyLoader modules: the name is
bound where MaxText imports it, and the module's own code runs at the first attribute read, so a run that turns
the feature on gets the real module at that moment. Measured with benchmarks/worker_import.py. A module already
imported when `install()` runs is left as it is.

LazyLoader's first attribute read was not safe against two threads reading at once until cpython gh-114763
(python/cpython#114781, merged 2024-02; which Python 3.12 patch release of the workers' image, worker_env/Dockerfile,
carries it was not checked offline, so it is assumed absent). It does not matter here: each feature above first
touches its module from the one thread that sets the feature up.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

# The modules deferred, each with where MaxText 0.2.5 imports it at module level (the file and the import line):
# tests/trainer/test_deferred_imports.py reads those files and fails when the import has moved or gone.
DEFERRED: dict[str, tuple[str, str]] = {
    "google.cloud.aiplatform": ("cloud_accelerator_diagnostics/src/tensorboard_uploader/tensorboard.py",
                                "from google.cloud import aiplatform"),
    "scipy.stats": ("ml_goodput_measurement/src/goodput_utils.py", "from scipy import stats"),
    "fastapi": ("pathwaysutils/profiling.py", "import fastapi"),
}


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds a DEFERRED module with the finders after it and wraps its loader in a LazyLoader."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec                       # a namespace package or an old-style loader: load it as is
            spec.loader = importlib.util.LazyLoader(spec.loader)
            return spec
        return None


def install() -> None:
    """Defer the DEFERRED modules in this process from now on (once; later calls do nothing)."""
    if not any(isinstance(finder, _DeferringFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferringFinder())


def is_deferred(name: str) -> bool:
    """Whether `name` is imported but its code has not run yet: LazyLoader's module class, until the first
    attribute read turns it into a plain module (cpython Lib/importlib/util.py `_LazyModule`)."""
    return type(sys.modules.get(name)).__name__ == "_LazyModule"

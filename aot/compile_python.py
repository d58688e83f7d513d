"""Which Python runs the pre-flight compile, and so which jax front end traces the step that XLA then compiles.

jax lowers MaxText's training step to the HLO that libtpu's XLA assigns memory to, so the jax version is part of
the verdict (its key, core/compile_verdicts.py CompileKey.jax). By default the compile runs under this process's
interpreter, whose jax may not be the workers' (worker_env/requirements.lock pins jax for CPython 3.12; on a
machine whose Python cannot install it, jax 0.10.2 traces the step and the plan names that as an assumption).

COMPILE_PYTHON_ENV=PATH names another interpreter for the compile (for example a Python 3.12 virtualenv
installed from the workers' lock): it then runs MaxText's train_compile and aot/kernel_compile.py, and its own
jax, jaxlib, MaxText and MaxText's base.yml are the ones asked for, keyed and named in the plan. What that
interpreter has is asked from it (a short probe run once per path), never assumed from this process. The libtpu
stays the one aot/workers_libtpu.py finds (TPU_LIBRARY_PATH), whatever the interpreter.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import os
import subprocess
import sys
from dataclasses import dataclass

COMPILE_PYTHON_ENV = "TPU_MULTISLICE_COMPILE_PYTHON"
PROBE_TIMEOUT_S = 300.0          # importing nothing heavy: metadata and a resource path only
NOT_INSTALLED = "not installed"
PACKAGES = ("jax", "jaxlib", "maxtext", "libtpu")

# Run by the named interpreter in isolated mode (-I: no PYTHONPATH, no user site, as the compile runs): the
# versions of the packages that make the front end, and where its MaxText keeps base.yml.
PROBE = """
import importlib.metadata, importlib.resources, json, sys
versions = {}
for name in %r:
    try:
        versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        versions[name] = %r
try:
    base = str(importlib.resources.files("maxtext") / "configs" / "base.yml")
except ModuleNotFoundError:
    base = ""
print(json.dumps({"versions": versions, "base_config": base, "python": sys.version.split()[0]}))
""" % (PACKAGES, NOT_INSTALLED)


class CompilePythonError(Exception):
    """The interpreter COMPILE_PYTHON_ENV names cannot run the compile (one line for the user)."""


@dataclass(frozen=True)
class FrontEnd:
    executable: str                 # what runs the compile: this process's sys.executable or the named one
    python: str                     # its Python version
    versions: tuple[tuple[str, str], ...]   # (package, version or NOT_INSTALLED) for PACKAGES
    base_config: str                # maxtext/configs/base.yml as that interpreter reads it ("" without MaxText)
    named: bool                     # chosen through COMPILE_PYTHON_ENV

    def version(self, package: str) -> str:
        return dict(self.versions).get(package, NOT_INSTALLED)

    @property
    def jax(self) -> str:
        return self.version("jax")

    @property
    def maxtext(self) -> str:
        return self.version("maxtext")

    def describe(self) -> str:
        """One phrase: the jax and the Python that trace the step."""
        where = f" ({COMPILE_PYTHON_ENV})" if self.named else ""
        return f"jax {self.jax}, Python {self.python}{where}"


def front_end() -> FrontEnd:
    """The interpreter that runs the compile and its front end: COMPILE_PYTHON_ENV's, else this process's."""
    named = os.environ.get(COMPILE_PYTHON_ENV, "").strip()
    return _probe(named) if named else _this_process()


def installed(package: str) -> str:
    """`package`'s version in this process's environment, or NOT_INSTALLED."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def _this_process() -> FrontEnd:
    versions = [(package, installed(package)) for package in PACKAGES]
    try:
        base = str(importlib.resources.files("maxtext") / "configs" / "base.yml")
    except ModuleNotFoundError:
        base = ""
    return FrontEnd(executable=sys.executable, python=sys.version.split()[0], versions=tuple(versions),
                    base_config=base, named=False)


@functools.lru_cache(maxsize=8)
def _probe(executable: str) -> FrontEnd:
    """Ask the named interpreter what it has. Cached per path: a plan asks for every step's key."""
    said = f"{COMPILE_PYTHON_ENV}={executable}"
    try:
        proc = subprocess.run([executable, "-I", "-c", PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, env={**os.environ, "PYTHONPATH": ""})
    except (OSError, subprocess.TimeoutExpired) as error:
        why = getattr(error, "strerror", None) or f"no answer in {PROBE_TIMEOUT_S:.0f} s"
        raise CompilePythonError(f"{said}: cannot run it ({why}); unset it to compile under this Python") from None
    lines = proc.stdout.strip().splitlines()
    try:
        said_back = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        said_back = None
    if said_back is None:
        error = (proc.stderr or proc.stdout).strip().splitlines()
        raise CompilePythonError(f"{said}: not a Python that answers ({error[-1] if error else proc.returncode})")
    versions = tuple((package, said_back["versions"].get(package, NOT_INSTALLED)) for package in PACKAGES)
    return FrontEnd(executable=executable, python=said_back["python"], versions=versions,
                    base_config=said_back["base_config"], named=True)

"""Shared fixtures: the committed stacks run once each under Pulumi mocks (preview/harness.py), the golden
manifests, the CRD bundle beside the repository, and the end-to-end tests' `python -m trainer.local` runs with
deadlines that report how far a run got (run_trainer_local)."""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# requirements-trainer.txt installs libtpu (for the pre-flight compile); JAX in the tests and the processes they start
# stays on CPU instead of asking libtpu for a TPU first.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from preview.harness import ProgramRun, cluster_outputs_reader, run_program  # noqa: E402
from preview.k8s.validation import default_schemas_dir
from preview.stack_files import is_single_stack, load_stack_config

REPO = Path(__file__).resolve().parent.parent
ALL_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))
# The single stacks (a cluster with its one run), which most suites compare; the shared cluster and the runs on it
# (stackRole=cluster, clusterStack) have their own (tests/infra/test_shared_cluster.py).
COMMITTED_STACKS = [stack for stack in ALL_STACKS if is_single_stack(stack, REPO)]
SPLIT_STACKS = [stack for stack in ALL_STACKS if stack not in COMMITTED_STACKS]
# Every stack that launches a run: the single stacks and the run stacks on a shared cluster (not the cluster).
STACKS_WITH_A_RUN = [stack for stack in ALL_STACKS
                     if load_stack_config(stack, REPO).get("stackRole", "cluster-and-run") != "cluster"]


@functools.lru_cache(maxsize=None)
def committed_stack_run(stack: str) -> ProgramRun:
    return run_program(load_stack_config(stack, REPO), stack=stack)


def build_stack(stack: str, **overrides) -> "StackConfig":
    """A committed stack's config with `overrides`, built as the program builds it: a run stack reads its cluster
    stack's outputs (played under mocks from its committed file, once)."""
    from infra.config import build

    raw = {**load_stack_config(stack, REPO), **overrides}
    return build(raw, stack=stack, cluster_outputs=cluster_outputs_reader(raw, REPO))


@pytest.fixture(scope="session")
def prod() -> ProgramRun:
    return committed_stack_run("prod")


@pytest.fixture(scope="session")
def dev() -> ProgramRun:
    return committed_stack_run("dev")


# Smallest valid config: what a user must set.
MINIMAL = {"project": "my-tpu-project", "zone": "us-east5-b"}


GOLDEN_DIR = REPO / "tests" / "golden"


def assert_matches_golden(name: str, objects: object) -> None:
    """The objects as sorted JSON against tests/golden/NAME.json; UPDATE_GOLDENS=1 rewrites the file."""
    text = json.dumps(objects, indent=2, sort_keys=True) + "\n"
    golden = GOLDEN_DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDENS"):
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs; review and regenerate with UPDATE_GOLDENS=1"


@pytest.fixture(scope="session")
def schemas_dir() -> Path:
    """The KubeRay, JobSet and Kueue CRDs beside the repository (../shared/schemas)."""
    path = default_schemas_dir()
    if not path.is_dir():
        pytest.skip(f"CRD bundle {path} not present")
    return path


@pytest.fixture(autouse=True)
def _scratch_compile_verdicts(tmp_path, monkeypatch):
    """XLA verdicts a test's preview records (core/compile_verdicts.py) go to a scratch file, never the project's
    compile-verdicts.json, so one test's stand-in verdict cannot answer another's compile."""
    from core.compile_verdicts import PATH_ENV
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "compile-verdicts.json"))


@pytest.fixture(autouse=True)
def _no_ray_left_running_in_the_test_process(request):
    """A test that starts Ray in pytest's own process and leaves it running (Ray starts a local cluster on its
    own when ray.get_actor, ray.get and the like are called before ray.init: ray/_private/auto_init_hook.py) fails
    here, by name, and its Ray is shut down, instead of failing the later tests that start their own cluster
    ("Maybe you called ray.init twice by accident?"). Ray a fixture started before this test is that fixture's."""
    ray = sys.modules.get("ray")
    running_before = ray is not None and ray.is_initialized()
    yield
    ray = sys.modules.get("ray")
    if not running_before and ray is not None and ray.is_initialized():
        ray.shutdown()
        pytest.fail(f"{request.node.nodeid} left Ray running in the test process (shut down now)")


def _real_compile_allowed(request) -> bool:
    """`compile` (pytest -m compile) and `ci_compile` (the one real compile every run makes) reach train_compile."""
    return any(request.node.get_closest_marker(name) is not None for name in ("compile", "ci_compile"))


@pytest.fixture(autouse=True)
def _local_libtpu_outside_real_compiles(request, monkeypatch):
    """Keys and notes do not depend on whether this machine fetched the workers' libtpu (aot/workers_libtpu.py):
    outside the tests marked `compile`, the local libtpu is named on purpose."""
    if _real_compile_allowed(request) is False:
        from aot.workers_libtpu import ENV_OVERRIDE
        monkeypatch.setenv(ENV_OVERRIDE, "local")


@pytest.fixture(autouse=True)
def _no_real_compile(request, monkeypatch):
    """Only the tests marked `compile` run MaxText's train_compile (minutes of both cores): elsewhere a compile that
    a stand-in does not replace runs a module that does not exist and ends at once without a verdict."""
    from aot import runner
    if _real_compile_allowed(request) is False:
        monkeypatch.setattr(runner, "AOT_MODULE", "tests.no_real_compile_outside_the_compile_marker")
        # The plans and programs tests start as subprocesses (python -m preview ...) inherit it.
        monkeypatch.setenv(runner.AOT_MODULE_ENV, "tests.no_real_compile_outside_the_compile_marker")
    else:
        monkeypatch.delenv(runner.AOT_MODULE_ENV, raising=False)


# --- `python -m trainer.local` runs of the end-to-end tests (tests/trainer/test_local_*.py) ---------------------
# Started in the background once the session has collected them (tests/local_runs.py), so that they run while
# the rest of the suite does.

from tests import local_runs  # noqa: E402
from tests.local_runs import LocalRunResult, run_trainer_local, run_with_deadlines  # noqa: E402,F401


def pytest_collection_modifyitems(session, config, items):
    """The tests that wait for a local run go last, so the rest of the suite runs while the runs go on."""
    items[:] = local_runs.waiting_modules_last(items)


def pytest_collection_finish(session):
    """Start the local runs of the modules this session runs, in the background (tests/local_runs.py says in
    what order and how many at once)."""
    if session.config.option.collectonly:
        return                                  # nothing runs: --collect-only starts no Ray cluster either
    selected = {item.module.__name__ for item in session.items if getattr(item, "module", None) is not None}
    # Under pytest's temporary directory of this session (what tmp_path_factory uses), taken here in the main
    # thread; the runs' own directories are made by tempfile in their thread, never by pytest's factory, which the
    # tests' tmp_path fixtures use at the same time from this thread.
    base = session.config._tmp_path_factory.getbasetemp()
    local_runs.start(selected, lambda name: Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base)))


def pytest_terminal_summary(terminalreporter):
    """The local runs' wall times, beside pytest's own durations: they run in the background, so the test that
    waits for one shows only its wait."""
    lines = local_runs.SESSION.summary()
    if lines:
        terminalreporter.section("local runs (in the background)")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    """Stop a local run still going (an interrupted session, or tests that failed before they waited for it)."""
    local_runs.stop()

"""The compile's own interpreter (aot/compile_python.py, TPU_MULTISLICE_COMPILE_PYTHON): a user whose Python has the
workers' jax compiles with it, and the verdict is keyed and named by the jax that traced the step, not by this
process's. The other interpreter here is a real one: a virtualenv of this Python whose site-packages hold a jax,
jaxlib, MaxText and libtpu of other versions (their metadata only) and a stand-in train_compile that records
which interpreter ran it and which base config it was given."""
from __future__ import annotations

import io
import json
import sys
import types
import venv
from pathlib import Path

import pytest

from aot import compile_python, kernel_check, runner
from core.worker_lock import load_pins
from infra.config import plan_rules
from preview.compile.runner import render
from tests.conftest import REPO
from tests.preview.test_compile import _target

OTHER_JAX = "0.12.0.1"
STAND_IN = "front_end_stand_in_compile"


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture(scope="module")
def other_python(tmp_path_factory) -> Path:
    """A virtualenv with jax 0.12.0.1 (metadata), its own MaxText package and base.yml, and the stand-in."""
    root = tmp_path_factory.mktemp("other-python")
    venv.create(root, with_pip=False)
    site = next(root.glob("lib/python*/site-packages"))
    for name, version in (("jax", OTHER_JAX), ("jaxlib", OTHER_JAX), ("maxtext", "0.2.5"), ("libtpu", "0.0.50.1")):
        _dist_info(site, name, version)
    (site / "maxtext" / "configs").mkdir(parents=True)
    (site / "maxtext" / "__init__.py").write_text("")
    (site / "maxtext" / "configs" / "base.yml").write_text("# the other interpreter's MaxText\n")
    (site / f"{STAND_IN}.py").write_text(
        "import json, os, sys\n"
        "json.dump({'prefix': sys.prefix, 'argv': sys.argv[1:]}, open(os.environ['STAND_IN_RECORD'], 'w'))\n"
        "print('Jitting and compilation complete!')\n")
    return root / "bin" / "python"


def _plan() -> types.SimpleNamespace:
    return types.SimpleNamespace(describe=lambda: "qwen3 shape; rest", per_device_batch_size=4)


def test_the_named_python_runs_the_compile_and_its_jax_keys_the_verdict(monkeypatch, tmp_path, other_python):
    monkeypatch.setenv(compile_python.COMPILE_PYTHON_ENV, str(other_python))
    monkeypatch.setenv(runner.AOT_MODULE_ENV, STAND_IN)
    monkeypatch.setenv("STAND_IN_RECORD", str(tmp_path / "record.json"))
    assert runner.installed("jax") != OTHER_JAX           # this process's jax is another one
    result = runner.run_compile(_target())
    record = json.loads((tmp_path / "record.json").read_text())
    assert result.compiled, result.reason
    assert Path(record["prefix"]) == other_python.parent.parent      # train_compile ran under the named Python
    assert record["argv"][0] == str(next(other_python.parent.parent.glob(
        "lib/python*/site-packages/maxtext/configs/base.yml")))     # with its own MaxText's base.yml
    assert result.key.jax == OTHER_JAX and runner.compile_key(_target()).jax == OTHER_JAX
    verdict = runner.verdict_of(result, _plan())
    assert verdict.jax == OTHER_JAX and verdict.maxtext == "0.2.5"
    assert str(other_python) in result.command
    report = io.StringIO()
    render(result, report)                       # `--compile`'s report names the front end that decided
    assert f"MaxText 0.2.5, jax {OTHER_JAX}, libtpu" in report.getvalue()
    # The kernels alone run under the same interpreter as the step (the same front end).
    monkeypatch.delenv(runner.AOT_MODULE_ENV)
    assert kernel_check.kernel_command() == (str(other_python), str(kernel_check.KERNEL_COMPILE))


def test_without_it_the_compile_runs_under_this_python(monkeypatch):
    monkeypatch.delenv(compile_python.COMPILE_PYTHON_ENV, raising=False)
    front = compile_python.front_end()
    assert front.executable == sys.executable and not front.named
    assert runner.compile_key(_target()).jax == runner.installed("jax")


def test_a_python_that_cannot_run_is_one_line_naming_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_python.COMPILE_PYTHON_ENV, str(tmp_path / "no-python"))
    line = runner.missing_compiler()
    assert line.startswith(f"{compile_python.COMPILE_PYTHON_ENV}={tmp_path / 'no-python'}: cannot run it")
    assert "\n" not in line
    with pytest.raises(runner.CompileSetupError):
        runner.compile_key(_target())


def test_the_plan_names_the_front_end_and_assumes_only_when_it_is_not_the_workers():
    pins = load_pins(REPO)
    libtpu = pins["libtpu"]
    workers = plan_rules._front_end_assumption(types.SimpleNamespace(jax=pins["jax"], libtpu=libtpu))
    assert not workers.startswith("assumption") and f"jax {pins['jax']}" in workers
    other = plan_rules._front_end_assumption(types.SimpleNamespace(jax="0.10.2", libtpu=libtpu))
    assert other.startswith("assumption: XLA's verdict came from jax 0.10.2's front end")
    assert compile_python.COMPILE_PYTHON_ENV in other

"""MaxText goodput is switched on in what every backend launches, and off in the local CPU run.

The dashboard's goodput charts (infra/dashboard.py) read what MaxText's goodput monitor uploads; MaxText only
records and uploads with enable_goodput_recording and monitor_goodput, both false in its base.yml.
"""
from __future__ import annotations

import importlib.resources

import pytest
import yaml

from core.errors import PlanError
from core.maxtext_args import GOODPUT_OVERRIDES, RunSettings, maxtext_overrides
from core.planner import PlanRequest, plan
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO
from trainer.entrypoint import prepare
from workloads import backends
from workloads.jobset import spec as jobset_spec
from workloads.pathways import spec as pathways_spec
from workloads.ray import spec as ray_spec

PATHWAYS_GOODPUT = {"enable_pathways_goodput": "true"}


def keys_of(overrides: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides if "=" in item)


def stack(name: str):
    return build(load_stack_config(name, REPO))


def launched_overrides(config) -> dict[str, str]:
    """The MaxText key=value overrides the stack's backend actually launches."""
    backend = config.workload.backend
    if backend == "jobset":
        return keys_of(jobset_spec.training_argv(config))
    if backend == "pathways":
        return keys_of(pathways_spec.trainer_command(config))
    # Ray: the RayJob runs trainer.entrypoint, whose workers build the argv from the RunSettings it parses.
    command = ray_spec.entrypoint(config)
    _, plan_, run = prepare(command[command.index("trainer.entrypoint") + 1:])
    return keys_of(maxtext_overrides(plan_, run))


@pytest.mark.parametrize("name", COMMITTED_STACKS)
def test_every_backend_launches_maxtext_with_goodput_on(name):
    config = stack(name)
    keys = launched_overrides(config)
    assert GOODPUT_OVERRIDES.items() <= keys.items(), config.workload.backend
    # The dashboard's workload_id is the run_name MaxText is given (its goodput job name).
    assert keys["run_name"] == backends.run_name(config)
    if config.workload.backend == "pathways":
        assert PATHWAYS_GOODPUT.items() <= keys.items()
    else:
        assert "enable_pathways_goodput" not in keys


def test_the_local_cpu_run_records_no_goodput():
    # What trainer.local starts: the entrypoint with --local-cpu (hardware=cpu, DECOUPLE_GCLOUD on the workers).
    _, plan_, run = prepare(["--local-cpu", "--model", "tiny", "--topology", "2x4", "--slices", "2",
                             "--run-name", "local", "--base-output-directory", "local-output", "--steps", "10"])
    assert run.hardware == "cpu" and not run.records_goodput
    keys = keys_of(maxtext_overrides(plan_, run))
    assert not set(GOODPUT_OVERRIDES) & set(keys)


def test_goodput_can_be_switched_off_and_is_refused_on_cpu():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    off = keys_of(maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, goodput=False)))
    assert not set(GOODPUT_OVERRIDES) & set(off)
    with pytest.raises(PlanError, match="goodput needs Cloud Logging"):
        RunSettings("r", "out", 10, 5, hardware="cpu", goodput=True).validate()


def test_goodput_keys_cannot_be_replaced_through_extra():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    with pytest.raises(PlanError, match="monitor_goodput"):
        maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, extra={"monitor_goodput": "false"}))


def installed_base_config() -> dict:
    """The installed MaxText's maxtext/configs/base.yml (the file the trainer hands MaxText, found the way
    trainer.maxtext_runtime.base_config_path finds it)."""
    path = importlib.resources.files("maxtext").joinpath("configs", "base.yml")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_goodput_keys_exist_in_the_installed_maxtext_base_config():
    """MaxText refuses an override its config does not declare (maxtext 0.2.5 configs/pyconfig.py raises
    ValueError "<key> not in ..."), so a misspelt or removed key would fail the launched job. They sit under "Goodput parameters" (base.yml lines 1190-1199), all but
    enable_gcp_* defaulting to false."""
    base = installed_base_config()
    for key in (*GOODPUT_OVERRIDES, *PATHWAYS_GOODPUT):
        assert key in base, key
    # Why the keys must be set: without them MaxText neither records nor monitors goodput.
    assert base["enable_goodput_recording"] is False and base["monitor_goodput"] is False
    assert base["enable_pathways_goodput"] is False

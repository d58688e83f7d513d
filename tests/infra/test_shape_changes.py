"""A change of the run's shape the user did not ask for is a warning at the top of the plan and in `pulumi up`,
naming the key that keeps what the user wanted (infra/config/shape_changes.py, decided in config build: the
elastic default in infra/config/plan_rules.py plan_workload, the size keys' defaults in the schema)."""
from __future__ import annotations

import logging

import pytest

from infra.config import NAMESPACE, build
from infra.config.shape_changes import ELASTIC_TURNED_FIXED, SIZE_DEFAULT, SIZE_KEYS
from preview import cli
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO

# Nothing is compiled here: a near-limit step would be compiled by compileCheck=auto's build in `pulumi up`.
DEV_12 = {**load_stack_config("dev", REPO), "perDeviceBatchSize": "12", "compileCheck": "off"}


def _unsized(stack: str = "dev") -> dict:
    return {key: value for key, value in load_stack_config(stack, REPO).items() if key not in SIZE_KEYS}


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_committed_stacks_run_the_shape_they_say(stack):
    assert build(load_stack_config(stack, REPO)).shape_changes == ()


def test_a_batch_that_fits_only_on_every_slice_turns_the_elastic_dev_run_fixed_and_says_which_key_keeps_it():
    config = build(DEV_12)
    assert not config.workload.plan.elastic and config.workload.plan.slices == 2
    [change] = config.shape_changes
    assert change.kind == ELASTIC_TURNED_FIXED and change.key == "perDeviceBatchSize"
    assert "perDeviceBatchSize=12 fits only on all 2 slices" in change.message
    # The batch it names keeps the run elastic (1..2 slices) and warns no more ...
    keep = change.message.split(f"{NAMESPACE}:perDeviceBatchSize=")[1].split()[0]
    kept = build({**DEV_12, "perDeviceBatchSize": keep})
    assert kept.workload.plan.elastic and kept.workload.plan.min_slices == 1 and kept.shape_changes == ()
    # ... and the elasticMinSlices it names says a fixed run is meant: the same run, no warning.
    assert f"{NAMESPACE}:elasticMinSlices=2" in change.message
    fixed = build({**DEV_12, "elasticMinSlices": "2"})
    assert not fixed.workload.plan.elastic and fixed.shape_changes == ()


def test_an_on_demand_run_was_never_elastic_so_nothing_turned():
    assert build({**DEV_12, "capacity": "on-demand"}).shape_changes == ()


def test_a_stack_without_a_size_runs_the_default_size_and_says_so():
    config = build(_unsized())
    [change] = config.shape_changes
    assert change.kind == SIZE_DEFAULT
    for key in SIZE_KEYS:
        assert f"{NAMESPACE}:{key}" in change.message
    assert "2 x v6e 4x4, 32 chips" in change.message
    # One size key left to its default is named alone.
    [one] = build({**_unsized(), "tpuGeneration": "v6e", "tpuTopology": "2x4"}).shape_changes
    assert one.key == "slices" and f"{NAMESPACE}:tpuTopology" not in one.message


def test_the_plan_opens_with_the_default_size_and_its_price(capsys, monkeypatch):
    # The dev stack file without its size keys, as the plan reads it.
    monkeypatch.setattr(cli, "load_stack_config", lambda stack, root: _unsized())
    code = cli.main(["--stack", "dev", "--root", str(REPO), "--no-crd-check"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("WARNING size by default: the stack sets no tpuGeneration"), lines[:3]
    warning = " ".join(line.strip() for line in lines[1:lines.index(next(l for l in lines if l.startswith("Offline")))])
    assert "USD/h while training" in warning


def test_pulumi_up_warns_of_it_before_anything_else(caplog):
    caplog.set_level(logging.INFO)
    run_program(DEV_12, stack="dev")
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings and warnings[0].startswith(f"{ELASTIC_TURNED_FIXED}: this Spot run"), warnings[:2]
    assert all(len(line) <= 100 for line in warnings[0].splitlines())

"""Retries: preemptions unlimited, real failures finite (Ray 2.60 FailureConfig).

Source: ray/train/v2/api/config.py (ray 2.60.0), FailureConfig: `max_failures` ("Defaults to 0"; -1 infinite) and
`max_preemption_failures` ("node-preemption interruptions ... counted separately from max_failures (which is
reserved for real failures) ... Setting to -1 leads to infinite preemption retries ... Defaults to -1").
"""
from __future__ import annotations

import pytest
from ray.train.v2.api.config import FailureConfig

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from trainer.entrypoint import DEFAULT_MAX_FAILURES, build_parser, failure_config_kwargs
from workloads.ray import spec as ray_inputs


def entrypoint_args(command: list[str]):
    assert command[:3] == ["python", "-m", "trainer.entrypoint"]
    return build_parser().parse_args(command[3:])


def test_spot_elastic_run_retries_preemptions_forever_and_other_failures_finitely():
    """The dev stack is spot and elastic. Whatever --max-failures the stack passes, preemptions stay unlimited;
    without the flag, other failures are retried DEFAULT_MAX_FAILURES (3) times, not forever."""
    command = ray_inputs.entrypoint(build(load_stack_config("dev", REPO)))
    assert "--elastic" in command
    without_flag = [c for i, c in enumerate(command)
                    if c != "--max-failures" and (i == 0 or command[i - 1] != "--max-failures")]
    config = FailureConfig(**failure_config_kwargs(entrypoint_args(without_flag).max_failures))
    assert config.max_preemption_failures == -1
    assert config.max_failures == DEFAULT_MAX_FAILURES == 3
    passed = FailureConfig(**failure_config_kwargs(entrypoint_args(command).max_failures))
    assert passed.max_preemption_failures == -1


@pytest.mark.parametrize("given, expected", [("0", 0), ("5", 5), ("-1", -1)])
def test_max_failures_flag_is_taken_as_given_including_unlimited(given, expected):
    args = build_parser().parse_args(["--max-failures", given])
    assert failure_config_kwargs(args.max_failures) == {"max_failures": expected, "max_preemption_failures": -1}


def test_max_failures_below_minus_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-failures", "-2"])
    assert "-1 for unlimited" in capsys.readouterr().err

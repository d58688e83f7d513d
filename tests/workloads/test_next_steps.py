"""`pulumi stack output nextSteps` / `watchCommand`: every committed stack says what to run after `pulumi up`,
in order, and each line is a command of a tool the deploy guide (docs/deploying.md) lists."""
from __future__ import annotations

import shlex

import pytest

from tests.conftest import COMMITTED_STACKS, committed_stack_run

# The tools docs/deploying.md lists under prerequisites.
GUIDE_TOOLS = {"gcloud", "kubectl", "tensorboard", "ray"}
STATUS_KEY = {"rayjob": "rayJobStatusCommand", "jobset": "jobsetStatusCommand", "pathways": "pathwaysStatusCommand"}


def _backend(outputs: dict) -> str:
    return next(backend for backend, key in STATUS_KEY.items() if key in outputs)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_next_steps_start_with_credentials_then_the_jobs_state(stack):
    outputs = committed_stack_run(stack).outputs
    lines = outputs["nextSteps"].splitlines()
    commands = [line for line in lines if line and not line.startswith("#")]
    notes = [line for line in lines if line.startswith("#")]
    assert commands[0] == outputs["getCredentialsCommand"]
    assert commands[1:].count(outputs[STATUS_KEY[_backend(outputs)]]) == 1
    assert len(notes) == len(commands) + 1            # one note per command, then the dashboard
    assert outputs["dashboardUrl"] in notes[-1]
    for command in commands:
        first = shlex.split(command.split(";")[0].split("|")[0])[0]
        assert first in GUIDE_TOOLS, command


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_watch_command_follows_the_jobs_state(stack):
    outputs = committed_stack_run(stack).outputs
    assert outputs["watchCommand"] == outputs[STATUS_KEY[_backend(outputs)]] + " --watch"
    assert "watchCommand" not in committed_stack_run(stack).secret_outputs

"""Shared fixtures: the committed stacks run once each under Pulumi mocks (infra/mocks.py)."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from infra.mocks import ProgramRun, run_program
from infra.stack_files import load_stack_config

REPO = Path(__file__).resolve().parent.parent
COMMITTED_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))


@functools.lru_cache(maxsize=None)
def committed_stack_run(stack: str) -> ProgramRun:
    return run_program(load_stack_config(stack, REPO), stack=stack)


@pytest.fixture(scope="session")
def prod() -> ProgramRun:
    return committed_stack_run("prod")


@pytest.fixture(scope="session")
def dev() -> ProgramRun:
    return committed_stack_run("dev")


# Smallest valid config: what a user must set.
MINIMAL = {"project": "my-tpu-project", "zone": "us-east5-b"}

"""Every committed stack's resources, by URN, with a digest of their inputs: a changed URN is a replaced resource
on the user's next `pulumi up` (a new logical name or type token), a changed digest an update. The golden
(tests/golden/stack-<name>.json) makes either visible in review; refactors must leave it byte-identical.
Regenerate with UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/infra/test_stack_identity.py"""
from __future__ import annotations

import hashlib
import json

import pytest

from preview.harness import ProgramRun
from tests.conftest import ALL_STACKS, assert_matches_golden, committed_stack_run


def identity(run: ProgramRun) -> dict[str, str]:
    """URN → sha256 of the resource's inputs as registered (secrets included: a secret changed is an update)."""
    return {reg.urn: hashlib.sha256(json.dumps(reg.inputs, sort_keys=True, default=repr).encode()).hexdigest()
            for reg in run.resources}


@pytest.mark.parametrize("stack", ALL_STACKS)     # the shared cluster and its runs too
def test_committed_stack_resources_are_unchanged(stack):
    assert_matches_golden(f"stack-{stack}", identity(committed_stack_run(stack)))


def test_identity_sees_a_changed_input_and_a_moved_resource():
    run = committed_stack_run("dev")
    before = identity(run)
    first = run.resources[0]
    original_inputs, original_urn = first.inputs, first.urn
    try:
        first.inputs = {**original_inputs, "changed": True}
        assert identity(run)[original_urn] != before[original_urn]
        first.inputs, first.urn = original_inputs, original_urn + "-renamed"
        assert set(identity(run)) != set(before)
    finally:
        first.inputs, first.urn = original_inputs, original_urn

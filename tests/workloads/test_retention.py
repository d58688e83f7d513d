"""Checkpoints do not pile up: every backend launches MaxText with max_num_checkpoints_to_keep.

MaxText 0.2.5 keeps every checkpoint unless told (maxtext/configs/base.yml `max_num_checkpoints_to_keep: None`,
handed to Orbax's preservation policy as max_to_keep by maxtext/common/checkpointing.py); one llama3-8b
checkpoint with its AdamW state is ~100 GB, so a long run would otherwise bill for all of them.
"""
from __future__ import annotations

import importlib.resources

import pytest
import yaml

from core.errors import PlanError
from core.maxtext_args import DEFAULT_CHECKPOINTS_TO_KEEP, RunSettings
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO
from tests.workloads.test_goodput import launched_overrides


@pytest.mark.parametrize("name", COMMITTED_STACKS)
@pytest.mark.parametrize("keep", [None, 5])
def test_every_backend_keeps_only_the_newest_checkpoints(name, keep):
    raw = load_stack_config(name, REPO)
    if keep is not None:
        raw = {**raw, "checkpointsToKeep": keep}
    keys = launched_overrides(build(raw))
    assert keys["max_num_checkpoints_to_keep"] == str(keep or DEFAULT_CHECKPOINTS_TO_KEEP)


def test_the_key_is_maxtexts_own_and_unset_there():
    base = yaml.safe_load((importlib.resources.files("maxtext") / "configs" / "base.yml").read_text())
    assert "max_num_checkpoints_to_keep" in base and base["max_num_checkpoints_to_keep"] in (None, "None")


def test_keeping_no_checkpoint_is_refused():
    with pytest.raises(PlanError, match="checkpoints_to_keep=0"):
        RunSettings(run_name="r", base_output_directory="gs://b/x", steps=10, checkpoint_period=5,
                    checkpoints_to_keep=0).validate()

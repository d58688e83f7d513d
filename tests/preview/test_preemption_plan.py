"""The offline plan says what a Spot preemption costs: the save, the grace periods, and a warning where the save
cannot fit the notice (text and --json), with the write rate it assumes listed among the assumptions."""
from __future__ import annotations

import io
import json

from infra.config import build
from preview.cli import render_text
from preview.harness import run_program
from preview.k8s.validation import default_schemas_dir
from preview.model import build_plan
from preview.stack_files import load_stack_config
from tests.conftest import REPO


def _plan(stack: str, **overrides: str):
    raw = {**load_stack_config(stack, REPO), **overrides}
    config = build(raw)
    return build_plan(run_program(raw, stack=f"{stack}-preemption"), config, stack, default_schemas_dir())


def test_a_save_the_notice_cannot_hold_is_a_warning_in_text_and_json():
    plan = _plan("prod", capacity="spot", gkeVersion="1.34.8-gke.1000000")
    document = json.loads(json.dumps(plan.as_dict(), default=str))
    preemption = document["preemption"]
    assert preemption["spot"] and not preemption["fits"] and preemption["steps_lost_per_preemption"] == 50
    assert preemption["node_shutdown_grace_seconds"] is None and preemption["notice_seconds_for_pods"] == 15
    (warning,) = preemption["warnings"]
    text = io.StringIO()
    render_text(plan, default_schemas_dir(), text)
    assert f"WARN  {warning}" in text.getvalue()
    assert any(line.startswith("checkpoint writes: each TPU host is assumed to write 1 GB/s")
               for line in document["assumptions"])


def test_a_save_that_fits_shows_its_budget_and_no_warning():
    plan = _plan("prod", capacity="spot")
    preemption = plan.as_dict()["preemption"]
    assert preemption["fits"] and preemption["warnings"] == []
    assert preemption["node_shutdown_grace_seconds"] == 120
    assert any("Spot shutdown budget" in line for line in plan.assumptions)
    text = io.StringIO()
    render_text(plan, default_schemas_dir(), text)
    assert "a preemption costs 0 steps (saved at the notice) plus the restart" in text.getvalue()
    costs = plan.as_dict()["preemption"]["costs"]
    assert costs["chips"] == 32 and costs["preemption_chip_minutes"] < costs["restart_chip_minutes"]
    assert "a Spot preemption costs up to ~" in text.getvalue()

"""The offline plan shows the stack's dashboard (one line per chart) and whether the launched run records
goodput, in text and in `--json`."""
from __future__ import annotations

import io
import json

import pytest

from infra.config import build
from infra.dashboard import chart_filters
from preview.cli import render_dashboard, render_text
from preview.model import DashboardSummary, build_plan
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO, committed_stack_run
from workloads.backends import run_name


def plan_of(stack: str):
    config = build(load_stack_config(stack, REPO))
    return config, build_plan(committed_stack_run(stack), config, stack, None)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_json_plan_has_a_dashboard_section(stack):
    config, plan = plan_of(stack)
    document = json.loads(json.dumps(plan.as_dict(), default=str))
    dashboard = document["dashboard"]
    registered = json.loads(committed_stack_run(stack).one("gcp:monitoring/dashboard:Dashboard")
                            .inputs["dashboardJson"])
    assert dashboard["display_name"] == registered["displayName"]
    # One line per chart, in layout order, naming each chart's question and the metrics behind it.
    charts = chart_filters(registered)
    assert len(dashboard["charts"]) == len(charts)
    for line, (title, _) in zip(dashboard["charts"], charts):
        assert line.startswith(title + " <- ")
    assert dashboard["workload_id"] == run_name(config)
    expected = {"enable_goodput_recording": "true", "monitor_goodput": "true",
                "enable_gcp_goodput_metrics": "true", "enable_gcp_step_deviation_metrics": "true"}
    if config.workload.backend == "pathways":
        expected["enable_pathways_goodput"] = "true"
    assert dashboard["goodput"] == expected


def test_text_plan_lists_the_charts_and_the_goodput_setting():
    _, plan = plan_of("prod")
    out = io.StringIO()
    render_text(plan, None, out)
    report = out.getvalue()
    assert "\nDashboard: 'TPU multislice: tpu-multislice-prod / maxtext-train-llama3-8b'" in report
    assert "goodput: on for MaxText run maxtext-train-llama3-8b (enable_goodput_recording=true" in report
    for line in plan.dashboard.charts:
        assert f"\n  {line}\n" in report


def test_a_run_without_goodput_is_called_out():
    out = io.StringIO()
    render_dashboard(DashboardSummary("d", ["Q? <- m"], "run-1", {}), out)
    assert "goodput: OFF for MaxText run run-1: the goodput charts stay empty" in out.getvalue()

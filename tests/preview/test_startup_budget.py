"""The plan's start-up budget and the image's costs come from benchmarks/startup_bench.py's measured figures
(benchmarks/startup/results.json), for the stack's own workerEnvironment and hosts.

Prices: Artifact Registry storage 0.10 USD per GB-month above 0.5 GB (https://cloud.google.com/artifact-registry/
pricing), Cloud Build E2_HIGHCPU_8 0.016 USD per build-minute (https://cloud.google.com/build/pricing), both 2025
list prices read offline.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import asdict

import pytest

from infra.config import build
from preview.costs import worker_image_cost_notes
from preview.startup import PLANNED_LINK, budget_lines, host_table, load_results
from preview.stack_files import load_stack_config
from tests.conftest import REPO

RESULTS = load_results()


def _config(stack: str, **overrides):
    return build({**load_stack_config(stack, REPO), **overrides})


def test_the_committed_figures_are_a_measurement_of_this_machine_with_every_part():
    assert RESULTS["machine"].startswith("CPU, this machine:")
    assert {s["name"] for s in RESULTS["install"] if s["ok"]} >= {"uv install, cold cache", "uv install, warm cache"}
    assert RESULTS["layer"]["compressed_bytes"] > 100e6
    assert {s["cache"]: s["ok"] for s in RESULTS["first_step"]} == {"missed": True, "hit": True}


def test_an_image_stack_budgets_the_pull_per_host_and_per_start():
    config = _config("prod")
    layer, unpack = RESULTS["layer"]["compressed_bytes"], RESULTS["layer"]["unpack_s"]
    lines = budget_lines(config)
    [pull] = [line for line in lines if line.startswith("environment: pull the built image")]
    assert f"{layer / 1e9:.2f} GB" in pull and f"{layer / PLANNED_LINK[1] + unpack:.0f} s" in pull
    # prod: 2 slices of 4 hosts, each pulling the layer.
    assert f"8 host(s) pull {8 * layer / 1e9:.2f} GB" in pull
    assert any(line.startswith("with workerEnvironment: runtime instead") for line in lines)
    first = {s["cache"]: s["seconds"] for s in RESULTS["first_step"]}
    [step] = [line for line in lines if line.startswith("first step")]
    assert f"{first['missed']:.0f} s missed" in step and f"{first['hit']:.0f} s hit" in step
    assert "CPU, this machine" in step


def test_a_runtime_stack_budgets_the_install_from_the_index():
    lines = budget_lines(_config("dev", workerEnvironment="runtime"))
    [install] = [line for line in lines if line.startswith("environment: install")]
    cold = next(s for s in RESULTS["install"] if s["name"] == "uv install, cold cache")
    assert f"{cold['fetched_bytes'] / 1e9:.2f} GB of wheels" in install and "package index" in install
    assert not any("pull the built image" in line for line in lines)


def test_pathways_installs_no_lock():
    lines = budget_lines(_config("pathways"))
    assert any("no lock installed" in line for line in lines)
    assert not any("wheels" in line or "pull the built image" in line for line in lines)


@pytest.mark.parametrize("stack, builds", [("prod", True), ("pathways", False)])
def test_the_image_costs_are_in_the_plan_with_their_sources(stack, builds):
    notes = worker_image_cost_notes(_config(stack))
    assert bool(notes) == builds
    if builds:
        stored, build_note, code, lock = notes
        assert "idle included" in stored and "https://cloud.google.com/artifact-registry/pricing" in stored
        assert "0.10 USD per GB-month" in stored
        assert "0.016 USD per build-minute" in build_note and "~0.16 USD" in build_note
    assert not worker_image_cost_notes(_config("prod", workerEnvironment="runtime"))


def test_the_benchmark_writes_what_the_plan_reads():
    """benchmarks/startup_bench.py's results, as it writes them, render in the table the README holds."""
    spec = importlib.util.spec_from_file_location("startup_bench", REPO / "benchmarks" / "startup_bench.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench          # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    results = bench.Results("CPU, this machine: test", install=[
        bench.Step("uv install, cold cache", 100.0, 1, 2, True, 1.0, "", 700_000_000),
        bench.Step("uv install, warm cache", 40.0, 1, 2, True, 1.0, "", 0)],
        layer=bench.Layer(800_000_000, 60.0, 20.0),
        first_step=[bench.FirstStep("missed", 20.0, 2, 1000, True), bench.FirstStep("hit", 10.0, 2, 1000, True)])
    table = host_table(asdict(results))
    assert "0.70 GB of wheels" in table and "at most 0.80 GB" in table and "| 20.0 s (load 0.0) |" in table


def test_the_plan_says_what_a_code_edit_and_a_lock_change_cost():
    """The code is not in the image: a code edit builds, pushes and pulls nothing; a lock change builds once,
    pushes the layer (across regions when imageBuildRegion differs from the repository's, priced as assumed) and
    every host pulls it again."""
    layer = RESULTS["layer"]["compressed_bytes"] / 1e9
    config = _config("prod")
    notes = worker_image_cost_notes(config)
    [code] = [n for n in notes if n.startswith("a code edit")]
    assert "no build, push or pull" in code
    [lock] = [n for n in notes if n.startswith("a lock change")]
    assert f"<= {8 * layer:.2f} GB in all" in lock
    assert config.worker_image.build_region != config.gcp.region        # us-east5 builds in us-central1
    assert f"~{layer * 0.02:.2f} USD at 0.02 USD/GB (assumed)" in lock
    same = worker_image_cost_notes(_config("prod", zone="us-central1-b"))
    assert "stays in us-central1 (free)" in next(n for n in same if n.startswith("a lock change"))


def test_the_start_up_figures_say_they_do_not_assume_streaming():
    lines = budget_lines(_config("prod"))
    assert any(line.startswith("streaming: not assumed") for line in lines)

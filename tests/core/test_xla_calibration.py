"""The planner's memory estimate (core/memory.py) and verdicts against XLA's own figures (core/xla_calibration.json).

The data: MaxText 0.2.5 training steps compiled ahead of time for the real TPU targets on CPU (`python -m
preview.compile --calibrate` regenerates every row; each row names the jax/libtpu pair that compiled it). Nothing
is compiled here: these tests run in the default suite and only read the data. benchmarks/planner_vs_xla.py prints
the same comparison as a table.

XLA's figures for a row, counted as the estimate counts them (the runtime's reservation included, preview/compile/calibration.py
row_need): its peak (libtpu "Total hbm usage", after any recomputation: what it assigned), or, when the step did not
fit, what it said it needed ("Used X of Y hbm"); and its need: what the step needed before XLA recomputed anything
("rematerialization hbm reduction: X => Y": X), else the peak.

Three sets of rows. FITTED: the rows the model's terms were chosen against. MARGIN: compiled after the terms were
chosen, at the edges of the planner's bands; ESTIMATE_ERROR was then raised from 0.09 to 0.19 to cover them, so
the margin is fitted to them too (they used to be called "held out"). HELD_OUT: compiled after
the model (terms and margin) was frozen, in shapes chosen after the freeze; they decide nothing in the model and
test it (their error is reported in docs/planner.md, not folded into the margin).

What is held (docs/planner.md, "How the estimate is held to XLA"):
- on the fitted rows near the limit (XLA's peak >= 75 % of the HBM it compiles against) the estimate is within
  10 % of XLA's need, and never below 90 % of it anywhere (elsewhere XLA spends spare HBM on its schedule, so an
  upper bound is fine: the same per-device step, qwen3-0.6b at batch 4 on v6e 2x4 slices, peaks at 8.84 GiB on
  two slices and 11.74 on one);
- the planner's one margin, core.memory.ESTIMATE_ERROR: the worst error of a fitted row when it is left out
  (leave-one-out) and of every margin row, rounded up to a whole percent;
- an estimate over XLA's limit is refused (only a compile of the step accepts it); every step XLA refused is
  refused; every step XLA compiled whose estimate is within the limit is accepted, with the near-limit warning
  where XLA recomputed; the margin rows and the held-out compiles agree with the planner's verdict;
- every Trillium run Google published (core/recipes.py PUBLISHED_RUNS) is accepted at its batch and flags, and
  the largest batch the plan advertises is one the rule accepts.
"""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from core.errors import PlanError
from core.memory import (DOES_NOT_FIT, ESTIMATE_ERROR, GIB, NEAR_LIMIT as WARNS, REMAT_THRESHOLD, RUNTIME_RESERVED_GIB,
                         XLA_HBM_LIMIT_GIB)
from core.planner import DoesNotFit, PlanRequest, largest_batch, plan
from core.presets import preset
from core.recipes import PUBLISHED_RUNS
from core.worker_lock import load_pins
from infra.config import build
from preview.compile.calibration import (CONSTANT_ROWS, HELD_OUT, MARGIN_ROWS, arguments_source, row_need,
                                         row_peak, rows_setting, SET_ROWS)
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO

DATA = json.loads((REPO / "core" / "xla_calibration.json").read_text())
ROWS = DATA["rows"]
NEAR_LIMIT = 0.75          # XLA's peak at least this share of the HBM it compiles against
BAND = 0.10                # near the limit: within 10 % of XLA
FLOOR = 0.90               # anywhere: never below 90 % of XLA's need
SLACK_BOUND = 1.6          # far from the limit: an upper bound, but not a wild one


def request_of(row: dict, **changes) -> PlanRequest:
    request = PlanRequest(
        model=row["model"], generation=row["generation"], topology=row["topology"], slices=row["slices"],
        ici_fsdp=row["ici_fsdp"], ici_tensor=row["ici_tensor"], dcn_data=row["dcn_data"], dcn_fsdp=row["dcn_fsdp"],
        per_device_batch_size=row["per_device_batch_size"], max_target_length=row["max_target_length"],
        remat_policy=row["remat_policy"], remat_offload=tuple(row["remat_offload"]), weight_dtype=row["weight_dtype"],
        attention=row["attention"])
    return dataclasses.replace(request, **changes)


def xla_need(row: dict) -> int:
    return row_need(row, DATA)


def xla_peak(row: dict) -> int:
    return row_peak(row, DATA)


def near_limit(row: dict) -> bool:
    return xla_peak(row) >= NEAR_LIMIT * row["hbm_bytes"]


def estimated(row: dict) -> int:
    return plan(request_of(row, memory_check=False)).memory.total


# The margin's rows (preview/compile/calibration.py CALIBRATION_CASES margin): 8B on one v6e-64 at batch 13 (estimated over the
# limit), 70B on one v6e-32 at batch 3, and the largest batch the plan advertised for 8B on one v6e-16 and for the
# dev stack's qwen3-0.6b on 2 x v6e-8.
assert set(MARGIN_ROWS) == {"llama3-8b-1xv6e-64-b13", "llama3-70b-1xv6e-32-b3", "llama3-8b-1xv6e-16-b9",
                            "qwen3-0.6b-2xv6e-8-b20"}
FITTED = [row for row in ROWS if row["case"] not in HELD_OUT + MARGIN_ROWS + SET_ROWS]
MARGIN = [row for row in ROWS if row["case"] in MARGIN_ROWS]
HELD = [row for row in ROWS if row["case"] in HELD_OUT]
NEAR = [row for row in FITTED if near_limit(row)]
# XLA's buffer assignment exists for the steps it compiled; for a refused one its figure is a failed attempt.
NEAR_COMPILED = [row for row in NEAR if row["compiled"]]


def error(row: dict) -> float:
    return estimated(row) / xla_need(row) - 1


def test_every_row_was_compiled_by_the_workers_libtpu():
    """The XLA that assigns memory is libtpu's; the workers' is worker_env/requirements.lock's. The jax front end
    here is older (jax 0.12 needs Python 3.12, which this machine cannot install): each row names its pair and
    the docs flag the difference."""
    lock = load_pins(REPO)
    assert {row["libtpu"] for row in ROWS} == {lock["libtpu"]}
    assert {row["jax"] for row in ROWS} != {lock["jax"]}        # the deviation the docs state; update them if not


def test_the_data_covers_fits_refusals_recomputes_and_the_published_shapes():
    assert {row["maxtext"] for row in ROWS} == {"0.2.5"}
    for row in ROWS:
        assert xla_need(row) and row["libtpu"] and row["jax"], row["case"]      # every figure names its pair
    assert any(not row["compiled"] for row in ROWS)
    assert any(row["compiled"] and row["before_remat_bytes"] for row in ROWS)
    assert any(row["ici_tensor"] > 1 for row in ROWS) and {"v5e", "v6e"} <= {row["generation"] for row in ROWS}
    assert {"float32", "bfloat16"} <= {row["weight_dtype"] for row in NEAR}
    assert len(NEAR_COMPILED) >= 6 and len(NEAR) - len(NEAR_COMPILED) >= 3


# Rows the estimate is known to be below the floor on, far from the limit, with why (docs/planner.md says so too).
KNOWN_GAPS = {
    "llama3-8b-2xv6e-16-tp4-b4": "tensor parallelism (fsdp 4 x tensor 4) with full remat across two slices: XLA "
                                 "needs 22.1 GiB, the estimate counts 17.9; what tensor parallelism gathers per "
                                 "layer is not modelled (the step is at 71 % of HBM, where no verdict turns)",
}


@pytest.mark.parametrize("row", FITTED, ids=[row["case"] for row in FITTED])
def test_estimate_is_never_below_ninety_percent_of_xla(row):
    ratio = estimated(row) / xla_need(row)
    if row["case"] in KNOWN_GAPS:
        assert ratio < FLOOR and not near_limit(row), f"{row['case']} is no longer a gap: drop it from KNOWN_GAPS"
        return
    assert ratio >= FLOOR, f"{row['case']}: estimate {ratio:.2f} x XLA's need {xla_need(row) / GIB:.2f} GiB"
    assert ratio <= SLACK_BOUND, f"{row['case']}: estimate {ratio:.2f} x XLA's need {xla_need(row) / GIB:.2f} GiB"


@pytest.mark.parametrize("row", NEAR_COMPILED, ids=[row["case"] for row in NEAR_COMPILED])
def test_estimate_is_within_ten_percent_of_xla_near_the_limit(row):
    """Against XLA's need: what its memory assignment sums before its own rematerialization trades compute for
    bytes (after it, the peak depends on how much XLA chose to recompute, benchmarks/planner_vs_xla.py shows both)."""
    ratio = estimated(row) / xla_need(row)
    assert abs(ratio - 1) <= BAND, f"{row['case']}: estimate {ratio:.2f} x XLA's need {xla_need(row) / GIB:.2f} GiB"


def leave_one_out() -> dict[str, tuple[float, float]]:
    """For each fitted row XLA compiled near the limit: (the margin the other rows give, rounded up to a whole
    percent as ESTIMATE_ERROR is; this row's own error)."""
    out = {}
    for row in NEAR_COMPILED:
        others = max(abs(error(other)) for other in NEAR_COMPILED if other is not row)
        out[row["case"]] = (math.ceil(others * 100) / 100, error(row))
    return out


def test_the_one_margin_is_the_worst_error_left_out_and_on_the_margin_rows():
    """ESTIMATE_ERROR is the worst error of each fitted near-limit row against the margin the others give
    (leave-one-out) and of each margin row (all near the limit), rounded up to a whole percent: the margin rows set
    it (0.09 -> 0.19), so it is not a held-out figure; the held-out compiles measure it (docs/planner.md)."""
    held = {row["case"]: error(row) for row in rows_setting("ESTIMATE_ERROR", MARGIN) if row["compiled"]}
    loo = leave_one_out()
    worst = max([abs(own) for _, own in loo.values()] + [abs(e) for e in held.values()])
    assert ESTIMATE_ERROR == math.ceil(worst * 100) / 100, f"measured {worst:.3f}, stated {ESTIMATE_ERROR}"
    # The rows a margin fitted on all the others would not have covered: why a fitted margin is not used.
    missed = [case for case, (margin, own) in loo.items() if abs(own) > margin]
    missed += [case for case, e in held.items() if abs(e) > max(margin for margin, _ in loo.values())]
    assert missed, "every row within the others' margin: the margin could be the fitted one"


# Held-out rows on which the model breaks the acceptance rule: measured, reported (docs/planner.md), not fitted
# away. Strict: once the model is changed for it, the row passes, the marker must go and the row is no longer
# held out (it then sets what changed, CONSTANT_ROWS).
KNOWN_MISSES = {
    "llama3-8b-2xv6e-16-b1-s32k": "an untied head at 32k on two slices: XLA fits it only by recomputing "
                                  "(31.05 GiB before), the estimate (23.62) says fits, -23.9 %",
}


@pytest.mark.parametrize("row", [pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[row[
    "case"]])) if row["case"] in KNOWN_MISSES else row for row in ROWS], ids=[row["case"] for row in ROWS])
def test_planner_refuses_what_xla_refuses_and_what_is_over_the_limit(row):
    """The acceptance rule: refused when XLA refused, and when the estimate is over XLA's limit even where XLA
    compiled the step (a compile of that exact step is what accepts it: the refusal names it, and with the memory
    check off the plan is kept); accepted when XLA compiled it and the estimate is within the limit, with the
    warning that names the compile where XLA recomputed."""
    estimate = plan(request_of(row, memory_check=False))
    if not row["compiled"] or estimate.memory.total > estimate.memory.hbm:
        with pytest.raises(DoesNotFit, match=r"\(estimated\).*does not fit.*python -m preview.compile.*"
                                             r"--no-memory-check"):
            plan(request_of(row))
        assert estimate.memory.verdict == DOES_NOT_FIT
        return
    if row["before_remat_bytes"]:                # XLA only fit it by recomputing: a warning that says so
        assert estimate.memory.verdict == WARNS
    try:
        chosen = plan(request_of(row))           # XLA compiled it: accepted ...
    except DoesNotFit as err:                    # ... unless the host cannot hold what it offloads
        assert estimate.memory.verdict != DOES_NOT_FIT and "Host memory:" in str(err), row["case"]
        return
    if row["before_remat_bytes"]:
        assert any("near the limit" in note and "--compile" in note for note in chosen.notes)


def test_xla_compiled_steps_the_estimate_puts_over_the_limit_and_they_are_refused():
    """The rule costs these (70B across two slices at batch 2, which XLA fits only by recomputing): each is
    refused by the estimate, and `--no-memory-check` after a compile that fits runs it."""
    over = [row for row in ROWS if row["compiled"] and estimated(row) > row["hbm_bytes"]]
    assert {row["case"] for row in over} == {"llama3-70b-2xv6e-16-fsdp-b2", "llama3-70b-2xv6e-32-b2"}
    for row in over:
        assert row["before_remat_bytes"]
        kept = plan(request_of(row, memory_check=False))
        assert "memory check off" in kept.notes[0] and "compile fits it" in kept.notes[0]


@pytest.mark.parametrize("row", MARGIN + HELD, ids=[row["case"] for row in MARGIN + HELD])
def test_the_margin_and_held_out_compiles_agree_with_the_planners_verdict(row):
    estimate = plan(request_of(row, memory_check=False)).memory
    assert row["libtpu"] == load_pins(REPO)["libtpu"]
    if row["compiled"]:
        assert estimate.verdict != DOES_NOT_FIT, row["case"]
        plan(request_of(row))
    else:
        assert estimate.verdict == DOES_NOT_FIT and "RESOURCE_EXHAUSTED" in row["reason"]


def test_the_margin_compiles_are_at_the_edges_of_the_bands():
    """8B on one v6e-64 at batch 13 (estimated over the limit: XLA refuses it too); 70B on one v6e-32 at batch 3;
    and the largest batch the plan advertises for 8B on one v6e-16 and for the dev stack (qwen3-0.6b, 2 x v6e-8,
    elastic 1..2): XLA compiles each of those."""
    by = {row["case"]: row for row in MARGIN}
    assert not by["llama3-8b-1xv6e-64-b13"]["compiled"] and by["llama3-70b-1xv6e-32-b3"]["compiled"]
    one_v6e_16 = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=1))
    assert largest_batch(one_v6e_16) == by["llama3-8b-1xv6e-16-b9"]["per_device_batch_size"]
    assert by["llama3-8b-1xv6e-16-b9"]["compiled"]
    dev = build(load_stack_config("dev", REPO)).workload.plan
    row = by["qwen3-0.6b-2xv6e-8-b20"]
    assert (dev.model.name, dev.shape.topology, dev.slices) == (row["model"], row["topology"], row["slices"])
    assert row["compiled"]          # batch 20 on two slices compiles; the dev run also shrinks to one (below)


def test_the_dev_stacks_largest_batch_is_what_its_elastic_minimum_compiles():
    """dev (qwen3-0.6b, elastic 1..2 x v6e-8) advertised batch 20 and called 12 a fit; on one slice XLA
    compiles batch 4 and refuses 12. The advertised largest batch lies between them, batch 12 is refused at one
    slice, and the plan is not "fits" there."""
    by = {row["case"]: row for row in ROWS}
    fits, refused = by["qwen3-0.6b-1xv6e-8-b4"], by["qwen3-0.6b-1xv6e-8-b12"]
    assert fits["compiled"] and not refused["compiled"] and "RESOURCE_EXHAUSTED" in refused["reason"]
    dev = build(load_stack_config("dev", REPO)).workload.plan
    assert (dev.min_slices, dev.slices) == (fits["slices"], 2)
    assert fits["per_device_batch_size"] <= largest_batch(dev) < refused["per_device_batch_size"]
    with pytest.raises(DoesNotFit, match="at 1 of 1..2 slices"):
        build_plan_at(dev, refused["per_device_batch_size"])


def build_plan_at(chosen, batch):
    """The dev stack's request at another per-device batch (what --set perDeviceBatchSize=N asks)."""
    return plan(PlanRequest(chosen.model.name, chosen.shape.generation.name, chosen.shape.topology,
                            slices=chosen.slices, min_slices=chosen.min_slices, per_device_batch_size=batch))


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_largest_batch_a_plan_advertises_is_within_the_limit(stack):
    """The plan's note names the largest per-device batch the planner accepts; its estimate is within XLA's limit
    at every slice count the run may have, and the next batch is refused."""
    p = build(load_stack_config(stack, REPO)).workload.plan
    best = largest_batch(p)
    request = PlanRequest(p.model.name, p.shape.generation.name, p.shape.topology, slices=p.slices,
                          min_slices=p.min_slices if p.elastic else None, dcn_data=p.dcn_data, dcn_fsdp=p.dcn_fsdp,
                          per_device_batch_size=best)
    at = plan(request)
    for n in range(p.min_slices, p.slices + 1):
        assert at.at_slices(n).memory.total <= at.memory.hbm
    assert any(f"({best:g} near the limit" in note or f"up to {best:g} fits" in note for note in p.notes), p.notes
    with pytest.raises(PlanError):
        plan(dataclasses.replace(request, per_device_batch_size=best + 1 / p.ici_batch_free))


def test_the_train_state_is_what_libtpu_calls_arguments():
    """params + AdamW moments (the estimate's params + optimizer) against libtpu's own "arguments", wherever libtpu
    stated them (its rematerialization line, or the breakdown of a full compile); memory-only rows below the
    rematerialization pass take this figure as their arguments (preview/compile/calibration.py calibrate)."""
    checked = 0
    for row in ROWS:
        stated = []
        if row.get("assigned") and arguments_source(row) == "xla" and "arguments" in row["assigned"]:
            stated.append(row["assigned"]["arguments"])
        for source in (row, row.get("earlier") or {}):
            if (source.get("breakdown") or {}).get("arguments"):
                stated.append(source["breakdown"]["arguments"])
        memory = plan(request_of(row, memory_check=False)).memory
        for arguments in stated:
            assert memory.params + memory.optimizer == pytest.approx(arguments, rel=0.01), row["case"]
            checked += 1
    assert checked >= 3


def test_limits_are_the_ones_xla_compiles_against():
    """core/memory.py's tables against the tiny-compile probe of every generation ("hbm" in the data)."""
    assert set(DATA["hbm"]) == set(XLA_HBM_LIMIT_GIB) == set(RUNTIME_RESERVED_GIB)
    for generation, measured in DATA["hbm"].items():
        assert XLA_HBM_LIMIT_GIB[generation] * GIB == pytest.approx(measured["hbm_limit_bytes"], abs=0.01 * GIB)
        assert RUNTIME_RESERVED_GIB[generation] * GIB == pytest.approx(measured["reserved_bytes"], abs=0.01 * GIB)
    for row in ROWS:      # a refusal states the limit to two decimals ("exceeds available HBM (31.24G)")
        assert row["hbm_bytes"] == pytest.approx(DATA["hbm"][row["generation"]]["hbm_limit_bytes"], abs=0.02 * GIB)


def _row_for(p) -> dict | None:
    for row in ROWS:
        if (row["model"], row["generation"], row["topology"], row["slices"], row["ici_fsdp"], row["ici_tensor"],
                row["dcn_data"], row["dcn_fsdp"], row["per_device_batch_size"], row["max_target_length"],
                row["remat_policy"], tuple(sorted(row["remat_offload"])), row["weight_dtype"]) == (
                p.model.name, p.shape.generation.name, p.shape.topology, p.slices, p.ici_fsdp, p.ici_tensor,
                p.dcn_data, p.dcn_fsdp, p.per_device_batch_size, p.max_target_length, p.remat_policy,
                tuple(sorted(p.remat_offload)), p.weight_dtype):
            return row
    return None


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_every_committed_stacks_plan_was_compiled_and_fits_as_written(stack):
    p = build(load_stack_config(stack, REPO)).workload.plan
    row = _row_for(p)
    assert row is not None, f"no calibration row for stack {stack}'s plan: {p.describe()}"
    assert row["compiled"] and not row["before_remat_bytes"]


def published_request(run) -> PlanRequest:
    model = preset(run.preset)
    return PlanRequest(run.preset, run.generation, run.topology, slices=1,
                       per_device_batch_size=run.per_device_batch_size, weight_dtype=run.weight_dtype,
                       max_target_length=8192, remat_policy="custom", remat_offload=model.remat_offload,
                       attention="flash")


@pytest.mark.parametrize("run", PUBLISHED_RUNS, ids=[f"{r.preset}-{r.pod_type}" for r in PUBLISHED_RUNS])
def test_every_published_trillium_run_is_accepted_at_its_batch_and_flags(run):
    """AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-{8B,70B}-MaxText/v6e-N/README.md (core/recipes.py
    cites each): one slice, its per-device batch and weight dtype, 8192 tokens, flash attention, custom remat with
    the recipe's host offload (our presets' offload sets are the recipes'). Where the shape was compiled here, XLA
    fit it too."""
    chosen = plan(published_request(run))
    assert (chosen.per_device_batch_size, chosen.weight_dtype, chosen.ici_fsdp) == (
        run.per_device_batch_size, run.weight_dtype, chosen.shape.devices)
    row = _row_for(chosen)
    if row is not None:
        assert row["compiled"], row["case"]


def test_published_runs_were_compiled_here():
    compiled = [run for run in PUBLISHED_RUNS if _row_for(plan(published_request(run))) is not None]
    assert len(compiled) >= 3
    assert {"llama3-8b", "llama3-70b"} <= {run.preset for run in compiled}


def test_what_xla_refuses_stays_refused():
    """The seed's 70B (float32 weights, full remat, batch 1 x 4096 on 2 x v6e-16 with FSDP across slices) and the
    prod stacks' 8B at batch 12: XLA ran out of HBM on both (rows llama3-70b-2xv6e-16-seed-fp32 and
    llama3-8b-2xv6e-16-b12)."""
    for case in ("llama3-70b-2xv6e-16-seed-fp32", "llama3-8b-2xv6e-16-b12"):
        row = next(r for r in ROWS if r["case"] == case)
        assert not row["compiled"] and "RESOURCE_EXHAUSTED" in row["reason"]
        with pytest.raises(DoesNotFit):
            plan(request_of(row))
        assert plan(request_of(row, memory_check=False)).memory.verdict == DOES_NOT_FIT


def test_llama3_70b_default_has_a_clear_margin_proved_by_compile():
    """70B on 2 x v6e-32: the planner puts FSDP over both slices at the recipe's batch 2 (64-way FSDP), which XLA
    compiles at 23.9 GiB of 31.25 without recomputing, rather than data parallel across the slices (32-way FSDP),
    which XLA only fits by recomputing and whose estimate (31.87 GiB) is over the limit: refused."""
    chosen = plan(PlanRequest("llama3-70b", "v6e", "4x8", slices=2))
    assert (chosen.dcn_data, chosen.dcn_fsdp, chosen.per_device_batch_size) == (1, 2, 2)
    row = _row_for(chosen)
    assert row is not None and row["compiled"] and not row["before_remat_bytes"]
    assert xla_peak(row) <= 0.8 * row["hbm_bytes"]
    for case in ("llama3-70b-2xv6e-16-fsdp-b1", "llama3-70b-2xv6e-16-fsdp-b2", "llama3-70b-2xv6e-32-b2"):
        row = next(r for r in ROWS if r["case"] == case)
        assert row["compiled"] and row["before_remat_bytes"] > REMAT_THRESHOLD * row["hbm_bytes"]


def test_the_benchmark_says_where_each_rows_train_state_came_from():
    """benchmarks/planner_vs_xla.py names the rows whose train state is XLA's own and those where the planner's
    stands in (memory-only compiles below XLA's rematerialization pass), and the held-out errors."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("planner_vs_xla", REPO / "benchmarks" / "planner_vs_xla.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = bench.table(bench.rows(REPO / "core" / "xla_calibration.json"))
    for row in ROWS:
        source = arguments_source(row)
        section = text.split(f"train state from {source} (")[1].split("\ntrain state from")[0]
        assert row["case"] in section.replace("\n  ", " ").replace(",", " ").split(), (row["case"], source)
    assert "margin rows (ESTIMATE_ERROR set from them): " in text and "qwen3-0.6b-2xv6e-8-b20 -18.2%" in text
    assert "leave-one-out" in text


def test_the_held_out_error_is_reported_as_measured():
    """the margin is measured on compiles it was not fitted to. docs/planner.md reports the held-out
    compiles' worst error (from the data, whatever it is: the model is not changed to meet it) next to the stated
    margin, and every held-out row agrees with the planner's verdict or is named there."""
    compiled = [row for row in HELD if row["compiled"]]
    assert len(HELD) >= 8 and compiled
    worst = max(compiled, key=lambda row: abs(error(row)))
    text = " ".join((REPO / "docs" / "planner.md").read_text().split())
    assert f"worst held-out error: {worst['case']} {error(worst):+.1%}" in text, (worst["case"], error(worst))


def test_the_held_out_rows_include_kinds_no_constant_was_fitted_on():
    """Issue 44 ("honest error"): the held-out compiles measure the model where it was not fitted: Llama 8B and
    70B, 70B on more than one slice count, an untied head at a long sequence across slices, tensor parallelism,
    v5e, and host offload of a tensor set no fitted, margin or constant-setting row offloads."""
    compiled = [row for row in HELD if row["compiled"]]
    assert {"llama3-8b", "llama3-70b"} <= {row["model"] for row in compiled}
    assert len({row["slices"] for row in compiled if row["model"] == "llama3-70b"}) >= 2
    assert any(not preset(row["model"]).tied_embeddings and row["max_target_length"] >= 32768
               and row["slices"] > 1 for row in compiled)
    assert any(row["ici_tensor"] > 1 for row in compiled) and any(row["generation"] == "v5e" for row in compiled)
    fitted_offloads = {frozenset(row["remat_offload"]) for row in ROWS if row["case"] not in HELD_OUT}
    assert any(row["remat_offload"] and frozenset(row["remat_offload"]) not in fitted_offloads for row in compiled)


def test_known_misses_are_held_out_rows():
    """Only a held-out row may be a known miss of the acceptance rule: a fitted row that breaks it is a defect."""
    assert set(KNOWN_MISSES) <= set(HELD_OUT)


def test_no_constant_is_computed_from_a_row_labelled_held_out():
    """A held-out row measures the model; the moment a constant is set from it, it is no longer held out
    (issue: TIED_HEAD_MULTISLICE_ERROR was the maximum of rows still labelled held out). Every constant's rows
    (calibration.CONSTANT_ROWS, from which the tests above compute them) are outside HELD_OUT, and rows_setting
    refuses a constant computed from one."""
    for constant, names in CONSTANT_ROWS.items():
        assert names and not set(names) & set(HELD_OUT), constant
        assert {row["case"] for row in rows_setting(constant, ROWS)} == set(names), constant
    with pytest.raises(ValueError, match="TIED_HEAD_MULTISLICE_ERROR is computed from rows labelled held out"):
        rows_setting("TIED_HEAD_MULTISLICE_ERROR", ROWS, held_out=HELD_OUT + ("qwen3-0.6b-2xv6e-8-b1-s32k",))
    # docs/planner.md and the benchmark say which rows set which constant.
    text = " ".join((REPO / "docs" / "planner.md").read_text().split())
    for constant, names in CONSTANT_ROWS.items():
        assert f"rows that set {constant}: {', '.join(names)}" in text, constant


def test_a_tied_head_on_more_than_one_slice_takes_the_error_measured_there():
    """Where the held-out compiles found the estimate furthest off (a tied output head on more than one slice,
    the logits resharded between slices: no term models it), the planner's error for such a step is the worst
    error of those rows, rounded up; every other step keeps ESTIMATE_ERROR. A larger batch of that shape is
    then near the limit (XLA decides, compileCheck=auto) instead of "fits" on a figure half of XLA's."""
    from core.memory import TIED_HEAD_MULTISLICE_ERROR
    from core.presets import preset

    tied_multislice = rows_setting("TIED_HEAD_MULTISLICE_ERROR", ROWS)
    assert tied_multislice and all(row["compiled"] and row["slices"] > 1 and preset(row["model"]).tied_embeddings
                                   for row in tied_multislice)
    worst = max(abs(error(row)) for row in tied_multislice)
    assert TIED_HEAD_MULTISLICE_ERROR == math.ceil(worst * 100) / 100, (worst, [r["case"] for r in tied_multislice])
    (row,) = [row for row in ROWS if row["case"] == "qwen3-0.6b-2xv6e-8-b1-s32k"]
    assert plan(request_of(row, memory_check=False)).memory.error == TIED_HEAD_MULTISLICE_ERROR
    assert plan(request_of(row, memory_check=False, slices=1, dcn_data=1)).memory.error == ESTIMATE_ERROR
    assert plan(request_of(row, memory_check=False, model="llama3-8b", ici_fsdp=16, topology="4x4")).memory.error \
        == ESTIMATE_ERROR
    # A 48k sequence of that shape: 19 GiB estimated, "fits" at 19 % (under 81 % of the recompute point); at
    # the error measured there it may cross it, so XLA decides.
    longer = plan(request_of(row, memory_check=False, max_target_length=49152)).memory
    assert longer.verdict == WARNS, (longer.total / GIB, longer.verdict)
    assert dataclasses.replace(longer, error=ESTIMATE_ERROR).verdict == "fits"

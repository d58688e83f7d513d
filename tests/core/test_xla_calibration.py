"""The planner's memory estimate (core/memory.py) against XLA's own figures (core/xla_calibration.json).

The data: MaxText steps compiled ahead of time for the real TPU targets on CPU (`python -m preview.compile
--calibrate` regenerates every row; libtpu 0.0.42.1, MaxText 0.2.5). Nothing is compiled here: these tests run
in the default suite and only read the data.

XLA's need for a row is what the step needed before XLA recomputed anything ("rematerialization hbm reduction:
X => Y": X), else its peak (libtpu "Total hbm usage"), else, when it did not fit, what it said it needed ("Used X of
Y hbm"). The planner plans the step as written: a step XLA only fits by recomputing runs slower.

What the data supports (core/memory.py's docstring): within 10 % of XLA where XLA itself says memory decides (it
refused the step, or recomputed tensors to fit it): that is where the planner's accept/refuse matters. Never more
than 10 % below XLA anywhere. Elsewhere XLA spends the HBM it has to spare on its schedule, so its peak is not a
need: the same per-device step (qwen3-0.6b, batch 4, v6e 2x4 slices) peaks at 8.84 GiB on two slices and 11.74 GiB
on one, and no estimate is within 10 % of both. There the estimate is an upper bound, at most 1.6x XLA's peak.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from core.errors import PlanError
from core.memory import ESTIMATE_ERROR, GIB, REMAT_THRESHOLD, RUNTIME_RESERVED_GIB, XLA_HBM_LIMIT_GIB
from core.planner import PlanRequest, plan
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO

DATA = json.loads((REPO / "core" / "xla_calibration.json").read_text())
ROWS = DATA["rows"]
TOLERANCE = 0.10          # core.memory.ESTIMATE_ERROR
SLACK_BOUND = 1.6


def request_of(row: dict, **changes) -> PlanRequest:
    request = PlanRequest(
        model=row["model"], generation=row["generation"], topology=row["topology"], slices=row["slices"],
        ici_fsdp=row["ici_fsdp"], ici_tensor=row["ici_tensor"], dcn_data=row["dcn_data"], dcn_fsdp=row["dcn_fsdp"],
        per_device_batch_size=row["per_device_batch_size"], max_target_length=row["max_target_length"],
        remat_policy=row["remat_policy"], remat_offload=tuple(row["remat_offload"]), weight_dtype=row["weight_dtype"],
        attention=row["attention"])
    return dataclasses.replace(request, **changes)


def xla_need(row: dict) -> int:
    return row["before_remat_bytes"] or row["peak_bytes_per_device"] or row["required_bytes"]


def test_the_data_covers_fits_refusals_and_recomputes():
    assert {row["libtpu"] for row in ROWS} == {"0.0.42.1"} and {row["maxtext"] for row in ROWS} == {"0.2.5"}
    assert any(not row["compiled"] for row in ROWS)
    assert any(row["compiled"] and row["before_remat_bytes"] for row in ROWS)
    assert any(row["ici_tensor"] > 1 for row in ROWS) and {"v5e", "v6e"} <= {row["generation"] for row in ROWS}
    for row in ROWS:
        assert xla_need(row), row["case"]


def under_pressure(row: dict) -> bool:
    """XLA refused the step, or recomputed tensors to fit it."""
    return not row["compiled"] or bool(row["before_remat_bytes"])


def estimated(row: dict) -> int:
    return plan(request_of(row, memory_check=False)).memory.total


@pytest.mark.parametrize("row", ROWS, ids=[row["case"] for row in ROWS])
def test_estimate_is_never_more_than_ten_percent_below_xla(row):
    ratio = estimated(row) / xla_need(row)
    assert ratio >= 1 - TOLERANCE, f"{row['case']}: estimate {ratio:.2f} x XLA's {xla_need(row) / GIB:.2f} GiB"
    assert ratio <= SLACK_BOUND, f"{row['case']}: estimate {ratio:.2f} x XLA's {xla_need(row) / GIB:.2f} GiB"


@pytest.mark.parametrize("row", [r for r in ROWS if under_pressure(r)],
                         ids=[r["case"] for r in ROWS if under_pressure(r)])
def test_estimate_is_within_ten_percent_of_xla_near_the_limit(row):
    ratio = estimated(row) / xla_need(row)
    assert abs(ratio - 1) <= TOLERANCE, f"{row['case']}: estimate {ratio:.2f} x XLA's {xla_need(row) / GIB:.2f} GiB"


def test_rows_near_the_limit_are_most_of_the_decisions():
    assert ESTIMATE_ERROR == TOLERANCE
    assert sum(under_pressure(row) for row in ROWS) >= 4


@pytest.mark.parametrize("row", ROWS, ids=[row["case"] for row in ROWS])
def test_planner_refuses_what_xla_refuses_or_only_fits_by_recomputing(row):
    if row["compiled"] and not row["before_remat_bytes"]:
        return
    with pytest.raises(PlanError, match=r"\(estimated\).*python -m preview.compile"):
        plan(request_of(row))


def test_limits_are_the_ones_xla_compiles_against():
    """core/memory.py's tables against the tiny-compile probe of every generation ("hbm" in the data)."""
    assert set(DATA["hbm"]) == set(XLA_HBM_LIMIT_GIB) == set(RUNTIME_RESERVED_GIB)
    for generation, measured in DATA["hbm"].items():
        assert XLA_HBM_LIMIT_GIB[generation] * GIB == pytest.approx(measured["hbm_limit_bytes"], abs=0.01 * GIB)
        assert RUNTIME_RESERVED_GIB[generation] * GIB == pytest.approx(measured["reserved_bytes"], abs=0.01 * GIB)
    for row in ROWS:
        assert row["hbm_bytes"] == DATA["hbm"][row["generation"]]["hbm_limit_bytes"]


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


def test_llama3_70b_default_has_a_clear_margin_proved_by_compile():
    """70B: on 2 x v6e-32 the planner puts FSDP over both slices at the recipe's batch 2 (64-way FSDP), which XLA
    compiles at 23.9 GiB of 31.25 without recomputing; 32-way FSDP (2 x v6e-16 with FSDP across slices, or
    2 x v6e-32 data parallel) needs more than XLA's 95 % recompute point at batch 2 and at batch 1, so the
    planner refuses 70B on 2 x v6e-16."""
    chosen = plan(PlanRequest("llama3-70b", "v6e", "4x8", slices=2))
    assert (chosen.dcn_data, chosen.dcn_fsdp, chosen.per_device_batch_size) == (1, 2, 2)
    row = _row_for(chosen)
    assert row is not None and row["compiled"] and not row["before_remat_bytes"]
    assert row["peak_bytes_per_device"] <= 0.8 * row["hbm_bytes"]
    with pytest.raises(PlanError, match=r"does not fit on 2 x v6e-16.*\(estimated\)"):
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2))
    for case in ("llama3-70b-2xv6e-16-fsdp-b1", "llama3-70b-2xv6e-16-fsdp-b2", "llama3-70b-2xv6e-32-b2"):
        row = next(r for r in ROWS if r["case"] == case)
        assert row["before_remat_bytes"] > REMAT_THRESHOLD * row["hbm_bytes"]

"""What an interruption costs in TPU chip-minutes (core/interruptions.py), from the save and notice budget."""
from __future__ import annotations

import pytest

from core.interruptions import RESTART_START_S, SMOKE_TEST_S, interruption_costs
from core.planner import PlanRequest, plan
from core.preemption import save_estimate, shutdown_budget
from core.run_time import step_seconds

PROD = plan(PlanRequest(model="llama3-8b", generation="v6e", topology="4x4", slices=2))
CHIPS = 32


def test_a_preemption_saved_at_the_notice_redoes_no_steps():
    budget = shutdown_budget(PROD, spot=True, sees_notice=True, checkpoint_period=50)
    costs = interruption_costs(budget, chips=CHIPS, smoke_test=True)
    restart = RESTART_START_S + budget.save.write_s
    assert costs.preemption_s == pytest.approx(budget.needed_s + restart)
    assert costs.as_dict()["preemption_chip_minutes"] == pytest.approx(CHIPS * (budget.needed_s + restart) / 60,
                                                                       abs=0.1)


def test_a_preemption_the_notice_cannot_hold_pays_the_checkpoint_period_again():
    gated = shutdown_budget(PROD, spot=True, sees_notice=True, checkpoint_period=50, extended_node_budget="old GKE")
    misses = interruption_costs(gated, chips=CHIPS, smoke_test=True)
    restart = RESTART_START_S + gated.save.write_s
    # The pods use what the notice gives them (15 s), the save does not finish, 50 steps are trained again.
    assert misses.preemption_s == pytest.approx(gated.notice_s + restart + 50 * gated.save.step_s)


def test_a_failed_smoke_test_is_paid_once_and_only_where_there_is_one():
    budget = shutdown_budget(PROD, spot=False, sees_notice=True, checkpoint_period=50)
    with_smoke = interruption_costs(budget, chips=CHIPS, smoke_test=True)
    assert with_smoke.smoke_failure_s == RESTART_START_S + SMOKE_TEST_S
    assert any("failed smoke test" in line and "once" in line for line in with_smoke.describe())
    without = interruption_costs(budget, chips=CHIPS, smoke_test=False)
    assert without.smoke_failure_s is None and not any("smoke" in line for line in without.describe())


def test_off_spot_there_is_no_preemption_line():
    costs = interruption_costs(shutdown_budget(PROD, spot=False, sees_notice=True, checkpoint_period=50),
                               chips=CHIPS, smoke_test=True)
    assert not any("Spot preemption" in line for line in costs.describe())
    assert costs.as_dict()["preemption_chip_minutes"] is None
    assert costs.restart_s == pytest.approx(RESTART_START_S + save_estimate(PROD).write_s + 50 * step_seconds(PROD))

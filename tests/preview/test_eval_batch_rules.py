"""Two rules about an eval step's batch, each spelled once and used by every caller:
- the eval batch a MaxText argv loads (aot/runner.py loaded_eval_batch: eval_per_device_batch_size, unset or 0
  meaning per_device_batch_size, MaxText 0.2.5 configs/types.py), read by workloads/compile_check.py eval_target
  (which eval step to compile) and preview/compile/runner.py render (the batch it names);
- the config key that set it (infra/config/plan_rules.py eval_batch_key), named by the config build's refusal
  (plan_rules._eval_refusal) and the offline plan's (preview/cli.py _batch_key, from the step's argv).
Each caller is checked with the rule replaced by a stand-in: a caller that spells the rule again fails here."""
from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace

import pytest

from aot import runner as aot_runner
from core import compile_verdicts
from core.maxtext_memory_keys import with_maxtext_keys
from core.planner import PlanRequest, plan
from infra.config import plan_rules
from preview import cli
from preview.compile import runner as preview_runner
from tests.preview.test_compile import _target
from workloads import compile_check

OWN = plan_rules.EVAL_BATCH_KEY
TRAIN = plan_rules.TRAIN_BATCH_KEY


@pytest.mark.parametrize("keys, loaded", [
    ({"per_device_batch_size": "4", "eval_per_device_batch_size": "2"}, 2.0),
    ({"per_device_batch_size": "4", "eval_per_device_batch_size": "0.5"}, 0.5),
    ({"per_device_batch_size": "4"}, 4.0),                                    # unset: the train batch
    ({"per_device_batch_size": "4", "eval_per_device_batch_size": "0"}, 4.0),   # 0 is unset (types.py)
    ({"per_device_batch_size": "4", "eval_per_device_batch_size": "0.0"}, 4.0),
    ({}, None),                                                               # neither: the base config's
])
def test_the_eval_batch_an_argv_loads_is_maxtexts_rule(keys, loaded):
    assert aot_runner.loaded_eval_batch(keys) == loaded


def _evaluating(eval_batch: str | None = None, train_batch: float = 4):
    request = PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=1, per_device_batch_size=train_batch, evaluates=True)
    if eval_batch is not None:
        request, _ = with_maxtext_keys(request, {"eval_per_device_batch_size": eval_batch})
    return plan(request)


def test_eval_target_compiles_the_eval_step_the_rule_says_the_argv_does_not_load(monkeypatch):
    """eval_target keeps the pods' argv where it already loads the eval batch, else sets the eval key."""
    train = _target(eval_per_device_batch_size="2")
    resized = _evaluating("2")
    assert compile_check.eval_target(train, resized, 2.0).argv == train.argv
    assert "eval_per_device_batch_size=4" in compile_check.eval_target(train, resized, 4.0).argv
    unset = _target(eval_per_device_batch_size="0")        # 0: MaxText loads the train batch, 4
    assert compile_check.eval_target(unset, resized, 4.0).argv == unset.argv
    # Through the one rule: with it answering 4, the argv that loads 2 is kept as it is.
    monkeypatch.setattr(compile_check, "loaded_eval_batch", lambda keys: 4.0)
    assert compile_check.eval_target(train, resized, 4.0).argv == train.argv


def _eval_result(argv: tuple[str, ...], **fields) -> aot_runner.CompileResult:
    return aot_runner.CompileResult(compiled=True, peak_bytes_per_device=None, hbm_bytes=None, topology="v6e 2x4",
                                    num_slices=1, seconds=1.0, reason=None, argv=argv,
                                    step=compile_verdicts.STEP_EVAL, **fields)


def _text(result) -> str:
    out = io.StringIO()
    preview_runner.render(result, out)
    return out.getvalue()


def test_the_report_names_the_eval_batch_the_rule_reads_from_the_argv(monkeypatch):
    argv = ("base.yml", "per_device_batch_size=4", "eval_per_device_batch_size=0")
    assert "eval step (4 per device)" in _text(_eval_result(argv))          # 0: the train batch, not "0"
    assert "eval step (2 per device)" in _text(_eval_result(("base.yml", "per_device_batch_size=4",
                                                             "eval_per_device_batch_size=2")))
    assert "eval step (? per device)" in _text(_eval_result(()))
    monkeypatch.setattr(preview_runner, "loaded_eval_batch", lambda keys: 7.0)
    assert "eval step (7 per device)" in _text(_eval_result(argv))


@pytest.mark.parametrize("own, batch, key, value", [
    (None, 4, TRAIN, 4),       # no eval key: MaxText and Grain evaluate at the train batch
    ("2", 2, OWN, 2),          # the step MaxText compiles at start at the user's smaller eval batch
    ("2", 4, TRAIN, 4),        # Grain's eval step at the train batch, whatever the eval key says
    ("8", 8, OWN, 8),          # a larger eval batch of its own
    ("8", 4, TRAIN, 4),
    ("4", 4, TRAIN, 4),        # the eval key at the train batch: one step, lowered only by perDeviceBatchSize
])
def test_the_key_that_set_an_eval_steps_batch(own, batch, key, value):
    assert plan_rules.eval_batch_key(_evaluating(own), batch) == (key, value)


def test_both_refusals_name_the_key_the_one_rule_names(monkeypatch):
    """The config build's refusal and the offline plan's agree on every eval step the run compiles (the plan's
    from the argv eval_target builds), and both go through eval_batch_key."""
    refused = compile_verdicts.Verdict(compiled=False, shape="s", slices=1, libtpu="0.0.1", maxtext="0.2.5",
                                       error_code="E1000 CompileTimeHbmOom", step=compile_verdicts.STEP_EVAL)
    for own in (None, "2", "8"):
        chosen = _evaluating(own)
        config = SimpleNamespace(workload=SimpleNamespace(plan=chosen))
        train = _target(**({"eval_per_device_batch_size": own} if own else {}))
        for batch in chosen.eval_batches:
            key, value = plan_rules.eval_batch_key(chosen, batch)
            line = plan_rules._eval_refusal(chosen, 1, batch, refused, None)[0]
            assert line.startswith(f"tpu-multislice:{key}={value:g} is refused by XLA in the eval step"), line
            step = compile_check.eval_target(train, chosen, batch)
            assert cli._batch_key(config, _eval_result(step.argv[1:])) == (key, value), (own, batch)
    # The train step is always perDeviceBatchSize's.
    train_step = dataclasses.replace(_eval_result(()), step=compile_verdicts.STEP_TRAIN)
    assert cli._batch_key(config, train_step) == (TRAIN, chosen.per_device_batch_size)

    monkeypatch.setattr(plan_rules, "eval_batch_key", lambda plan_, batch: ("stand.in", 7.0))
    assert plan_rules._eval_refusal(chosen, 1, 8, refused, None)[0].startswith("tpu-multislice:stand.in=7 is")
    assert cli._batch_key(config, _eval_result(step.argv[1:])) == ("stand.in", 7.0)

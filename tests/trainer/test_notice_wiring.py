"""How the trainer hooks into Ray Train 2.60 and MaxText 0.2.5 to save at a notice (trainer/notice.py,
trainer/resize.py, trainer/failures.py), checked against the installed sources without starting Ray.

Sources:
- ray/train/v2/api/data_parallel_trainer.py `_create_default_callbacks`: RunConfig callbacks that are UserCallbacks
  go to UserCallbackHandler (after_report / after_exception only); "all other callbacks" join the controller's
  list, where ControllerCallback hooks are called (ray/train/v2/_internal/execution/controller/controller.py
  `_controller_callbacks`, which also holds the scaling policy).
- maxtext/common/checkpointing.py: `maybe_save_checkpoint` asks the module-level `reached_preemption` and calls the
  module-level `save_checkpoint`, passing `force` on to Orbax.
"""
from __future__ import annotations

import inspect

import pytest

from core.planner import PlanRequest, plan
from trainer import notice
from trainer.entrypoint import run_callbacks

pytest.importorskip("ray.train")


def _default_callbacks(callbacks):
    from ray.train.v2.api.config import RunConfig
    from ray.train.v2.jax import JaxTrainer

    from ray.train.v2.api.config import ScalingConfig

    trainer = JaxTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(name="t", storage_path="/tmp", callbacks=callbacks))
    return trainer._create_default_callbacks()


def test_elastic_run_registers_its_controller_callbacks_and_its_scaling_policy_hears_the_controller():
    from ray.train.v2._internal.callbacks.user_callback import UserCallbackHandler
    from ray.train.v2._internal.execution.callback import ControllerCallback
    from ray.train.v2._internal.execution.controller import controller
    from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy

    from core.maxtext_args import RunSettings

    elastic = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1))
    callbacks = run_callbacks(elastic, RunSettings("r", "gs://b", 100, 10))
    registered = _default_callbacks(callbacks)
    states = [c for c in registered if type(c).__name__ == "ProgressStates"]
    assert len(states) == 1 and isinstance(states[0], ControllerCallback)
    handler = next(c for c in registered if isinstance(c, UserCallbackHandler))
    assert [type(c).__name__ for c in handler._user_callbacks] == ["FailFast"]
    # The scaling policy is the first of the controller's callbacks (after_controller_start creates the notice
    # actor, after_controller_state_update drops a request when the group stops running) and is asked once per
    # loop iteration of a running group.
    source = inspect.getsource(controller.TrainController)
    assert "self._controller_callbacks = (\n            [\n                self._scaling_policy,\n" in source
    assert "make_decision_for_running_worker_group(" in source
    from trainer.resize import save_first_scaling_policy
    from ray.train.v2.api.config import ScalingConfig

    policy = save_first_scaling_policy(ScalingConfig(num_workers=(4, 8), use_tpu=True, topology="4x4",
                                                     accelerator_type="TPU-V6E"), "r")
    assert isinstance(policy, ElasticScalingPolicy) and isinstance(policy, ControllerCallback)
    fixed = run_callbacks(plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2)), RunSettings("r", "gs://b", 100, 10))
    assert [type(c).__name__ for c in fixed] == [type(c).__name__ for c in callbacks] == [
        "FailFast", "ProgressStates", "FailedLaunchCleanup"]
    # Every group the controller starts is handed the clean-up callback (controller.py
    # `_worker_group_callbacks_to_propagate`: the RunConfig callbacks that are WorkerGroupCallbacks).
    from ray.train.v2._internal.execution.callback import WorkerGroupCallback

    assert [type(c).__name__ for c in registered if isinstance(c, WorkerGroupCallback)
            and type(c).__name__ == "FailedLaunchCleanup"] == ["FailedLaunchCleanup"]


def test_maxtext_looks_the_hooked_functions_up_at_call_time():
    from maxtext.common import checkpointing

    source = inspect.getsource(checkpointing.maybe_save_checkpoint)
    assert "save_checkpoint(" in source and "_handle_post_checkpoint_preemption(" in source
    assert "reached_preemption(checkpoint_manager" in inspect.getsource(checkpointing._should_save_checkpoint_at_step)
    assert "reached_preemption(checkpoint_manager" in inspect.getsource(checkpointing._handle_post_checkpoint_preemption)
    assert "force=force" in inspect.getsource(checkpointing.save_checkpoint)


def test_a_notice_forces_maxtexts_save_at_that_step_and_only_there(monkeypatch):
    from maxtext.common import checkpointing

    saves, jax_says = [], {}
    monkeypatch.setattr(checkpointing, "reached_preemption", lambda manager, step: jax_says.get(step, False))
    monkeypatch.setattr(checkpointing, "save_checkpoint",
                        lambda manager, step, state, config=None, data_iterator=None, force=False:
                        saves.append((step, force)))
    asked = []

    def poll(step):
        asked.append(step)
        return "preemption" if step == 7 else None

    watch = notice.NoticeWatch(poll)
    notice.install(watch)
    for step in (5, 6, 7):
        for _ in range(3):                        # MaxText asks several times per step: one poll per step
            checkpointing.reached_preemption(None, step)
        checkpointing.save_checkpoint(None, step, {})
    assert asked == [5, 6, 7]
    assert saves == [(5, False), (6, False), (7, True)]
    assert watch.notice_step == 7 and watch.stopped


def test_jax_sigterm_notice_is_kept_too(monkeypatch):
    from maxtext.common import checkpointing

    monkeypatch.setattr(checkpointing, "reached_preemption", lambda manager, step: step == 4)
    monkeypatch.setattr(checkpointing, "save_checkpoint", lambda *a, **k: None)
    watch = notice.NoticeWatch(lambda step: None)
    notice.install(watch)
    assert [checkpointing.reached_preemption(None, s) for s in (3, 4)] == [False, True]
    assert watch.notice_step == 4 and "SIGTERM" in watch.reason


def test_a_run_without_autocheckpoint_is_refused():
    with pytest.raises(ValueError, match="enable_autocheckpoint=true"):
        notice.require_autocheckpoint(["enable_checkpointing=true"])

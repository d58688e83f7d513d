"""Elastic growth without lost steps: the workers save a checkpoint before Ray Train re-forms a bigger group.

Ray 2.60's elastic scaling policy decides to resize a running group when more workers fit
(ray/train/v2/_internal/execution/scaling_policy/elastic.py `make_decision_for_running_worker_group`); the
controller then kills the group and starts the new one (controller.py `_execute_resize_decision`: "Standard: full
restart") without telling the workers: every step since the last periodic checkpoint is trained again. Before it
kills the group the controller calls its callbacks' `before_controller_execute_resize_decision` hook
(ray/train/v2/_internal/execution/callback.py, ControllerCallback; a RunConfig callback that is also a
ControllerCallback gets it, controller.py `_controller_callbacks`). `SaveBeforeResize` uses that hook: it raises a
flag in a small named actor and waits until rank 0 says the group has saved; the workers read the flag once per
step (trainer.notice: rank 0 reads, a broadcast makes every worker stop at the same step), save there and stop.
"""
from __future__ import annotations

import time

NAMESPACE = "tpu-multislice-trainer"
# How long the controller waits for the save before re-forming anyway (the steps since the last periodic
# checkpoint are then trained again, as without this). A step plus a save of the largest preset fits well within.
DEFAULT_SAVE_TIMEOUT_S = 600.0


def notice_actor_name(run_name: str) -> str:
    return f"scale-up-notice-{run_name}"


class ScaleUpNotice:
    """State shared by the controller's callback and rank 0 (a Ray actor, num_cpus=0)."""

    def __init__(self) -> None:
        self.requested = False
        self.saved_step: int | None = None

    def request(self) -> None:
        self.requested, self.saved_step = True, None

    def is_requested(self) -> bool:
        return self.requested

    def mark_saved(self, step: int) -> None:
        self.saved_step = step

    def saved(self) -> int | None:
        return self.saved_step

    def clear(self) -> None:
        self.requested, self.saved_step = False, None


def notice_actor(run_name: str, create: bool = False):
    import ray

    if create:
        return ray.remote(num_cpus=0)(ScaleUpNotice).options(
            name=notice_actor_name(run_name), namespace=NAMESPACE, get_if_exists=True).remote()
    return ray.get_actor(notice_actor_name(run_name), namespace=NAMESPACE)


def save_before_resize_callback(run_name: str, timeout_s: float = DEFAULT_SAVE_TIMEOUT_S):
    """The controller-side callback (module docstring). Only a resize of a running group waits: the first
    start and a restart after a failure have no group to save."""
    from ray.train.v2._internal.execution.callback import ControllerCallback

    # Not a UserCallback: Ray hands those to a handler that only forwards after_report/after_exception; other
    # RayTrainCallbacks in RunConfig.callbacks join the controller's own (ray/train/v2/api/data_parallel_trainer.py
    # `_create_default_callbacks`: "Append all other callbacks to the full list").
    class SaveBeforeResize(ControllerCallback):
        def __init__(self) -> None:
            self._actor = None
            self._running_group_resizes = False

        def after_controller_start(self, train_run_context) -> None:
            self._actor = notice_actor(run_name, create=True)

        def after_controller_state_update(self, previous_state, current_state) -> None:
            if type(current_state).__name__ == "ResizingState":
                self._running_group_resizes = type(previous_state).__name__ == "RunningState"

        def before_controller_execute_resize_decision(self, resize_decision) -> None:
            import ray

            if not self._running_group_resizes or self._actor is None:
                return
            self._running_group_resizes = False
            ray.get(self._actor.request.remote())
            started = time.monotonic()
            step = None
            while time.monotonic() - started < timeout_s:
                step = ray.get(self._actor.saved.remote())
                if step is not None:
                    break
                time.sleep(0.5)
            ray.get(self._actor.clear.remote())
            print(f"trainer: resize to {resize_decision.num_workers} workers after "
                  + (f"a checkpoint at step {step}" if step is not None else
                     f"waiting {timeout_s:.0f}s for a checkpoint that did not come"), flush=True)

    return SaveBeforeResize()

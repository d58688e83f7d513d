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

The actor lives on the controller's node, never on a TPU host: Ray places an actor that asks for no resources on
any node it likes, and an actor on a slice's host dies with that slice ("The actor died because its node has
died") exactly when elasticity should carry the run. Ray Train pins its own controller to the driver's node
(ray/train/v2/api/data_parallel_trainer.py `_initialize_and_run_controller`), which on KubeRay is the head pod;
`notice_actor` pins the notice actor to the node of whoever creates it, the controller's callback, and Ray
restarts it there if its process dies (max_restarts=-1; the flag it held is lost, which only costs a save). A lost
or unreachable actor still never fails a step: the workers' poll (`ScaleUpPoll`) reads "no scale-up" and looks the
actor up again next step, and the controller resizes without the save if it cannot reach it. (A dead named actor
keeps its name while its creator lives — seen on Ray 2.60 — so it cannot be recreated under the same name; pinned
to the controller's node it only dies for good with that node, and the run with it.)
"""
from __future__ import annotations

import time

from trainer.head_actors import pinned_actor

# Longest a worker's per-step poll waits for the actor's answer (a same-node call takes milliseconds): past it the
# step goes on as "no scale-up", so a dead or unreachable actor costs a step at most this, never the run.
POLL_TIMEOUT_S = 10.0
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
    """The run's notice actor. `create`: make it (or take the live one) on this process's node, hard-pinned
    (module docstring); restarted in place if its process dies. Otherwise look it up (ValueError if absent)."""
    return pinned_actor(ScaleUpNotice, notice_actor_name(run_name), create)


class ScaleUpPoll:
    """Rank 0's per-step question "is a scale-up pending?" (trainer.notice.ray_poll). Any failure to reach the
    actor — not created yet, dead with its node, restarting, slow — answers False and drops the handle, so the next
    step looks the actor up again by name: the run trains on at its size instead of failing."""

    def __init__(self, run_name: str, timeout_s: float = POLL_TIMEOUT_S) -> None:
        self.run_name, self.timeout_s = run_name, timeout_s
        self._actor = None
        self.misses = 0

    def __call__(self) -> bool:
        import ray
        from ray.exceptions import RayError

        try:
            if self._actor is None:
                self._actor = notice_actor(self.run_name)
            return bool(ray.get(self._actor.is_requested.remote(), timeout=self.timeout_s))
        except (ValueError, RayError) as err:      # get_actor: ValueError when absent; RayActorError, timeouts
            self._actor = None
            self.misses += 1
            if self.misses == 1:
                print(f"trainer: scale-up notice actor unreachable ({type(err).__name__}); training on at this "
                      "size, asking again next step", flush=True)
            return False


def mark_saved(run_name: str, step: int) -> None:
    """Rank 0 tells the controller the group saved at `step`. If the actor is unreachable the controller waits
    out its timeout and resizes anyway (the checkpoint is on disk either way): nothing to fail for."""
    import ray
    from ray.exceptions import RayError

    try:
        ray.get(notice_actor(run_name).mark_saved.remote(step), timeout=POLL_TIMEOUT_S)
    except (ValueError, RayError) as err:
        print(f"trainer: could not tell the controller about the save at step {step} ({type(err).__name__})",
              flush=True)


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
            from ray.exceptions import RayError

            if not self._running_group_resizes or self._actor is None:
                return
            self._running_group_resizes = False
            try:
                ray.get(self._actor.request.remote(), timeout=POLL_TIMEOUT_S)
                step = self._wait_for_save()
                ray.get(self._actor.clear.remote(), timeout=POLL_TIMEOUT_S)
            except RayError as err:
                # Resizing without the save costs the steps since the last checkpoint; failing would cost the run.
                print(f"trainer: resize to {resize_decision.num_workers} workers without a save at the notice: "
                      f"the notice actor is unreachable ({type(err).__name__})", flush=True)
                return
            print(f"trainer: resize to {resize_decision.num_workers} workers after "
                  + (f"a checkpoint at step {step}" if step is not None else
                     f"waiting {timeout_s:.0f}s for a checkpoint that did not come"), flush=True)

        def _wait_for_save(self) -> int | None:
            import ray

            started = time.monotonic()
            while time.monotonic() - started < timeout_s:
                step = ray.get(self._actor.saved.remote(), timeout=POLL_TIMEOUT_S)
                if step is not None:
                    return step
                time.sleep(0.5)
            return None

    return SaveBeforeResize()

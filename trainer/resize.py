"""Elastic growth without lost steps: the workers save a checkpoint before Ray Train re-forms a bigger group.

Ray 2.60's elastic scaling policy decides to resize a running group when more workers fit
(ray/train/v2/_internal/execution/scaling_policy/elastic.py `make_decision_for_running_worker_group`); the
controller then kills the group and starts the new one (controller.py `_execute_resize_decision`: "Standard: full
restart") without telling the workers: every step since the last periodic checkpoint is trained again.
`save_first_scaling_policy` is that policy with one change: when it would resize a running group, it first raises
a flag in a small named actor and answers "no change" (NoopDecision) until rank 0 says the group has saved (or
the wait times out), then asks Ray again and gives its decision of that moment: the slices that made Ray want
to resize may have gone while the group saved (a decision minutes old is not acted on). Ray's policy decides at
most once per `elastic_resize_monitor_interval_s` (elastic.py `_latest_monitor_time`), so the question after the
save is asked with that pause lifted. A group that saved has stopped at its notice step: if Ray now sees no
change, it is re-formed at its own size (from the checkpoint it just wrote) rather than left waiting. The workers read the flag once per step (trainer.notice: rank 0
reads, a broadcast makes every worker stop at the same step), save there and wait to be replaced.

The controller's loop is never blocked: the policy is asked once per loop iteration and only looks at an answer
that has already arrived (`ray.wait(timeout=0)`), so the controller keeps polling the workers meanwhile (a
failure, a preemption or the run's end during the wait are handled as usual). A request is good for one wait:
it expires on the actor after the wait's timeout (of training time: an eval pass the group is in, which takes
no training step until it ends, pauses the wait, ScaleUpNotice), and the policy clears it (without waiting for the answer; one
caller's calls to an actor run in order) when it resizes, gives up, or the group stops running. A stale request
cannot make a later group save and wait.

The actor lives on the controller's node, never on a TPU host: Ray places an actor that asks for no resources on
any node it likes, and an actor on a slice's host dies with that slice ("The actor died because its node has
died") exactly when elasticity should carry the run. Ray Train pins its own controller to the driver's node
(ray/train/v2/api/data_parallel_trainer.py `_initialize_and_run_controller`), which on KubeRay is the head pod;
`notice_actor` pins the notice actor to the node of whoever creates it, the scaling policy in the controller, and
Ray restarts it there if its process dies (max_restarts=-1; the flag it held is lost, which only costs a save). A
lost or unreachable actor still never fails a step: the workers' poll (`ScaleUpPoll`) reads "no scale-up" and
looks the actor up again next step, and the controller resizes without the save if it cannot reach it. (A dead
named actor keeps its name while its creator lives — seen on Ray 2.60 — so it cannot be recreated under the same
name; pinned to the controller's node it only dies for good with that node, and the run with it.)
"""
from __future__ import annotations

import time

from core.run_bounds import STALL_FLOOR_S, STALL_STEPS
from trainer.head_actors import pinned_actor

# Longest a worker's per-step poll waits for the actor's answer (a same-node call takes milliseconds): past it the
# step goes on as "no scale-up", so a dead or unreachable actor costs a step at most this, never the run.
POLL_TIMEOUT_S = 10.0
# What separates the save's timeout from the stall limit besides the step in flight when the request came: the
# controller's loop and the watchdog's poll (trainer/watchdog.py POLL_S), each at most this.
SAVE_TIMEOUT_MARGIN_S = 20.0


def save_timeout_s(stall_s: float) -> float:
    """The save-first wait, strictly below the stall limit `stall_s` so the watchdog never ends a group that is
    saving for a resize (the group reports no step while it saves and waits). The stall limit is STALL_STEPS steps
    at MIN_MFU plus a save (core/run_bounds.py limits_for); the request comes at most one step after the group's
    last report, so the wait gets the rest less one step's share and the margin (at most that share again, for a
    stall limit given short on the command line): still a step and a save (what the group needs) on every
    plan."""
    share = stall_s / STALL_STEPS
    return stall_s - share - min(SAVE_TIMEOUT_MARGIN_S, share)


# How long the controller waits for the save before re-forming anyway (the steps since the last periodic
# checkpoint are then trained again, as without this), at the smallest stall limit.
DEFAULT_SAVE_TIMEOUT_S = save_timeout_s(STALL_FLOOR_S)


def notice_actor_name(run_name: str) -> str:
    return f"scale-up-notice-{run_name}"


class ScaleUpNotice:
    """State shared by the controller's scaling policy and rank 0 (a Ray actor, num_cpus=0). Times are this
    process's monotonic clock.

    The group can only save at a training step: rank 0 reads the request once per step, and an eval pass takes no
    training step until it ends (MaxText runs the whole pass between two steps). So the time the group spends
    evaluating after a request is not held against the request's wait: rank 0 says when a pass begins
    (`eval_began`), its next question (`is_requested`, asked once per training step) says it trains again, and
    the request's expiry and the policy's timeout (`answer`: the eval time since the request) move on by the
    pass. Without this a scale-up decided during a long eval pass re-formed the group without its save (the
    steps since the last checkpoint trained again)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.requested_until = 0.0
        self.saved_step: int | None = None
        self.eval_since: float | None = None    # the running group's eval pass: its start, or the request's
        self.evaluated_s = 0.0                  # eval time since the request, of passes that ended

    def request(self, ttl_s: float) -> None:
        # Good for one wait of the controller: past `ttl_s` of training time nobody waits for this save any more.
        now = self.clock()
        self.requested_until, self.saved_step, self.evaluated_s = now + ttl_s, None, 0.0
        if self.eval_since is not None:
            self.eval_since = now               # a pass in progress counts from the request on

    def eval_began(self) -> None:
        if self.eval_since is None:
            self.eval_since = self.clock()

    def _training(self) -> None:
        if self.eval_since is not None:
            paused = self.clock() - self.eval_since
            self.requested_until += paused
            self.evaluated_s += paused
            self.eval_since = None

    def is_requested(self) -> bool:
        """Rank 0's question at a training step (so any eval pass is over)."""
        self._training()
        return self.clock() < self.requested_until

    def mark_saved(self, step: int) -> None:
        self.saved_step = step

    def answer(self) -> tuple[int | None, float, bool]:
        """The step saved (or None), how long the group has evaluated since the request (the wait's pause), and
        whether it evaluates now."""
        evaluating = self.eval_since is not None
        so_far = self.clock() - self.eval_since if evaluating else 0.0
        return self.saved_step, self.evaluated_s + so_far, evaluating

    def clear(self) -> None:
        """No request; the group it was for is being replaced, so neither is its eval pass."""
        self.requested_until, self.saved_step, self.eval_since, self.evaluated_s = 0.0, None, None, 0.0


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

    def eval_began(self) -> None:
        """Rank 0 at the start of an eval pass (ScaleUpNotice): not waited for, never raises."""
        from ray.exceptions import RayError

        try:
            if self._actor is None:
                self._actor = notice_actor(self.run_name)
            self._actor.eval_began.remote()
        except (ValueError, RayError):
            self._actor = None

    def __call__(self) -> bool:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            if self._actor is None:
                self._actor = notice_actor(self.run_name)
            return bool(ray.get(self._actor.is_requested.remote(), timeout=self.timeout_s))
        except GetTimeoutError:
            # A slow answer (GetTimeoutError is a RayError, ray/exceptions.py: caught first): the actor is alive,
            # keep its handle. A request missed now is still there next step until it expires.
            self.misses += 1
            return False
        except (ValueError, RayError) as err:      # get_actor: ValueError when absent; RayActorError
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


def save_first_scaling_policy(scaling_config, run_name: str, timeout_s: float = DEFAULT_SAVE_TIMEOUT_S,
                              clock=time.monotonic):
    """Ray's elastic scaling policy that asks the running group to save before it is re-formed (module
    docstring). Only a resize of a running group waits: the first start and a restart after a failure have no
    group to save."""
    import ray
    from ray.exceptions import RayError
    from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision
    from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy
    # States by class, not by name (a renamed state fails this import at start, not a comparison silently).
    from ray.train.v2._internal.execution.controller.state import RunningState, ResizingState, SchedulingState

    class SaveFirstScaling(ElasticScalingPolicy):
        def __init__(self, config) -> None:
            super().__init__(config)
            self._actor = None
            # (Ray's decision, when the save was asked for, the pending `answer`, when that was asked)
            self._pending = None
            self._paused_s = 0.0        # the group's eval time since the request, from the newest answer

        def after_controller_start(self, train_run_context) -> None:
            super().after_controller_start(train_run_context)
            self._actor = notice_actor(run_name, create=True)

        def after_controller_state_update(self, previous_state, current_state) -> None:
            super().after_controller_state_update(previous_state, current_state)
            left = not isinstance(current_state, (RunningState, ResizingState, SchedulingState))
            if self._pending is not None and left:
                self._pending = None      # the group failed or ended: nobody will be re-formed after a save
                self._clear()
            elif isinstance(previous_state, RunningState) and not isinstance(current_state, RunningState):
                self._clear()             # the group that ran is gone, and an eval pass it was in with it

        def make_decision_for_running_worker_group(self, worker_group_state, worker_group_status):
            if self._pending is not None:
                decision, saved = self._follow_save()
                if not isinstance(decision, ResizeDecision):
                    return decision
                return self._ask_again(decision, saved, worker_group_state, worker_group_status)
            decision = super().make_decision_for_running_worker_group(worker_group_state, worker_group_status)
            if not isinstance(decision, ResizeDecision) or self._actor is None:
                return decision
            try:
                self._actor.request.remote(timeout_s)
                asked_at = clock()
                self._pending = (decision, asked_at, self._actor.answer.remote(), asked_at)
                self._paused_s = 0.0
            except RayError as err:
                return self._without_save(decision, err)
            print(f"trainer: resize to {decision.num_workers} workers: asked the group to save first", flush=True)
            return NoopDecision()

        def _ask_again(self, asked, saved, worker_group_state, worker_group_status):
            """Ray's decision now, its once-per-interval pause lifted (module docstring); a group that saved and
            stopped is re-formed at its size when Ray sees no change."""
            if hasattr(self, "_latest_monitor_time"):
                self._latest_monitor_time = float("-inf")
            fresh = super().make_decision_for_running_worker_group(worker_group_state, worker_group_status)
            if isinstance(fresh, ResizeDecision):
                print(f"trainer: after the save Ray's decision is a resize to {fresh.num_workers} workers",
                      flush=True)
                return fresh
            if saved is None:
                print("trainer: after the wait Ray's decision is to keep the group as it is", flush=True)
                return fresh
            size = worker_group_state.num_workers
            print(f"trainer: after the save Ray's decision is to keep the group as it is: the group stopped at "
                  f"its save, re-formed at {size} workers", flush=True)
            return ResizeDecision(num_workers=size, resources_per_worker=asked.resources_per_worker)

        def _follow_save(self):
            decision, asked_at, answer, answer_asked_at = self._pending
            step = None
            try:
                if ray.wait([answer], timeout=0)[0]:
                    step, evaluated_s, evaluating = ray.get(answer, timeout=0)
                    # The answer is as old as its question: a pass under way then is taken to go on since, so a
                    # late answer can only make the wait longer, never end it early.
                    self._paused_s = evaluated_s + (clock() - answer_asked_at if evaluating else 0.0)
                    if step is None:
                        self._pending = (decision, asked_at, self._actor.answer.remote(), clock())
            except RayError as err:
                self._pending = None
                return self._without_save(decision, err), None
            # The group's eval time since the request is no wait for its save (ScaleUpNotice).
            if step is None and clock() - asked_at - self._paused_s < timeout_s:
                return NoopDecision(), None
            self._pending = None
            self._clear()
            print(f"trainer: the resize to {decision.num_workers} workers asked for "
                  + (f"has a checkpoint at step {step}" if step is not None else
                     f"waited {timeout_s:.0f}s for a checkpoint that did not come"), flush=True)
            return decision, step

        def _without_save(self, decision, err: BaseException):
            # Resizing without the save costs the steps since the last checkpoint; failing would cost the run.
            print(f"trainer: resize to {decision.num_workers} workers without a save at the notice: the notice "
                  f"actor is unreachable ({type(err).__name__})", flush=True)
            self._clear()
            return decision

        def _clear(self) -> None:
            try:
                if self._actor is not None:
                    self._actor.clear.remote()          # not waited for: the controller's loop goes on
            except RayError:
                pass                                    # the request expires on its own (ScaleUpNotice.request)

    return SaveFirstScaling(scaling_config)

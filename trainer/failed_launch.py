"""A worker group whose launch failed is shut down before the next group starts, so its placement group does not
hold the slices the next group needs.

Ray Train 2.60 starts a group in ray/train/v2/_internal/execution/worker_group/worker_group.py `_start_impl`:
placement group, worker actors, train context, then the group's state is built, and only then, outside the
`except RayActorError` that turns earlier deaths into a retryable start-up failure, `ray.get` launches the
training function on every worker. When a worker dies in that launch (a host reclaimed while the group starts),
`_start` skips its clean-up because the state is already built (`if not self.has_started()`), and the
controller never receives the group (controller.py `_start_worker_group` assigns `self._worker_group` only from
a `create` that returned): nobody shuts it down. Its placement group keeps every bundle it reserved, on the
surviving hosts and, once the lost hosts come back, on theirs too. Every later start of any size then waits for
resources that are reserved and unused, times out after 60 s (WorkerGroupStartupTimeoutError) and is
rescheduled, for the rest of the run (seen in the local fail-slice run: 48 timeouts in a row on the minimum after
a loss while a 2-slice group started; the run only ended at its test's deadline).

`cleanup_callback()` is a Ray Train worker-group callback (the controller hands it every group it starts,
controller.py `_worker_group_callbacks_to_propagate`): it remembers a group from the end of its start
(`after_worker_group_start`, just before the launch) until its training has launched
(`after_worker_group_training_start`); a group still remembered when the next start begins
(`before_worker_group_start`, before that start reserves anything) is the leaked one, and it is shut down the
way the controller shuts down any group (`WorkerGroup.shutdown`: the workers, the synchronization actor and the
placement group).
"""
from __future__ import annotations

from core.cli_errors import fit_columns


def cleanup_callback():
    """A Ray Train WorkerGroupCallback that shuts down a group whose training launch failed (module docstring)."""
    from ray.train.v2._internal.execution.callback import WorkerGroupCallback

    class FailedLaunchCleanup(WorkerGroupCallback):
        def __init__(self) -> None:
            self._launching = None      # the group between the end of its start and its launched training

        def after_worker_group_start(self, worker_group) -> None:
            self._launching = worker_group

        def after_worker_group_training_start(self, worker_group) -> None:
            self._launching = None

        def before_worker_group_start(self, worker_group_context) -> None:
            leaked, self._launching = self._launching, None
            if leaked is None or not leaked.has_started():
                return
            print(fit_columns("trainer: shutting down the worker group whose launch failed, so its placement "
                              "group frees what the next group needs (trainer/failed_launch.py)"), flush=True)
            try:
                leaked.shutdown()
            except Exception as err:    # the next start then times out as before: never worse than no clean-up
                print(fit_columns(f"trainer: the failed group's shutdown raised {type(err).__name__}: {err}"),
                      flush=True)

    return FailedLaunchCleanup()

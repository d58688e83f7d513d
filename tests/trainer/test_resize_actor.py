"""The scale-up notice actor (trainer/resize.py) on a real multi-node Ray cluster: it sits on the controller's
node, and losing it never fails a worker's step.

What happens without this: an actor that asks for no resources goes wherever Ray's hybrid scheduling policy puts
it, which spills to other nodes once the local node is busy (ray/_raylet scheduling, "hybrid" policy: local node
first, then the others). On a TPU host it dies with the slice, and the next per-step `ray.get` raises
ActorDiedError ("The actor died because its node has died") in rank 0: the run fails exactly when elasticity should
carry it. Ray Train pins its own controller to the driver's node the same way (ray/train/v2/api/
data_parallel_trainer.py `_initialize_and_run_controller`: label_selector on the driver's node id).

No assertion here depends on how fast a loaded machine answers (issue 43 item 12: on a loaded 2-core CI a 5 s
poll timed out where the request had been made): a poll that must see an answer waits ANSWER_S, far beyond any
answer, and what the policy decides over time runs on an injected clock. Checked with a CPU-bound process on
each core beside this file.
"""
from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from trainer import head_actors, resize  # noqa: E402

# How long a poll that must be answered may wait: a bound for a broken actor, never a measure of speed.
ANSWER_S = 120.0


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # A head like the RayJob's (the driver and the controller, one CPU) and a "TPU host" with room to spare.
    # The GCS declares a silent node dead after 3 missed 0.5 s health checks instead of Ray's default ~30 s.
    fast_health_checks = {"health_check_period_ms": 500, "health_check_timeout_ms": 500,
                          "health_check_failure_threshold": 3}
    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": fast_health_checks})
    tpu_host = local.add_node(num_cpus=2, resources={"TPU": 4})
    ray.init(address=local.address, logging_level="ERROR")
    local.wait_for_nodes()
    head = ray.get_runtime_context().get_node_id()
    assert head != tpu_host.node_id
    yield local, head, tpu_host
    ray.shutdown()
    local.shutdown()


def _node_of(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


@ray.remote(num_cpus=1)
class BusyHead:
    """Holds the head's CPU, as the driver's job does, so the scheduler spreads 0-CPU actors elsewhere."""

    def ready(self) -> bool:
        return True


def test_notice_actors_are_created_on_the_creators_node_even_when_it_is_busy(cluster):
    _, head, _ = cluster
    busy = BusyHead.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    assert ray.get(busy.ready.remote())
    # Unpinned, some of these land on the other node (seen: 2 of 6); pinned, none may.
    actors = [resize.notice_actor(f"placement-{i}", create=True) for i in range(8)]
    assert [_node_of(a) == head for a in actors] == [True] * 8
    for actor in actors:
        ray.kill(actor)
    ray.kill(busy)


def test_poll_survives_the_death_of_the_actors_node(cluster):
    local, _, _ = cluster
    run = "node-death"
    doomed_host = local.add_node(num_cpus=1, resources={"TPU": 4})
    local.wait_for_nodes()
    # Where an unpinned actor could end up: on a TPU host (put there on purpose).
    stray = ray.remote(num_cpus=0)(resize.ScaleUpNotice).options(
        name=resize.notice_actor_name(run), namespace=head_actors.NAMESPACE,
        scheduling_strategy=NodeAffinitySchedulingStrategy(doomed_host.node_id, soft=False)).remote()
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    assert poll() is False
    ray.get(stray.request.remote(600))
    assert poll() is True
    local.remove_node(doomed_host, allow_graceful=False)        # the slice is lost with the actor on it
    # Until the GCS declares the node dead the actor is "unavailable", then dead. Every poll meanwhile is a step:
    # it must answer, never raise. What the poll used to do, a bare ray.get, raises ActorDiedError in the end.
    deadline = time.monotonic() + ANSWER_S
    while True:
        assert poll() in (True, False)
        try:
            ray.get(stray.is_requested.remote(), timeout=ANSWER_S)
        except ray.exceptions.ActorDiedError:
            break
        except ray.exceptions.RayError:
            pass
        assert time.monotonic() < deadline, "the GCS never declared the actor dead"
        time.sleep(0.5)
    for _ in range(3):
        assert poll() is False                  # looked up again by name each step, answered "no scale-up"
    assert poll.misses >= 3


# What Ray's own elastic decision says next (it asks the cluster's autoscaling coordinator): a resize to this
# many workers, or None for "no change" (the slices went away meanwhile).
RAY_SAYS: list = []


def _ray_would_resize(self, worker_group_state, worker_group_status):
    """Stands in for Ray's elastic decision: a running group of 4 workers, 8 fit (unless RAY_SAYS says else)."""
    from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision

    workers = RAY_SAYS.pop(0) if RAY_SAYS else 8
    if workers == "paused":
        # Ray's own pause between decisions (elastic.py: a decision at most once per
        # elastic_resize_monitor_interval_s since _latest_monitor_time): only a lifted pause gets an answer.
        workers = 8 if self._latest_monitor_time == float("-inf") else None
    self._latest_monitor_time = time.monotonic()          # as Ray's policy records each decision it makes
    return NoopDecision() if workers is None else ResizeDecision(num_workers=workers,
                                                                 resources_per_worker={"TPU": 4})


@pytest.fixture
def policy_for(monkeypatch):
    """The trainer's scaling policy for a run, with its actor created as after_controller_start creates it."""
    from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy
    from ray.train.v2.api.config import ScalingConfig

    monkeypatch.setattr(ElasticScalingPolicy, "make_decision_for_running_worker_group", _ray_would_resize)

    def make(run: str, timeout_s: float, clock=time.monotonic):
        policy = resize.save_first_scaling_policy(ScalingConfig(num_workers=(4, 8), use_tpu=True, topology="2x4",
                                                                accelerator_type="TPU-V6E"), run, timeout_s, clock)
        policy._actor = resize.notice_actor(run, create=True)
        return policy

    return make


def _state(name: str):
    from ray.train.v2._internal.execution.controller import state

    cls = getattr(state, name)
    return cls.__new__(cls)


def _decide_until(policy, kind: str, within_s: float = ANSWER_S):
    """Ask as the controller's loop does (once per iteration) until the decision is of `kind`; `within_s` only
    bounds a broken policy."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        decision = policy.make_decision_for_running_worker_group(None, None)
        if type(decision).__name__ == kind:
            return decision
        time.sleep(0.05)
    raise AssertionError(f"no {kind} within {within_s} s")


def _settled(actor) -> None:
    """Wait until every call this process sent `actor` so far has run (one caller's calls run in order)."""
    ray.get(actor.is_requested.remote(), timeout=ANSWER_S)


def test_the_controller_asks_for_a_save_without_blocking_and_resizes_once_it_is_there(cluster, policy_for):
    """Each call returns at once (the controller's loop keeps polling the workers): "no change" until rank 0
    marks the save, then Ray's decision; the request is cleared after it."""
    run = "save-first"
    now = [0.0]
    policy = policy_for(run, timeout_s=600, clock=lambda: now[0])
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    for _ in range(20):                         # the old hook slept in the loop for up to 600 s
        assert type(policy.make_decision_for_running_worker_group(None, None)).__name__ == "NoopDecision"
    _settled(policy._actor)
    assert poll() is True                       # rank 0 hears it at its next step
    resize.mark_saved(run, 12)
    decision = _decide_until(policy, "ResizeDecision")
    assert decision.num_workers == 8
    _settled(policy._actor)                     # the clear is sent without waiting for it
    assert poll() is False


def test_after_the_save_the_controller_asks_ray_again_and_acts_on_its_answer_of_that_moment(cluster, policy_for,
                                                                                            capsys):
    """Issue 43 item 10: Ray wanted 8 workers when the save was asked for; while the group saved, the slices went
    (Ray now says no change). Acting on the decision of the request (up to the save's timeout old) would re-form
    a group for workers that are not there; the group, stopped at its save, is re-formed at its own size."""
    from types import SimpleNamespace

    run = "ask-again"
    group = SimpleNamespace(num_workers=4, start_time=0.0)
    policy = policy_for(run, timeout_s=600, clock=lambda: 0.0)
    RAY_SAYS[:] = [8]
    assert type(policy.make_decision_for_running_worker_group(group, None)).__name__ == "NoopDecision"
    resize.mark_saved(run, 30)
    RAY_SAYS[:] = [None] * 10_000               # from now on Ray sees no room to grow
    try:
        deadline = time.monotonic() + ANSWER_S  # bounds a broken policy only
        while policy._pending is not None:      # until the controller sees the save
            decision = policy.make_decision_for_running_worker_group(group, None)
            assert time.monotonic() < deadline, "the save was never seen"
        assert type(decision).__name__ == "ResizeDecision" and decision.num_workers == 4   # not the old 8
        assert "re-formed at 4 workers" in capsys.readouterr().out
    finally:
        RAY_SAYS.clear()


def test_the_question_after_the_save_lifts_ray_s_pause_between_decisions(cluster, policy_for):
    """Ray's policy answers at most once per elastic_resize_monitor_interval_s; asked right after its last
    answer it says "no change" whatever the cluster holds (seen in the local elastic life run: the grow never
    came). The question after the save lifts that pause."""
    from types import SimpleNamespace

    run = "pause-lifted"
    group = SimpleNamespace(num_workers=4, start_time=0.0)
    policy = policy_for(run, timeout_s=600, clock=lambda: 0.0)
    RAY_SAYS[:] = [8]
    policy.make_decision_for_running_worker_group(group, None)
    resize.mark_saved(run, 30)
    RAY_SAYS[:] = ["paused"] * 10_000
    try:
        deadline = time.monotonic() + ANSWER_S
        while policy._pending is not None:
            decision = policy.make_decision_for_running_worker_group(group, None)
            assert time.monotonic() < deadline, "the save was never seen"
        assert decision.num_workers == 8
    finally:
        RAY_SAYS.clear()


def test_a_save_that_never_comes_leaves_no_stale_request(cluster, policy_for):
    """The group never saves (rank 0 missed the notice): past the timeout the controller resizes anyway, and the
    next group must not read the old request and save and wait at its first step (which then outlived the
    watchdog's stall limit: exit 7). The old hook's GetTimeoutError (a RayError) skipped the clear."""
    run = "stale"
    now = [0.0]
    policy = policy_for(run, timeout_s=2.0, clock=lambda: now[0])
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    assert type(policy.make_decision_for_running_worker_group(None, None)).__name__ == "NoopDecision"
    assert poll() is True
    now[0] += 3.0
    assert _decide_until(policy, "ResizeDecision").num_workers == 8
    _settled(policy._actor)                      # the clear has run on the actor
    assert poll() is False
    assert poll() is False


def test_a_request_expires_on_the_actor_by_itself():
    now = [100.0]
    notice = resize.ScaleUpNotice(clock=lambda: now[0])
    notice.request(0.2)
    assert notice.is_requested()
    now[0] += 0.3
    assert not notice.is_requested()


def test_a_request_waits_out_the_eval_pass_the_group_is_in():
    """The group can only save at a training step, and an eval pass takes none until it ends: the time the group
    evaluates after the request does not count against the request's expiry nor the controller's wait (which
    reads `answer`); the first training step after the pass (rank 0's question) ends the pause."""
    now = [0.0]
    notice = resize.ScaleUpNotice(clock=lambda: now[0])
    notice.eval_began()                          # a long pass under way when the scale-up is decided
    now[0] = 50.0
    notice.request(100.0)
    now[0] = 400.0                               # 350 s of eval since the request, far past its 100 s
    assert notice.answer() == (None, 350.0, True)
    assert notice.is_requested()                 # the pass ended: rank 0 asks at its next training step
    assert notice.answer() == (None, 350.0, False)
    now[0] = 400.0 + 99.0
    assert notice.is_requested()
    now[0] = 400.0 + 101.0
    assert not notice.is_requested()             # 101 s of training since the request: expired
    notice.clear()
    assert notice.answer() == (None, 0.0, False)


class _AnswersWith:
    """The notice actor's part the policy uses: `answer` gives what the test set when it was asked (ready at
    once, read by the policy at its next question, as a real answer arrives a loop iteration later)."""

    def __init__(self) -> None:
        self.now: tuple = (None, 0.0, False)
        self.cleared = 0
        outer = self
        self.request = type("M", (), {"remote": staticmethod(lambda ttl: None)})()
        self.answer = type("M", (), {"remote": staticmethod(lambda: ray.put(outer.now))})()
        self.clear = type("M", (), {"remote": staticmethod(lambda: setattr(outer, "cleared", outer.cleared + 1))})()


def test_the_controller_s_wait_for_the_save_pauses_while_the_group_evaluates(cluster, policy_for):
    """A scale-up decided during a long eval pass: the controller goes on waiting for the save while the group
    evaluates (the pass's time comes from the notice actor) and gives up only after its timeout of training
    time; an answer that is a loop iteration old never ends the wait early."""
    now = [0.0]
    policy = policy_for("eval-pause", timeout_s=2.0, clock=lambda: now[0])
    actor = policy._actor
    fake = policy._actor = _AnswersWith()

    def decide(at: float, answer: tuple) -> str:
        now[0], fake.now = at, answer
        return type(policy.make_decision_for_running_worker_group(None, None)).__name__

    try:
        assert decide(0.0, (None, 0.0, True)) == "NoopDecision"    # asked during a pass
        assert decide(10.0, (None, 10.0, True)) == "NoopDecision"  # read: evaluating since its question
        assert decide(30.0, (None, 29.0, False)) == "NoopDecision"  # read: still evaluating at 10, taken to 30
        assert decide(30.5, (None, 29.0, False)) == "NoopDecision"  # read: the pass ended at 29, 1.5 s waited
        assert fake.cleared == 0
        assert decide(31.5, (None, 29.0, False)) == "ResizeDecision"  # 2.5 s of training waited: gives up
        assert fake.cleared == 1
    finally:
        policy._actor = actor


def test_a_group_that_fails_while_the_controller_waits_drops_the_request(cluster, policy_for):
    run = "fails-meanwhile"
    policy = policy_for(run, timeout_s=600)
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    assert type(policy.make_decision_for_running_worker_group(None, None)).__name__ == "NoopDecision"
    assert poll() is True
    policy.after_controller_state_update(_state("RunningState"), _state("RestartingState"))
    _settled(policy._actor)
    assert poll() is False
    assert policy._pending is None


def test_a_slow_actor_answer_keeps_the_handle(cluster):
    """GetTimeoutError is a RayError (ray/exceptions.py): the poll catches it first, answers "no scale-up" for
    this step and keeps asking the same live actor."""
    run = "slow"
    actor = resize.notice_actor(run, create=True)
    assert ray.get(actor.is_requested.remote(), timeout=60) is False      # up and answering
    poll = resize.ScaleUpPoll(run, timeout_s=0.5)
    poll._actor = actor
    blocker = actor.__ray_call__.remote(lambda self: time.sleep(3))     # the actor busy for 3 s
    assert poll() is False and poll._actor is actor and poll.misses == 1
    ray.get(blocker)


def test_pinned_actor_comes_back_after_its_process_dies_and_the_poll_rides_through(cluster, policy_for):
    import os
    import signal

    _, head, _ = cluster
    run = "process-death"
    policy = policy_for(run, timeout_s=600)
    actor = policy._actor
    assert _node_of(actor) == head
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    assert poll() is False
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)                              # e.g. the OOM killer on the head
    deadline = time.monotonic() + ANSWER_S
    while True:
        assert poll() is False                                # while it restarts: an answer, never a raise
        try:
            if ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=10) != pid:
                break                                         # restarted (a new process on the same node)
        except ray.exceptions.RayActorError:
            pass
        assert time.monotonic() < deadline, "the actor was not restarted"
        time.sleep(0.5)
    assert _node_of(actor) == head
    assert poll() is False
    # A resize of a running group: the controller asks through the restarted actor and waits for the save.
    assert type(policy.make_decision_for_running_worker_group(None, None)).__name__ == "NoopDecision"
    resize.mark_saved(run, 7)                                 # rank 0 reaches it by name
    assert _decide_until(policy, "ResizeDecision").num_workers == 8
    ray.kill(actor)


def _wait_until_dead(actor, within_s: float = 60.0) -> None:
    """ray.kill returns before the actor is gone (the GCS kills it asynchronously; a call made at once may still be
    answered, seen on a busy CI machine): wait until a call to it fails."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.is_requested.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.2)
    raise AssertionError(f"the killed actor still answers after {within_s:.0f} s")


def test_controller_resizes_without_the_save_when_the_actor_is_gone(cluster, policy_for, capsys):
    run = "killed"
    policy = policy_for(run, timeout_s=600)
    poll = resize.ScaleUpPoll(run, timeout_s=ANSWER_S)
    assert poll() is False
    ray.kill(policy._actor, no_restart=True)
    _wait_until_dead(policy._actor)
    assert poll() is False and poll.misses == 1
    # A raise here would end the run as a ControllerError; a resize without the save only redoes some steps.
    assert _decide_until(policy, "ResizeDecision").num_workers == 8
    assert "without a save at the notice" in capsys.readouterr().out


def test_mark_saved_without_an_actor_does_not_raise(cluster):
    resize.mark_saved("no-such-run", 3)

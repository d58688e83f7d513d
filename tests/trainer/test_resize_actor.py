"""The scale-up notice actor (trainer/resize.py) on a real multi-node Ray cluster: it sits on the controller's
node, and losing it never fails a worker's step.

What happens without this: an actor that asks for no resources goes wherever Ray's hybrid scheduling policy puts
it, which spills to other nodes once the local node is busy (ray/_raylet scheduling, "hybrid" policy: local node
first, then the others). On a TPU host it dies with the slice, and the next per-step `ray.get` raises
ActorDiedError ("The actor died because its node has died") in rank 0: the run fails exactly when elasticity should
carry it. Ray Train pins its own controller to the driver's node the same way (ray/train/v2/api/
data_parallel_trainer.py `_initialize_and_run_controller`: label_selector on the driver's node id).
"""
from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from trainer import head_actors, resize  # noqa: E402


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
    poll = resize.ScaleUpPoll(run, timeout_s=5.0)
    assert poll() is False
    ray.get(stray.request.remote())
    assert poll() is True
    local.remove_node(doomed_host, allow_graceful=False)        # the slice is lost with the actor on it
    # Until the GCS declares the node dead the actor is "unavailable", then dead. Every poll meanwhile is a step:
    # it must answer, never raise. What the poll used to do, a bare ray.get, raises ActorDiedError in the end.
    deadline = time.monotonic() + 90
    while True:
        assert poll() in (True, False)
        try:
            ray.get(stray.is_requested.remote(), timeout=5)
        except ray.exceptions.ActorDiedError:
            break
        except ray.exceptions.RayError:
            pass
        assert time.monotonic() < deadline, "the GCS never declared the actor dead"
        time.sleep(0.5)
    for _ in range(3):
        assert poll() is False                  # looked up again by name each step, answered "no scale-up"
    assert poll.misses >= 3


def test_pinned_actor_comes_back_after_its_process_dies_and_the_poll_rides_through(cluster):
    import os
    import signal

    _, head, _ = cluster
    run = "process-death"
    callback = resize.save_before_resize_callback(run, timeout_s=0.5)
    callback.after_controller_start(None)                    # what the controller does when the run starts
    actor = callback._actor
    assert _node_of(actor) == head
    poll = resize.ScaleUpPoll(run, timeout_s=5.0)
    assert poll() is False
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)                              # e.g. the OOM killer on the head
    deadline = time.monotonic() + 90
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

    class Decision:
        num_workers = 8

    # A resize of a running group: the controller asks through the restarted actor and waits for the save.
    callback.after_controller_state_update(type("RunningState", (), {})(), type("ResizingState", (), {})())
    ray.get(actor.mark_saved.remote(None))
    callback.before_controller_execute_resize_decision(Decision())
    resize.mark_saved(run, 7)                                 # rank 0 reaches it by name
    assert ray.get(actor.saved.remote()) == 7
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


def test_controller_resizes_without_the_save_when_the_actor_is_gone(cluster, capsys):
    run = "killed"
    callback = resize.save_before_resize_callback(run, timeout_s=0.5)
    callback.after_controller_start(None)
    poll = resize.ScaleUpPoll(run, timeout_s=5.0)
    assert poll() is False
    ray.kill(callback._actor, no_restart=True)
    _wait_until_dead(callback._actor)
    assert poll() is False and poll.misses == 1

    class Decision:
        num_workers = 8

    # A raise here would end the run as a ControllerError; a resize without the save only redoes some steps.
    callback.after_controller_state_update(type("RunningState", (), {})(), type("ResizingState", (), {})())
    callback.before_controller_execute_resize_decision(Decision())
    assert "without a save at the notice" in capsys.readouterr().out


def test_mark_saved_without_an_actor_does_not_raise(cluster):
    resize.mark_saved("no-such-run", 3)

"""Small named actors a run keeps on its driver's node, the head (the scale-up notice, the progress watchdog).

Ray Train pins its controller to the driver's node; these actors are pinned there too, hard, so they never land on
a TPU host and die with its slice, and are restarted in place if their process dies. A 0-CPU actor placed freely
can land on any node (seen on a busy head: 2 of 6 elsewhere, tests/trainer/test_resize_actor.py).
"""
from __future__ import annotations

# Ray namespace of the run's named actors: a driver and its workers find them by name there.
NAMESPACE = "tpu-multislice-trainer"


def pinned_actor(cls: type, name: str, create: bool):
    """`create`: make the named actor of `cls` (or take the live one) on this process's node, hard-pinned,
    restarted in place if its process dies. Otherwise look it up (ValueError if absent, or if this process is not
    connected to Ray)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        # Ray's own calls below would start a local cluster in this process (ray/_private/auto_init_hook.py) and
        # leave it running: outside a Ray job there is no run's actor to find and no node to create one on.
        if create:
            raise RuntimeError(f"actor {name}: this process is not connected to Ray")
        raise ValueError(f"actor {name}: this process is not connected to Ray")
    if create:
        here = ray.get_runtime_context().get_node_id()
        return ray.remote(num_cpus=0, max_restarts=-1)(cls).options(
            name=name, namespace=NAMESPACE, get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote()
    return ray.get_actor(name, namespace=NAMESPACE)

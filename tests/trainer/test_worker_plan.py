"""trainer/worker.py: what each worker group plans and asks for."""
from __future__ import annotations


def test_only_an_elastic_group_below_its_maximum_polls_for_a_scale_up():
    """The scale-up notice actor is asked every step (a Ray round trip): a group at its maximum cannot grow."""
    from core.planner import PlanRequest, plan
    from trainer.worker import asks_for_scale_up, plan_for_world, request_to_dict

    request = PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, min_slices=1)
    full = plan(request)
    config = {"plan_request": request_to_dict(request), "elastic": True, "run_name": "r"}
    hosts = full.shape.hosts
    assert asks_for_scale_up(config, plan_for_world(full, hosts))            # one slice of two: may grow
    assert not asks_for_scale_up(config, plan_for_world(full, 2 * hosts))    # at its maximum
    assert not asks_for_scale_up({**config, "elastic": False}, plan_for_world(full, hosts))

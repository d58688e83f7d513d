"""Config build, step 2: the run's own settings that relate keys (checkpoints against the run's steps, who may
reach the Ray dashboard, the Kueue quota against the slices, the capacity wait and its older name); one line per
mistake, as rules.py."""
from __future__ import annotations

import ipaddress
from typing import Any, Mapping

from core.tpu_catalog import SliceShape
from infra.config.parse import problem
from infra.config.schema import DEFAULT_CHECKPOINT_PERIOD, NAMESPACE

def checkpoint_period(v: dict[str, Any]) -> int | None:
    """The user's checkpointPeriod, or the default yielding to a shorter run: min(50, trainSteps)."""
    if v["checkpointPeriod"] is not None:
        return v["checkpointPeriod"]
    return min(DEFAULT_CHECKPOINT_PERIOD, v["trainSteps"]) if v["trainSteps"] is not None else None


def check_workload(v: dict[str, Any], problems: list[str]) -> None:
    if v["trainSteps"] and v["checkpointPeriod"] and v["checkpointPeriod"] > v["trainSteps"]:
        problems.append(f"{NAMESPACE}:checkpointPeriod={v['checkpointPeriod']} is larger than "
                        f"{NAMESPACE}:trainSteps={v['trainSteps']}: only step 0 would be saved, so a restart would "
                        "rewind to the beginning; use a period of at most trainSteps")
    if v["workloadBackend"] == "rayjob" and v["dashboardExposure"] == "internal-lb":
        ranges = v["dashboardSourceRanges"]
        if ranges is not None and not ranges:
            problems.append(f"{NAMESPACE}:dashboardExposure='internal-lb' needs {NAMESPACE}:dashboardSourceRanges "
                            "(the Ray job API runs arbitrary code: name who may reach it)")
        for index, cidr in enumerate(ranges or ()):
            try:
                if "/" not in cidr:
                    raise ValueError(cidr)
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                problems.append(problem(f"dashboardSourceRanges[{index}]", cidr, "a CIDR range with an explicit "
                                        "prefix length, e.g. 10.0.0.0/8"))


def check_jobset(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """The Kueue quota must admit the whole workload at once."""
    quota = v["kueueTpuQuota"]
    if v["workloadBackend"] != "jobset" or shape is None or v["slices"] is None or quota is None:
        return
    needed = v["slices"] * shape.chips
    if quota < needed:
        problems.append(f"{NAMESPACE}:kueueTpuQuota={quota} cannot admit the workload: it requests slices x chips "
                        f"= {v['slices']} x {shape.chips} = {needed} google.com/tpu at once; allowed: at least "
                        f"{needed} (or unset)")


def capacity_wait_seconds(v: dict[str, Any], raw: Mapping[str, Any]) -> int | None:
    """capacityWaitSeconds, or rayPreRunningDeadlineSeconds (its older name) when only that is set."""
    if "capacityWaitSeconds" not in raw and v["rayPreRunningDeadlineSeconds"] is not None:
        return v["rayPreRunningDeadlineSeconds"]
    return v["capacityWaitSeconds"]


def check_capacity_wait(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
    """One bound for every wait: the older key may stand in for the new one, never contradict it."""
    new, old = v["capacityWaitSeconds"], v["rayPreRunningDeadlineSeconds"]
    if "capacityWaitSeconds" in raw and old is not None and new is not None and new != old:
        problems.append(f"{NAMESPACE}:rayPreRunningDeadlineSeconds={old} and {NAMESPACE}:capacityWaitSeconds="
                        f"{new} differ: unset rayPreRunningDeadlineSeconds (capacityWaitSeconds bounds every wait, "
                        "the first included); allowed: the same value or unset")

"""trainer.local's injected events: the options' parsing, their refusals (one line each, before any process
starts) and the order they play in (pure).

Each event plays on the local cluster as it happens on GKE (trainer/local/run.py plays them):
- preempt: a Spot notice to the last slice: SIGTERM to `ray start`, whose handler drains the node as preempted
  (ray/_private/node.py, the SIGTERM drain); the kubelet's SIGKILL at the end of the grace period;
- sigterm: the last slice's raylets get SIGTERM with no drain: Ray reports the node "received SIGTERM"
  (EXPECTED_TERMINATION, src/ray/raylet/main.cc), not preempted, as when the drain deadline is missed or a pod of
  a replica group KubeRay deletes whole goes (raycluster_controller.go reconcileMultiHostWorkerGroup);
- KIND@start (preempt or sigterm): that notice in the first step of the next group that starts with every slice,
  before the group reports a step (MaxText reports a step one step late): a notice to a restart (issue 43, item 4);
- fail: SIGKILL of a worker; kill-slice: SIGKILL of a slice; add: a slice the RayCluster wants arrives;
- --fail-slice-from STEP: from STEP on, the last slice's hosts die by SIGTERM (as `sigterm`) in the first step of
  every group that has them: a host that fails at every start (issue 43, item 2);
- --hold-slice STEP:SECONDS: at STEP the last slice is reclaimed (as `preempt`) and its capacity returns only
  SECONDS later: a wait for capacity. With --inject (fixed-size runs), the list's `preempt@STEP` is that notice.
"""
from __future__ import annotations

import argparse

from core.errors import PlanError
from core.planner import Plan


def _steps(text: str) -> tuple[int, ...]:
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step or a comma-separated list of steps") from None
    if list(steps) != sorted(set(steps)):
        raise argparse.ArgumentTypeError(f"{text}: give increasing steps")
    return steps


# --inject's kinds, each played as the flag of the same name plays it (sigterm has no flag of its own).
EVENT_KINDS = {"fail": "--fail-at", "kill-slice": "--kill-slice-at", "preempt": "--preempt-slice-at",
               "sigterm": None, "add": "--add-slice-at"}
# The kinds that take the last slice away from a full group (a notice, with or without Ray's drain).
SLICE_NOTICES = ("preempt", "sigterm")
# KIND@start's step in the schedule (steps given are >= 1): the next full group's first step.
AT_GROUP_START = 0


def _hold(text: str) -> tuple[int, float]:
    """--hold-slice STEP:SECONDS."""
    step, colon, seconds = text.partition(":")
    try:
        if not colon:
            raise ValueError
        parsed = (int(step), float(seconds))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not STEP:SECONDS (e.g. 12:300)") from None
    if not parsed[1] > 0:
        raise argparse.ArgumentTypeError(f"{text}: hold the slice for more than 0 seconds")
    return parsed


def _events(text: str) -> tuple[tuple[int, str], ...]:
    """--inject's KIND@STEP list, in the order given, as (step, kind) like injection_schedule's; a part that is
    not KIND@STEP keeps its text as the kind and step -1 (validate_event_list names it)."""
    events = []
    for part in text.split(","):
        kind, at, step = part.partition("@")
        if at and kind in SLICE_NOTICES and step == "start":
            events.append((AT_GROUP_START, kind))
            continue
        ok = at and kind in EVENT_KINDS and step.isdigit()
        events.append((int(step), kind) if ok else (-1, part))
    return tuple(events)


def _show(steps: tuple[int, ...] | None) -> str:
    return ",".join(map(str, steps or ()))


def validate_injections(args: argparse.Namespace, plan_: Plan) -> None:
    if args.grace_period <= 0:
        raise PlanError(f"--grace-period {args.grace_period}: must be > 0 seconds")
    if args.slow_eval < 0:
        raise PlanError(f"--slow-eval {args.slow_eval}: must be >= 0 seconds")
    validate_slice_loops(args, plan_)
    if args.hold_while and args.hold_slice is None:
        raise PlanError(f"--hold-while {args.hold_while}: it lengthens --hold-slice's hold; give both")
    if args.inject:
        validate_event_list(args, plan_)
        return
    for flag, step in (("--fail-at", args.fail_at), ("--kill-slice-at", args.kill_slice_at)):
        if step is not None and not 1 <= step < args.steps:
            raise PlanError(f"{flag} {step} must be within 1..{args.steps - 1} (steps={args.steps})")
    for step in args.preempt_slice_at or ():
        if not 1 <= step < args.steps - 1:
            # Steps are 0..steps-1: a notice at the last step has no step left to resume into.
            raise PlanError(f"--preempt-slice-at {step} must be within 1..{args.steps - 2}: before the last "
                            f"step ({args.steps - 1}, steps={args.steps})")
    preempt, add = args.preempt_slice_at, args.add_slice_at
    injected = [(flag, step) for flag, step in (("--fail-at", args.fail_at), ("--kill-slice-at", args.kill_slice_at),
                                                ("--preempt-slice-at", preempt[0] if preempt else None),
                                                ("--add-slice-at", add[0] if add else None)) if step is not None]
    # Notices and returns of the same slice may come in turns; any other two events are one too many.
    alone = [item for item in injected if item[0] not in ("--preempt-slice-at", "--add-slice-at")]
    if len(injected) > 1 and alone:
        (flag_a, step_a), (flag_b, step_b) = injected[:2]
        where = "at the same step" if step_a == step_b else "in one run"
        raise PlanError(f"{flag_a} {step_a} and {flag_b} {step_b}: one injected event per run, not two {where}")
    if args.start_slices is not None and add is None:
        raise PlanError("--start-slices and --add-slice-at go together (start small, then grow)")
    if add is not None and args.start_slices is None and preempt is None:
        raise PlanError("--start-slices and --add-slice-at go together (start small, then grow)")
    if add is not None and not plan_.elastic:
        raise PlanError(f"--add-slice-at {_show(add)} needs --elastic MIN,MAX")
    for step in add or ():
        if not 1 <= step < args.steps - 1:
            raise PlanError(f"--add-slice-at {step} must be within 1..{args.steps - 2} (steps={args.steps})")
    if args.start_slices is not None:
        if not plan_.min_slices <= args.start_slices < plan_.slices:
            raise PlanError(f"--start-slices {args.start_slices} must be within {plan_.min_slices}.."
                            f"{plan_.slices - 1} (--elastic {plan_.min_slices},{plan_.slices})")
    if preempt and add:
        # The last slice goes and comes back in turns: a return follows a notice (or the small start).
        events = injection_schedule(args)
        kinds = [kind for _, kind in events]
        expected = ["add" if (i % 2 == 0) == (args.start_slices is not None) else "preempt" for i in range(len(kinds))]
        if kinds != expected:
            raise PlanError(f"--preempt-slice-at {_show(preempt)} and --add-slice-at {_show(add)}: the slice must "
                            "go and come back in turns (each return after a notice)")
    if args.kill_slice_at is not None and plan_.slices < 2:
        raise PlanError(f"--kill-slice-at needs at least 2 slices, got {plan_.slices}")
    if args.recovery == "cold" and args.fail_at is None:
        raise PlanError("--recovery cold applies to --fail-at")


def validate_event_list(args: argparse.Namespace, plan_: Plan) -> None:
    """--inject: alone, each step in range, and playable in its order: the slices present are followed from the
    start, so a notice goes only to a full group, a return only to a smaller one, a slice is killed only where
    another is left (a list that could never play would wait until --timeout)."""
    flags = [flag for flag in (*EVENT_KINDS.values(), "--start-slices") if flag is not None]
    given = [flag for flag in flags if getattr(args, flag[2:].replace("-", "_")) is not None]
    if given:
        raise PlanError(f"--inject and {', '.join(given)}: give the events one way (--inject lists them all)")
    if args.recovery == "cold":
        raise PlanError("--recovery cold applies to --fail-at, not --inject")
    present = plan_.slices
    for step, kind in args.inject:
        if step < 0:
            raise PlanError(f"--inject {kind}: give KIND@STEP with KIND one of {', '.join(EVENT_KINDS)}")
        last = args.steps - 2 if kind in (*SLICE_NOTICES, "add") else args.steps - 1
        if not 1 <= step <= last and not (step == AT_GROUP_START and kind in SLICE_NOTICES):
            raise PlanError(f"--inject {kind}@{step}: the step must be within 1..{last} (steps={args.steps})")
        if kind in SLICE_NOTICES:
            if present < plan_.slices:
                raise PlanError(f"--inject {kind}@{step}: a notice goes to a full group ({present} of "
                                f"{plan_.slices} slices then); return the slice first (add@STEP)")
            present = plan_.slices - 1 if plan_.elastic else plan_.slices
        elif kind == "kill-slice":
            if present < 2:
                raise PlanError(f"--inject {kind}@{step}: needs 2 slices in the group, it has {present} then")
            present = present - 1 if plan_.elastic else plan_.slices
        elif kind == "add":
            if not plan_.elastic:
                raise PlanError(f"--inject {kind}@{step} needs --elastic MIN,MAX")
            if present >= plan_.slices:
                raise PlanError(f"--inject {kind}@{step}: every slice is in the group then; a return follows "
                                "a notice or a lost slice")
            present = plan_.slices


def injection_schedule(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The injected events in the order they come: (step, kind); a notice and a return at one step: the
    notice first. --inject gives the order itself."""
    if args.inject:
        return list(args.inject)
    events = [(step, "preempt") for step in args.preempt_slice_at or ()]
    events += [(step, "add") for step in args.add_slice_at or ()]
    for step, kind in (("fail_at", "fail"), ("kill_slice_at", "kill-slice")):
        if getattr(args, step) is not None:
            events.append((getattr(args, step), kind))
    order = {"preempt": 0, "add": 1}
    return sorted(events, key=lambda event: (event[0], order.get(event[1], 2)))


def held_notice(args: argparse.Namespace) -> tuple[int, str] | None:
    """With --inject, the list's event whose slice --hold-slice holds: its `preempt@STEP` at the hold's STEP (the
    hold begins as that drained notice); None when --hold-slice plays on its own (or is not given)."""
    if args.hold_slice is None or not args.inject:
        return None
    return (args.hold_slice[0], "preempt")


def validate_slice_loops(args: argparse.Namespace, plan_: Plan) -> None:
    """--fail-slice-from and --hold-slice: each alone (each owns the last slice from its step on), in range, on
    a run with a slice to spare or a slice to wait for. One exception: --hold-slice STEP:S with an --inject list
    on a fixed-size run holds the slice of the list's own `preempt@STEP`. That is sound because a fixed run has
    no group without the slice: every later event of the list waits for the group formed once the capacity is
    back (a notice or a kill needs a group with every slice, which cannot form during the hold). On an elastic
    run the list's `add` events would return the held slice early, so there it stays alone."""
    loops = [(flag, value) for flag, value in (("--fail-slice-from", args.fail_slice_from),
                                               ("--hold-slice", args.hold_slice)) if value is not None]
    if not loops:
        return
    held = held_notice(args)
    if held is not None and args.fail_slice_from is None:
        step = held[0]
        if plan_.elastic:
            raise PlanError(f"--hold-slice {step}:... with --inject: fixed-size runs only (an elastic run's "
                            "add@STEP would return the held slice); give --hold-slice alone")
        if args.inject.count(held) != 1:
            raise PlanError(f"--hold-slice {step}:... with --inject: the list must have preempt@{step} once "
                            "(the hold begins as that notice)")
        if plan_.slices < 2:
            raise PlanError(f"--hold-slice {step}:...: needs 2 slices, the run has {plan_.slices}")
        return                      # the step's range: validate_event_list's, for the list's preempt@STEP
    others = [flag for flag, value in (("--inject", args.inject), ("--fail-at", args.fail_at),
                                       ("--kill-slice-at", args.kill_slice_at),
                                       ("--preempt-slice-at", args.preempt_slice_at),
                                       ("--add-slice-at", args.add_slice_at)) if value]
    if len(loops) > 1 or others:
        named = [flag for flag, _ in loops] + others
        raise PlanError(f"{' and '.join(named[:2])}: one of them per run (each plays the last slice from its "
                        "step on)")
    flag, value = loops[0]
    step = value if flag == "--fail-slice-from" else value[0]
    if not 1 <= step <= args.steps - 2:
        raise PlanError(f"{flag} {step}: the step must be within 1..{args.steps - 2} (steps={args.steps})")
    if plan_.slices < 2:
        raise PlanError(f"{flag} {step}: needs 2 slices, the run has {plan_.slices}")
    if args.start_slices is not None:
        raise PlanError(f"{flag} and --start-slices: {flag} starts from the full group")



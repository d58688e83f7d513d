"""The offline plan's first and last words: the changes of the run's shape nobody asked for (at the top), and one
verdict block at the end that says what the exit code means.

A plan is about 440 lines; what decides whether it is good news (the errors, what could not be checked and the
one command that makes it checkable, what XLA compiled or was read from kept verdicts) is gathered here from the
plan's own sections, so the reader does not have to find it in them. Every line is laid out within 100 columns
by the caller (preview/terminal.fit); the texts are whole here.
"""
from __future__ import annotations

from typing import Any

from infra.config import StackConfig
from infra.config.shape_changes import SIZE_DEFAULT
from preview.k8s import crd_fetch
from preview.model import Plan

EXIT_MEANINGS = {
    0: "the plan is valid: every check above that ran passed",
    1: "Kubernetes objects did not validate, or custom resources could not be checked against their CRDs",
    4: "XLA refused the training step, or it could not be compiled here",
}


def shape_change_lines(config: StackConfig, plan: Plan | None) -> list[str]:
    """One WARNING per change of the run's shape the user did not ask for (infra/config/shape_changes.py), the
    default size with what it costs while training."""
    lines = []
    for change in config.shape_changes:
        price = ""
        if change.kind == SIZE_DEFAULT and plan is not None and plan.cost.training_usd_per_hour is not None:
            price = f" (about {plan.cost.training_usd_per_hour:,.2f} USD/h while training)"
        lines.append(f"WARNING {change.message}{price}")
    return lines


def shape_changes_document(config: StackConfig) -> list[dict[str, str]]:
    return [{"kind": change.kind, "key": change.key, "message": change.message} for change in config.shape_changes]


def verdict_lines(plan: Plan, stack: str, exit_code: int, crd_missing: bool, crd_opted_out: bool) -> list[str]:
    """The Verdict block: errors, what was not checked and why (each with the command that checks it), what was
    compiled or read from kept verdicts, and what the exit code means."""
    report = plan.validation
    lines = ["Verdict"]
    errors = len(report.errors)
    lines.append(f"  errors: {errors}" + (" (Kubernetes objects: ERROR lines under Validation)" if errors else ""))
    for line, command in not_checked(plan, stack, crd_missing, crd_opted_out):
        lines.append(f"  not checked: {line}" + (": to check it, run" if command else ""))
        if command:
            lines.append(f"      {command}")      # alone on its line, to copy
    for line in compiled_lines(plan.compile, stack):
        lines.append(f"  {line}")
    meaning = EXIT_MEANINGS.get(exit_code, "see python -m preview --help")
    if exit_code == 1 and crd_missing and not errors:
        meaning = "custom resources could not be checked against their CRDs (nothing else failed)"
    lines.append(f"  exit {exit_code}: {meaning}")
    return lines


def not_checked(plan: Plan, stack: str, crd_missing: bool, crd_opted_out: bool) -> list[tuple[str, str | None]]:
    """(what was not checked and why, the one command that checks it or None)."""
    report = plan.validation
    lines: list[tuple[str, str | None]] = []
    if crd_missing:
        lines.append((f"custom resources against their CRDs: no verified {crd_fetch.VERSIONS} CRDs here "
                      f"(or {crd_fetch.ENV_OVERRIDE}=DIR: a copy of them)", "python -m preview.k8s.crd_fetch"))
    elif crd_opted_out:
        lines.append(("custom resources against their CRDs (--no-crd-check)", None))
    cel = sum(len(counts.get("not_evaluated") or {}) for counts in report.cel.values())
    if cel:
        lines.append((f"{cel} CEL rule(s) the offline check cannot evaluate (listed under Validation)", None))
    if plan.compile is None and not plan.shared_cluster:     # a shared cluster trains nothing
        lines.append(("the training step against XLA's compiler (TPU HBM)",
                      f"python -m preview --stack {stack} --compile"))
    if plan.assumptions:
        lines.append((f"{len(plan.assumptions)} assumption(s) only the cloud can confirm (Assumptions to check)",
                      None))
    return lines


def compiled_lines(compiled: dict[str, Any] | None, stack: str) -> list[str]:
    """What the compile section says, shape by shape: compiled now or read from kept verdicts, and XLA's answer."""
    if compiled is None:
        return []
    lines = []
    for shape in compiled.get("shapes") or [compiled]:
        where = f"{shape.get('num_slices')} x {shape.get('topology')}" + (
            " eval step" if shape.get("step") == "eval" else "")
        how = "read from kept verdicts" if shape.get("cached") else f"compiled in {shape.get('seconds', 0):.0f} s"
        answer = "fits" if shape.get("compiled") else "refused or not compiled"
        lines.append(f"compile: {where}: {answer} ({how})")
    return lines

"""XLA's verdicts on compiled training steps, kept in a JSON file so that a step is compiled once.

The stack's config build, as `pulumi preview`/`pulumi up` run it, compiles the steps its compileCheck names that
have no verdict here (infra/config/compile_check.py, with the compiler the program hands it) and records each
verdict; `python -m preview --stack NAME` does the same (preview/cli.py). A step XLA refused is refused before
anything registers, and a second preview of an unchanged stack does not compile again.

A verdict is keyed by a digest of what decides the compiled program: the MaxText keys the plan gives the step
(core/planner.py Plan.overrides at that slice count, and the MaxText keys the planner does not model), the TPU
generation, slice topology and slice count, and the libtpu version that compiled it. The run's own keys (run name,
output directory, steps, data paths) do not change the step and are not in it; nor are the pods' LIBTPU_INIT_ARGS,
which follow from the same plan (core/tpu_env.py).

The file (COMPILE_VERDICTS, at the project's root) is the user's to keep or commit: a verdict depends only on
its key, so it stays true until MaxText or libtpu changes (each entry names both).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

COMPILE_VERDICTS = "compile-verdicts.json"
# Another file instead of <project>/compile-verdicts.json (the test suite points it at a scratch file).
PATH_ENV = "TPU_MULTISLICE_COMPILE_VERDICTS"
# XLA's own error code and name in a refusal: "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory
# ..." (libtpu 0.0.50.1; a scoped-VMEM refusal says "E1001: CompileTimeScopedVmemOom").
_ERROR_CODE = re.compile(r"\b(E\d{3,5}):\s*([A-Z]\w+)")


def verdicts_path(root: Path) -> Path:
    """Where the project at `root` keeps its verdicts (PATH_ENV overrides)."""
    override = os.environ.get(PATH_ENV)
    return Path(override) if override else root / COMPILE_VERDICTS


def error_code(reason: str | None) -> str | None:
    """XLA's error code and its name ("E1000 CompileTimeHbmOom") in a compiler's message, or None."""
    match = _ERROR_CODE.search(reason or "")
    return f"{match.group(1)} {match.group(2)}" if match else None


def step_digest(maxtext_keys: dict[str, str], generation: str, topology: str, slices: int, libtpu: str) -> str:
    """The key of one compiled step (see the module docstring)."""
    document = {"maxtext": dict(sorted(maxtext_keys.items())), "generation": generation, "topology": topology,
                "slices": slices, "libtpu": libtpu}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32]


def plan_digest(plan, slices: int, libtpu: str) -> str:
    """step_digest of a core.planner.Plan at `slices` (an elastic run's resize)."""
    resized = plan.at_slices(slices)
    keys = {**resized.overrides(), **dict(resized.unmodeled)}
    return step_digest(keys, resized.shape.generation.name, resized.shape.topology, slices, libtpu)


@dataclass(frozen=True)
class Verdict:
    compiled: bool
    shape: str                       # the plan's one-line description at that slice count
    slices: int
    libtpu: str
    maxtext: str
    reason: str | None = None        # the compiler's own line when it refused
    error_code: str | None = None    # "E1000 CompileTimeHbmOom", "E1001 CompileTimeScopedVmemOom", ...
    required_bytes: int | None = None
    peak_bytes: int | None = None
    hbm_bytes: int | None = None
    per_device_batch_size: float | None = None
    date: str = ""

    def what_failed(self) -> str:
        """One phrase: the bytes XLA needed, else its error code, else its line."""
        gib = 1024**3
        if self.required_bytes and self.hbm_bytes:
            return (f"XLA needs {self.required_bytes / gib:.2f} GiB per device of {self.hbm_bytes / gib:.2f}"
                    + (f" ({self.error_code})" if self.error_code else ""))
        return self.error_code or (self.reason or "the compile failed")[:80]


def nearest_compiled(plan, slices: int, kept_for: Callable[[Any, int], "Verdict | None"]) -> float | None:
    """The largest per-device batch below `plan`'s that XLA compiled on `slices` slices, by the verdicts `kept_for`
    (plan, slices) finds, in steps of the smallest batch the layout takes (1 / ici_batch_free); None: none kept."""
    step = 1 / plan.ici_batch_free
    k = int(round(plan.per_device_batch_size / step)) - 1
    while k >= 1:
        known = kept_for(replace(plan, per_device_batch_size=k * step), slices)
        if known is not None and known.compiled:
            return k * step
        k -= 1
    return None


class NotDecided(Exception):
    """XLA gave no verdict on a step: no compiler where this program runs, a compile that could not be set up, or
    one that did not finish. The message is one line saying why (and what to install)."""


# How a program compiles one of its steps: (the stack's config, slice count) -> XLA's verdict, or NotDecided. The
# config build (infra/config/) is handed one by the program that runs it (workloads/compile_check.py) and never
# imports a compiler itself.
CompileStep = Callable[[Any, int], Verdict]


def slices_to_compile(plan, check: str, asked: bool = False) -> list[int]:
    """The slice counts whose step is compiled, fewest first: `asked` (--compile) or check "always": every distinct
    shape the run takes (an elastic run at its fewest slices, then its full group: between the two the per-device
    step is the same with data parallelism across slices and smaller with FSDP across more of them, so the fewest
    slices hold the most bytes per device); "auto": the counts the estimate puts near the limit (where its
    measured error leaves the verdict open); "off": none."""
    from core.memory import NEAR_LIMIT

    if asked or check == "always":
        return sorted({plan.min_slices, plan.slices})
    if check == "auto":
        return [n for n in range(plan.min_slices, plan.slices + 1) if plan.at_slices(n).memory.verdict == NEAR_LIMIT]
    return []


def kept_verdict(verdicts: dict[str, Verdict], plan, slices: int, libtpus: list[str]) -> Verdict | None:
    """The kept verdict on `plan` at `slices` by the first of `libtpus` that compiled it (the workers' first)."""
    for libtpu in libtpus:
        kept = verdicts.get(plan_digest(plan, slices, libtpu))
        if kept is not None:
            return kept
    return None


def load(path: Path) -> dict[str, Verdict]:
    """The verdicts in `path` ({} when there is no file)."""
    if not path.is_file():
        return {}
    document = json.loads(path.read_text())
    return {digest: Verdict(**entry) for digest, entry in document.get("verdicts", {}).items()}


def record(path: Path, digest: str, verdict: Verdict) -> None:
    """Add or replace one verdict, keeping the others."""
    verdicts = load(path)
    verdicts[digest] = verdict if verdict.date else Verdict(**{**asdict(verdict),
                                                               "date": datetime.date.today().isoformat()})
    document: dict[str, Any] = {
        "about": "XLA's verdicts on compiled training steps (core/compile_verdicts.py); keep or commit it",
        "verdicts": {key: asdict(value) for key, value in sorted(verdicts.items())}}
    path.write_text(json.dumps(document, indent=1) + "\n")

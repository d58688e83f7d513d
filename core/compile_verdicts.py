"""XLA's verdicts on compiled training steps, kept in a JSON file so that a step is compiled once.

The stack's config build, as `pulumi preview`/`pulumi up` run it, compiles the steps its compileCheck names that
have no verdict here (infra/config/compile_check.py, with the compiler the program hands it) and records each
verdict; `python -m preview --stack NAME` does the same (preview/cli.py). A step XLA refused is refused before
anything registers, and a second preview of an unchanged stack does not compile again.

A verdict is keyed by a digest of everything that changes the compiled program or the compiler's answer
(CompileKey): train_compile's exact argv after every override (the backend's launch argv resized to the slice
count, the compile topology, with this machine's scratch paths replaced by fixed placeholders), the pods'
LIBTPU_INIT_ARGS, the user's XLA_FLAGS, the MaxText, jax and libtpu versions that compile it, and how it was
compiled (the mode: MODE_FULL, the whole compile; MODE_MEMORY_KERNELS, memory-only for HBM plus the attention
kernels alone for scoped VMEM, aot/kernel_check.py), and which program (the train step, or the eval step
MaxText compiles at start when the run evaluates: STEP_*). The look-up takes only an entry recorded under the same
complete key: a verdict recorded under another version or other flags is never used, the step is compiled again;
of another mode, only a full compile's verdict stands for the faster mode's (it decided everything the faster
one decides), never the reverse. The run's own keys (run name, output directory) are the
placeholders; a file written before the complete key (no "format": FORMAT) is read as no verdict, said once.

A compile that runs out of time is kept too, as "undecided after N s" (Verdict.undecided_after_s): the next
preview says so once and does not start the same compile again unless RETRY_ENV is set.

The file (COMPILE_VERDICTS, at the project's root) is the user's to keep or commit: a verdict depends only on
its key, so it stays true on any machine that compiles with the same versions and flags.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

COMPILE_VERDICTS = "compile-verdicts.json"
# Another file instead of <project>/compile-verdicts.json (the test suite points it at a scratch file).
PATH_ENV = "TPU_MULTISLICE_COMPILE_VERDICTS"
# Compile again the steps kept as "undecided after N s" (a compile that ran out of time).
RETRY_ENV = "TPU_MULTISLICE_RETRY_UNDECIDED"
# The file's format: 2 = entries under complete keys (CompileKey). Older files are read as no verdict.
FORMAT = 2
# XLA's own error code and name in a refusal: "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory
# ..." (libtpu 0.0.50.1; a scoped-VMEM refusal says "E1001: CompileTimeScopedVmemOom").
# How a verdict was compiled (CompileKey.mode). A full compile's key is the key as it was before modes existed, so
# verdicts kept then (all full compiles) keep their digests.
MODE_FULL = "full"
MODE_MEMORY_KERNELS = "memory-only+kernels"
# Which of the run's programs (CompileKey.step): MaxText's train step (train_compile), or its eval step, which the
# workers compile at start when the run has an eval split (aot/eval_compile.py). The same argv compiles both, so
# the step is part of the key: a train verdict never stands for an eval one. A train step's key is the key as it
# was before eval steps were compiled, so kept verdicts keep their digests.
STEP_TRAIN, STEP_EVAL = "train", "eval"
_ERROR_CODE = re.compile(r"\b(E\d{3,5}):\s*([A-Z]\w+)")


def verdicts_path(root: Path) -> Path:
    """Where the project at `root` keeps its verdicts (PATH_ENV overrides)."""
    override = os.environ.get(PATH_ENV)
    return Path(override) if override else root / COMPILE_VERDICTS


def error_code(reason: str | None) -> str | None:
    """XLA's error code and its name ("E1000 CompileTimeHbmOom") in a compiler's message, or None."""
    match = _ERROR_CODE.search(reason or "")
    return f"{match.group(1)} {match.group(2)}" if match else None


@dataclass(frozen=True)
class CompileKey:
    """Everything that changes a compiled step or the compiler's answer on it (see the module docstring)."""

    argv: tuple[str, ...]       # train_compile's argv after every override, scratch paths as placeholders
    libtpu_init_args: str       # the TPU pods' LIBTPU_INIT_ARGS, passed to the compile as the pods get them
    xla_flags: str              # the user's XLA_FLAGS, which reach the compile process
    maxtext: str
    jax: str
    libtpu: str
    mode: str = MODE_FULL       # how XLA decided: MODE_FULL or MODE_MEMORY_KERNELS
    step: str = STEP_TRAIN      # which program: STEP_TRAIN or STEP_EVAL (at the argv's eval batch)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        document = {**asdict(self), "argv": list(self.argv)}
        if self.mode == MODE_FULL:
            del document["mode"]        # a full compile's key as it was before modes (its kept digests stay)
        if self.step == STEP_TRAIN:
            del document["step"]        # a train step's key as it was before eval steps (its digests stay)
        return document


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
    jax: str = ""
    # Set when the compile ran out of time: no verdict from XLA, kept so the next preview does not restart it.
    undecided_after_s: float | None = None
    key: dict[str, Any] | None = None    # the CompileKey it was recorded under (CompileKey.as_dict)
    mode: str = MODE_FULL                # how XLA decided (CompileKey.mode)
    step: str = STEP_TRAIN               # which program (CompileKey.step); an eval step's per_device_batch_size
                                         # is its eval batch

    @property
    def undecided(self) -> bool:
        return self.undecided_after_s is not None

    def what_failed(self) -> str:
        """One phrase: the bytes XLA needed, else its error code, else its line."""
        if self.undecided:
            return f"undecided after {self.undecided_after_s:.0f} s (the compile ran out of time)"
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


class Compiler(Protocol):
    """How a program compiles the run's steps (infra/config/ is handed one by the program that runs it,
    workloads/compile_check.py ProgramCompiler, and never imports a compiler itself)."""

    def key(self, config: Any, slices: int, per_device_batch_size: float | None = None,
            eval_batch: float | None = None) -> CompileKey:
        """The complete key of the run's step at `slices` (at another batch: the nearest-batch look-up; with
        `eval_batch`, its eval step at that per-device eval batch); raises NotDecided when it cannot be known here
        (no MaxText, no compile topology)."""

    def __call__(self, config: Any, slices: int, eval_batch: float | None = None) -> Verdict:
        """XLA's verdict (or undecided after N s) on the run's step at `slices` (with `eval_batch`: its eval
        step at that per-device eval batch), or NotDecided."""


CompileStep = Compiler


def slices_to_compile(plan, check: str, asked: bool = False) -> list[int]:
    """The slice counts whose step is compiled: with compileCheck auto or always (or `asked`, --compile) every
    distinct step the run takes, i.e. each slice count of an elastic run (the DCN axis, and with FSDP across
    slices each device's share, differ between counts), the ones the estimate puts nearest the limit first (the
    likeliest refusal decides soonest; fewer slices first on a tie); "off": none. What the estimate refuses
    outright never gets here (the config build refuses it first)."""
    if not (asked or check in ("auto", "always")):
        return []
    counts = range(plan.min_slices, plan.slices + 1)
    return sorted(counts, key=lambda n: (-plan.at_slices(n).memory.total, n))


def lookup(verdicts: dict[str, Verdict], key: CompileKey) -> Verdict | None:
    """The verdict kept under exactly `key`: same argv, flags, versions and mode (never one recorded under other
    flags or versions). For the memory-only+kernels mode, a full compile's decided verdict under the same argv,
    flags and versions stands too (it decided HBM and VMEM at once); a full compile's look-up never takes the
    faster mode's, and a full compile that ran out of time does not stop the faster mode from deciding."""
    kept = verdicts.get(key.digest())
    if kept is not None and kept.key == key.as_dict():
        return kept
    if key.mode != MODE_FULL:
        full = replace(key, mode=MODE_FULL)
        kept = verdicts.get(full.digest())
        if kept is not None and kept.key == full.as_dict() and not kept.undecided:
            return kept
    return None


def retry_undecided() -> bool:
    """Whether the user asked to compile again the steps kept as undecided (RETRY_ENV=1)."""
    return os.environ.get(RETRY_ENV, "") not in ("", "0")


def read(path: Path) -> tuple[dict[str, Verdict], str | None]:
    """The verdicts in `path` and one line when the file holds none this program can use (an older format,
    not JSON): it is then read as no verdict, never as an error."""
    if not path.is_file():
        return {}, None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return {}, f"{path.name} is not readable JSON ({str(error)[:30]}): read as no verdict"
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return {}, f"{path.name} predates complete keys: its verdicts are not used (compiled again)"
    verdicts: dict[str, Verdict] = {}
    for digest, entry in (document.get("verdicts") or {}).items():
        try:
            verdicts[digest] = Verdict(**entry)
        except TypeError:
            continue                     # an entry this version does not know: no verdict for that step
    return verdicts, None


def load(path: Path) -> dict[str, Verdict]:
    """The verdicts in `path` ({} when there is no file or none this program can use; see read)."""
    return read(path)[0]


def record(path: Path, key: CompileKey, verdict: Verdict) -> None:
    """Add or replace one verdict under its complete key, keeping the others (an older file's are dropped)."""
    verdicts = load(path)
    verdicts[key.digest()] = replace(verdict, key=key.as_dict(),
                                     date=verdict.date or datetime.date.today().isoformat())
    document: dict[str, Any] = {
        "about": "XLA's verdicts on compiled training steps (core/compile_verdicts.py); keep or commit it",
        "format": FORMAT,
        "verdicts": {digest: asdict(value) for digest, value in sorted(verdicts.items())}}
    path.write_text(json.dumps(document, indent=1) + "\n")

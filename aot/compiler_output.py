"""What XLA and MaxText said about a compile, read from train_compile's output and libtpu's INFO log: the verdict
(fits, peak, HBM, the refusal's own line) and, for a memory-only compile, XLA's memory figures at the end of its
HLO passes. Pure functions: the tests feed them canned output. aot/runner.py runs the compile and reads with these.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

_SIZE = r"([\d.]+)\s*([KMGT]?)(?:i?B)?"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _size(number: str, unit: str) -> int:
    # libtpu prints binary sizes with one letter: 31.25G = 31.25 GiB.
    return int(float(number) * _UNITS[unit])


@dataclass(frozen=True)
class CompilerVerdict:
    compiled: bool
    peak_bytes_per_device: int | None
    hbm_bytes: int | None
    reason: str | None
    breakdown: Mapping[str, int] = field(default_factory=dict)
    # When it does not fit: the bytes XLA says the step needs ("Used X of Y hbm").
    required_bytes: int | None = None
    # When XLA had to recompute to fit (its own rematerialization pass, run when the step is over 95 % of the
    # limit): what the step needed before ("rematerialization hbm reduction: BEFORE => AFTER").
    before_remat_bytes: int | None = None


def parse_compiler_output(output: str, libtpu_log: str, returncode: int | None) -> CompilerVerdict:
    """The verdict from train_compile's output (stdout+stderr) and libtpu's INFO log.

    compiled: MaxText printed "Jitting and compilation complete!" and exited 0.
    peak: libtpu's "Total hbm usage >= X" (the largest, if several programs were compiled).
    required: when the step does not fit, XLA's "Used X of Y hbm" (libtpu's log; the RESOURCE_EXHAUSTED error says
    "HLO temporaries (X) exceeds available HBM (Y)"; its memory report lists the parameters among them).
    before_remat: XLA's "rematerialization hbm reduction: X => Y" (the largest X): the step's need before the
    compiler recomputed tensors to squeeze it under the limit; a step that only fits that way runs slower.
    hbm: the per-device limit XLA compiled against ("program HBM usage: P / LIMIT", or Y above).
    reason: the first line that explains a failure, in XLA's or MaxText's own words."""
    text = libtpu_log + "\n" + output
    breakdown: dict[str, int] = {}
    peak = hbm = None
    totals = list(re.finditer(r"Total hbm usage >= " + _SIZE + r":\s*\n\s*reserved\s+" + _SIZE
                              + r"\s*\n\s*program\s+" + _SIZE + r"\s*\n\s*arguments\s+" + _SIZE, libtpu_log))
    if totals:
        best = max(totals, key=lambda m: _size(m.group(1), m.group(2)))
        peak = _size(best.group(1), best.group(2))
        breakdown = {"reserved": _size(best.group(3), best.group(4)), "program": _size(best.group(5), best.group(6)),
                     "arguments": _size(best.group(7), best.group(8))}
    limit = re.search(r"program HBM usage: " + _SIZE + r" / " + _SIZE, libtpu_log)
    if limit:
        hbm = _size(limit.group(3), limit.group(4))
    used = (re.search(r"Used " + _SIZE + r" of " + _SIZE + r" hbm", text)
            or re.search(r"HLO temporaries \(" + _SIZE + r"\) exceeds available HBM \(" + _SIZE + r"\)", text))
    compiled = returncode == 0 and "Jitting and compilation complete!" in output
    remats = [_size(m.group(1), m.group(2)) for m in
              re.finditer(r"rematerialization hbm reduction:\s*" + _SIZE + r"\s*=>\s*" + _SIZE, libtpu_log)]
    required = None
    if used and not compiled:
        required, hbm = _size(used.group(1), used.group(2)), _size(used.group(3), used.group(4))
        peak, breakdown = None, {}
    return CompilerVerdict(compiled=compiled, peak_bytes_per_device=peak if compiled else None, hbm_bytes=hbm,
                           reason=None if compiled else failure_reason(output, returncode), breakdown=breakdown,
                           required_bytes=required, before_remat_bytes=max(remats) if remats else None)


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Exhausted))(?::\s*(.*))?$")


def failure_reason(output: str, returncode: int | None) -> str:
    """MaxText's or XLA's own line for a failed compile."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "RESOURCE_EXHAUSTED" in line:
            return line[line.index("RESOURCE_EXHAUSTED"):]
    for line in lines:
        # libtpu rejects LIBTPU_INIT_ARGS by printing this and exiting the process.
        if line.startswith("ERROR: ") and "flag" in line:
            return line
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line)
        if match and match.group(1) not in ("KeyboardInterrupt",):
            return line
    if returncode is None:
        return "the compile was stopped before it finished"
    tail = lines[-1] if lines else "no output"
    return f"train_compile exited with status {returncode}: {tail}"


# libtpu's INFO log marks the end of XLA's HLO passes (memory assignment and rematerialization included) with this
# line; what follows is code generation for every fusion (minutes to tens of minutes), which decides nothing about
# HBM: a step that does not fit fails before it (RESOURCE_EXHAUSTED, seconds into the compile).
HLO_PASSES_DONE = "HLO_PASSES stage duration"


def memory_assignment(libtpu_log: str) -> dict[str, int] | None:
    """XLA's memory figures at the end of its HLO passes, from libtpu's INFO log, or None before that point:
    program: the latency-hiding scheduler's peak of the program's own buffers ("LatencyHidingScheduler current
    memory usage: N bytes", the last before the passes end); arguments: the step's inputs ("... rematerialization
    limit ... - (arguments (A) - aliased_output(O))"); need: program + arguments, or XLA's own figure before
    recomputing when it ran its rematerialization ("rematerialization hbm reduction: X => Y": X; Y is `after`)."""
    end = libtpu_log.find(HLO_PASSES_DONE)
    if end < 0:
        return None
    text = libtpu_log[:end]
    scheduled = re.findall(r"LatencyHidingScheduler current memory usage: (\d+) bytes", text)
    arguments = re.search(r"rematerialization limit .*?arguments \(" + _SIZE + r"\)", text)
    if not scheduled:
        return None
    out = {"program": int(scheduled[-1])}
    if arguments:         # libtpu prints it only when the step reaches its rematerialization pass
        out["arguments"] = _size(arguments.group(1), arguments.group(2))
        out["need"] = out["program"] + out["arguments"]
    remats = [(_size(m.group(1), m.group(2)), _size(m.group(3), m.group(4))) for m in
              re.finditer(r"rematerialization hbm reduction:\s*" + _SIZE + r"\s*=>\s*" + _SIZE, text)]
    if remats:
        before, after = max(remats)
        out.update(need=before, after=after)
    limit = re.search(r"rematerialization limit .*?= 95% hbm \(" + _SIZE + r"\)", text)
    if limit:             # XLA's per-device limit, from the 95 % it recomputes down to
        out["limit"] = int(_size(limit.group(1), limit.group(2)) / 0.95)
    return out


def over_the_limit(assigned: Mapping[str, int]) -> bool:
    """XLA's assignment is still over its limit after recomputing: it is about to refuse the step
    (RESOURCE_EXHAUSTED follows the HLO passes, how soon depends on the machine's load)."""
    return "limit" in assigned and assigned.get("after", assigned["need"]) > assigned["limit"]

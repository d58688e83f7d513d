"""A run the trainer's CLIs refuse over HBM names the nearest runs that fit as flags, before why; each suggestion,
added to the refused command line, plans (trainer.entrypoint.prepare)."""
from __future__ import annotations

import re

import pytest

from core.errors import PlanError
from trainer.entrypoint import prepare

OUT = ["--base-output-directory", "gs://bucket/out"]
# Far over HBM whatever the estimate's refinements: 16 x 8192 tokens of 8B logits per device; 70B on 16 chips.
REFUSED = [
    ["--model", "llama3-8b", "--topology", "2x4", "--slices", "1", "--per-device-batch-size", "16"],
    ["--model", "llama3-70b", "--topology", "2x4", "--slices", "2"],
    ["--model", "llama3-8b", "--topology", "2x2", "--slices", "1", "--weight-dtype", "float32",
     "--per-device-batch-size", "4"],
]


@pytest.mark.parametrize("argv", REFUSED, ids=[" ".join(a) for a in REFUSED])
def test_each_suggestion_plans(argv):
    with pytest.raises(PlanError) as refused:
        prepare(argv + OUT)
    message = str(refused.value)
    found = re.match(r"nearest that fits: (.*?); why: ", message)
    assert found, message
    for option in found.group(1).split(", or "):
        flags = re.sub(r" \(\+\d+ chips\)$", "", option).split()
        assert flags and flags[0].startswith("--"), option
        prepare(argv + flags + OUT)                 # raises unless it plans

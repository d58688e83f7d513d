"""A run the planner refuses over memory is refused with the nearest configurations that fit, written as the config
keys to set (core/nearest_fits.py advise), and each suggestion really builds."""
from __future__ import annotations

import re

import pytest

from infra.config import ConfigError, build
from preview.stack_files import load_stack_config
from tests.conftest import REPO

SUGGESTION = re.compile(r"nearest that fits: (.*?)\n\s+why: ", re.DOTALL)
KEY_VALUE = re.compile(r"tpu-multislice:(\w+)=(\S+)")


def _refusal(stack: str, **overrides: str) -> tuple[dict, str]:
    raw = {**load_stack_config(stack, REPO), **overrides}
    with pytest.raises(ConfigError) as refused:
        build(raw)
    [line] = [p for p in refused.value.problems if " is over HBM: " in p.split("\n")[0]]
    return raw, line


# Far enough over HBM that no estimate refinement lets them fit: 16 x 8192 tokens of 8B logits per device, and 70B
# on 16 chips.
@pytest.mark.parametrize("stack, overrides", [
    ("prod", {"perDeviceBatchSize": "16"}),
    ("dev", {"model": "llama3-70b"}),
    ("jobset", {"perDeviceBatchSize": "16"}),
])
def test_every_suggestion_is_config_that_builds(stack, overrides):
    raw, line = _refusal(stack, **overrides)
    found = SUGGESTION.search(line)
    assert found, line
    options = " ".join(found.group(1).split()).split(", or ")
    assert options
    for option in options:
        keys = dict(KEY_VALUE.findall(option))
        assert keys, option
        build({**raw, **keys})          # raises if the suggestion does not fit after all


def test_the_first_line_is_short_and_the_why_follows():
    """What is wrong on the first line, the nearest fit on the next, then the planner's why wrapped; every line
    within 100 columns (behind `python -m preview: `) except the compile command, which is copied whole."""
    _, text = _refusal("prod", perDeviceBatchSize="16")
    lines = text.split("\n")
    assert lines[0] == "tpu-multislice:perDeviceBatchSize='16' is over HBM: llama3-8b on 2 x v6e-16"
    assert re.fullmatch(r" {4}nearest that fits: tpu-multislice:perDeviceBatchSize=\d+", lines[1]), lines[1]
    assert lines[2].startswith("    why: llama3-8b does not fit")
    [command] = [line for line in lines if "python -m preview.compile" in line]
    assert command.strip().startswith("python -m preview.compile --model llama3-8b")
    # The command alone on its line, as it is copied; what follows (how a stack keeps a step that compiles) below.
    assert command.endswith("--no-memory-check")
    after = " ".join(line.strip() for line in lines[lines.index(command) + 1:])
    assert "memoryCheck: false" in after
    assert len("python -m preview: ") + len(lines[0]) <= 100      # the only line the prefix goes in front of
    assert all(len(line) <= 100 for line in lines if line != command)


def test_elastic_minimum_is_only_suggested_where_the_key_applies():
    _, line = _refusal("jobset", perDeviceBatchSize="16")
    assert "elasticMinSlices" not in line

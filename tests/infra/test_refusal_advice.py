"""A run the planner refuses over memory is refused with the nearest configurations that fit, written as the config
keys to set (core/planner.py advise), and each suggestion really builds."""
from __future__ import annotations

import re

import pytest

from infra.config import ConfigError, build
from preview.stack_files import load_stack_config
from tests.conftest import REPO

SUGGESTION = re.compile(r"nearest that fits: (.*?); why: ")
KEY_VALUE = re.compile(r"tpu-multislice:(\w+)=(\S+)")


def _refusal(stack: str, **overrides: str) -> tuple[dict, str]:
    raw = {**load_stack_config(stack, REPO), **overrides}
    with pytest.raises(ConfigError) as refused:
        build(raw)
    [line] = [p for p in refused.value.problems if "refused by the planner" in p]
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
    options = found.group(1).split(", or ")
    assert options
    for option in options:
        keys = dict(KEY_VALUE.findall(option))
        assert keys, option
        build({**raw, **keys})          # raises if the suggestion does not fit after all


def test_what_to_do_comes_before_why_and_stays_one_line():
    _, line = _refusal("prod", perDeviceBatchSize="16")
    assert "\n" not in line
    assert line.index("nearest that fits") < line.index("why: llama3-8b does not fit")
    assert re.search(r"nearest that fits: tpu-multislice:perDeviceBatchSize=\d", line), line


def test_elastic_minimum_is_only_suggested_where_the_key_applies():
    _, line = _refusal("jobset", perDeviceBatchSize="16")
    assert "elasticMinSlices" not in line

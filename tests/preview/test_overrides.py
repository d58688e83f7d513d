"""`--set KEY=VALUE` behaves like `pulumi config set --path` for this project's keys."""
from __future__ import annotations

import pytest

from infra.config import build
from preview.overrides import OverrideError, apply_override, apply_overrides

PROD_LIKE = {"project": "my-tpu-project", "zone": "us-east5-b", "slices": "2", "dcn": "true",
             "dcnSubnets": ["10.50.0.0/16", "10.60.0.0/16"]}


def test_plain_key_is_set_as_a_string_like_pulumi_stores_it():
    raw = apply_override(PROD_LIKE, "slices=8")
    assert raw["slices"] == "8" and PROD_LIKE["slices"] == "2"
    assert build(raw).tpu.slices == 8


def test_namespace_prefix_is_accepted():
    assert apply_override(PROD_LIKE, "tpu-multislice:capacity=spot")["capacity"] == "spot"


def test_list_items_are_replaced_or_appended():
    raw = apply_overrides(PROD_LIKE, ["dcnSubnets[0]=10.70.0.0/16", "dcnSubnets[2]=10.80.0.0/16"])
    assert raw["dcnSubnets"] == ["10.70.0.0/16", "10.60.0.0/16", "10.80.0.0/16"]
    assert build(raw).network.dcn_subnets == ("10.70.0.0/16", "10.60.0.0/16", "10.80.0.0/16")


def test_an_unset_list_starts_from_its_default():
    raw = apply_override({"project": "my-tpu-project", "zone": "us-east5-b"}, "dcnSubnets[1]=10.61.0.0/16")
    assert raw["dcnSubnets"] == ["10.50.0.0/16", "10.61.0.0/16"]


def test_value_may_contain_equals_signs():
    assert apply_override({}, "bucketName=a=b")["bucketName"] == "a=b"


@pytest.mark.parametrize("assignment, message", [
    ("slices", "expected KEY=VALUE"),
    ("dcnSubnets[5]=10.70.0.0/16", "past the end"),
    ("slices[0]=1", "not a list"),
    ("dcnSubnets[0][1]=x", "no nested lists"),
    ("bad key=1", "not a config key"),
])
def test_malformed_assignments_are_refused(assignment, message):
    with pytest.raises(OverrideError, match=message):
        apply_override(PROD_LIKE, assignment)


def test_an_entry_of_a_map_key_is_set_like_pulumi_config_set_path():
    raw = apply_overrides({"maxtextSettings": {"learning_rate": 1e-4}},
                          ["maxtextSettings.warmup_steps_fraction=0.05",
                           "tpu-multislice:maxtextSettings.learning_rate=3e-5"])
    assert raw["maxtextSettings"] == {"learning_rate": "3e-5", "warmup_steps_fraction": "0.05"}

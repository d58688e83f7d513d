"""The recipe data (core/recipes.py) and where it goes: LIBTPU_INIT_ARGS, the MaxText argv, the offline plan."""
import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from core.errors import PlanError
from core.maxtext_args import RunSettings, maxtext_overrides, pre_train_argv
from core.planner import PlanRequest, plan
from core.presets import PRESETS
from core.recipes import (NO_RECIPE, NOT_ADOPTED, RECIPES, Citation, recipe_for, recipe_kernel_settings,
                          recipe_summary)
from core.tpu_catalog import CATALOG
from core.tpu_env import libtpu_init_args

TPU = RunSettings(run_name="r", base_output_directory="gs://b/o", steps=100, checkpoint_period=10)
CPU = RunSettings(run_name="r", base_output_directory="out", steps=30, checkpoint_period=5, hardware="cpu")


def installed_base_yml() -> dict:
    """MaxText's base.yml as installed (found without importing maxtext, whose import pulls in JAX)."""
    spec = importlib.util.find_spec("maxtext")
    assert spec and spec.submodule_search_locations, "maxtext is not installed (scripts/install_maxtext.sh)"
    path = Path(next(iter(spec.submodule_search_locations))) / "configs" / "base.yml"
    return yaml.safe_load(path.read_text())


def keys(overrides: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides)


# ---- the data ------------------------------------------------------------------------------------------------
def citations():
    for recipe in RECIPES:
        yield recipe.source
        yield recipe.workload


@pytest.mark.parametrize("citation", list(citations()), ids=str)
def test_every_row_is_cited_to_a_commit(citation: Citation):
    assert re.fullmatch(r"[\w-]+/[\w.-]+", citation.repo)
    assert re.fullmatch(r"[0-9a-f]{40}", citation.commit)
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", citation.date)
    assert citation.path and not citation.path.startswith("/")


def test_one_recipe_per_preset_and_generation_and_only_known_ones():
    pairs = [(r.preset, r.generation) for r in RECIPES]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {("llama3-8b", "v6e"), ("llama3-70b", "v6e")}
    for name, generation in pairs + list(NOT_ADOPTED):
        assert name in PRESETS and generation in CATALOG
    # qwen3-0.6b has no tuned recipe anywhere (and says so); tiny and tiny-text never run on a TPU.
    assert set(NO_RECIPE) == {"qwen3-0.6b", "tiny", "tiny-text"}
    assert not [r for r in RECIPES if r.preset in NO_RECIPE]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"{r.preset}-{r.generation}")
def test_the_preset_follows_its_recipe(recipe):
    """The preset's tuned defaults are the recipe's (so a difference in the plan comes from the planner or the
    user, which recipe_summary reports as such)."""
    model = PRESETS[recipe.preset]
    ours = {"per_device_batch_size": str(int(model.per_device_batch_size)), "max_target_length":
            str(model.max_target_length), "attention": model.attention, "remat_policy": model.remat_policy,
            "weight_dtype": model.weight_dtype, "offload": ",".join(model.remat_offload)}
    assert {k: recipe.planned_settings[k] for k in ours} == ours
    assert recipe.measurement and str(recipe.measurement.tflops_per_device) in recipe.measurement.quote
    assert recipe.model_name.startswith("llama3.1")    # the difference recipe_summary must report


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"{r.preset}-{r.generation}")
def test_left_out_flags_are_in_the_recipe_and_never_sent(recipe):
    published = [flag for group in recipe.flag_groups for flag in group.flags]
    for item in recipe.left_out:
        assert item.reason
        for flag in item.flags:
            assert flag in published, f"{flag} is not a flag of the recipe"
            for slices in (1, 2):
                assert flag not in libtpu_init_args(recipe.preset, CATALOG[recipe.generation], slices, 2).split()
    # Everything else of the recipe is sent: its non-DCN flags on one slice, all of them across slices.
    dropped = {flag for item in recipe.left_out for flag in item.flags}
    one = libtpu_init_args(recipe.preset, CATALOG[recipe.generation], 1).split()
    two = libtpu_init_args(recipe.preset, CATALOG[recipe.generation], 2).split()
    assert set(one) == {f for g in recipe.flag_groups if not g.dcn for f in g.flags} - dropped
    assert set(published) - dropped <= set(two)


# ---- the MaxText argv --------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"{r.preset}-{r.generation}")
def test_kernel_settings_exist_in_the_installed_maxtext_base_yml(recipe):
    """A key MaxText does not know is refused at start-up (or, worse, ignored); values must parse as the
    default's type."""
    base = installed_base_yml()
    for key, value in recipe.kernel_settings.items():
        assert key in base, f"{key} is not a key of the installed MaxText's base.yml"
        default = base[key]
        if isinstance(default, bool):
            assert value in ("true", "false")
        elif isinstance(default, int):
            assert int(value) > 0


def test_tuned_kernel_settings_reach_the_launched_argv():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    argv = keys(pre_train_argv(p, TPU, "base.yml")[2:])
    recipe = recipe_for("llama3-8b", "v6e")
    assert {k: argv[k] for k in recipe.kernel_settings} == dict(recipe.kernel_settings)
    assert argv["sa_block_q"] == "2048" and argv["use_iota_embed"] == "true"


def test_no_kernel_settings_without_a_recipe_on_cpu_or_without_flash():
    assert "sa_block_q" not in keys(maxtext_overrides(plan(PlanRequest("qwen3-0.6b", "v6e", "4x4")), TPU))
    assert "sa_block_q" not in keys(maxtext_overrides(plan(PlanRequest("llama3-8b", "v5p", "2x2x2")), TPU))
    # The local CPU run: the tiny model and no splash kernel.
    local = keys(maxtext_overrides(plan(PlanRequest("tiny", "v6e", "2x4", slices=2)), CPU))
    assert not [k for k in local if k.startswith("sa_") or k == "use_iota_embed"]
    assert "sa_block_q" not in keys(maxtext_overrides(plan(PlanRequest("llama3-8b", "v6e", "4x4")), CPU))
    dot = keys(maxtext_overrides(plan(PlanRequest("llama3-8b", "v6e", "8x8", attention="dot_product",
                                                  per_device_batch_size=1)), TPU))
    assert "sa_block_q" not in dot and dot["use_iota_embed"] == "true"
    assert recipe_kernel_settings("llama3-8b", "v6e", "dot_product") == {"use_iota_embed": "true"}


def test_run_extra_may_replace_a_kernel_setting_but_not_a_planned_key():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4"))
    out = maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, extra={"sa_block_q": "1024"}))
    assert keys(out)["sa_block_q"] == "1024" and len(out) == len(keys(out))
    with pytest.raises(PlanError, match="would replace planned values"):
        maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, extra={"remat_policy": "full"}))


# ---- the offline plan's lines ------------------------------------------------------------------------------
def test_summary_names_the_recipe_its_number_and_the_llama_3_1_difference():
    lines = recipe_summary("llama3-8b", "v6e", "4x4")
    text = "\n".join(lines)
    assert "training/trillium/Llama3.1-8B-MaxText/v6e-16/README.md @ ac200ebc (2026-06-27)" in lines[0]
    assert "419.485 TFLOP/s/device" in text and "not measured by us" in text
    assert "llama3.1-8b" in text and "RoPE" in text
    assert "topology" not in text.replace("recipe's own number", "")     # the recipe's own slice: no topology line
    assert "2a886c8_chip_config_name" in text and "Continuation fusion" in text


def test_summary_of_a_plan_says_what_the_planner_changed_and_why():
    p = plan(PlanRequest("llama3-70b", "v6e", "8x8", slices=2, per_device_batch_size=1))
    text = "\n".join(recipe_summary(p, "v6e", "8x8"))
    assert "topology 2 x v6e 8x8 vs the recipe's 1 x v6e-32 (4x8): the recipe never ran on it" in text
    assert "per_device_batch_size 1 vs the recipe's 2 (asked for explicitly)" in text
    assert "across slices (dcn data 2 x fsdp 1) we add DATA_PARALLEL_OVERLAP" in text
    # A value the planner changed carries the planner's note instead; the recipe's own values are not listed.
    lowered = dataclasses.replace(p, slices=1, dcn_data=1, min_slices=1,
                                  notes=("per_device_batch_size lowered from 2 to 1 to fit HBM",))
    text = "\n".join(recipe_summary(lowered, "v6e", "8x8"))
    assert "per_device_batch_size 1 vs the recipe's 2 (per_device_batch_size lowered from 2 to 1 to fit HBM)" in text
    assert "across slices" not in text and "DATA_PARALLEL_OVERLAP not sent on one slice" in text
    same = dataclasses.replace(lowered, per_device_batch_size=2, notes=())
    assert "per_device_batch_size" not in "\n".join(recipe_summary(same, "v6e", "8x8"))


def test_summary_without_a_recipe_says_so():
    assert recipe_summary("qwen3-0.6b", "v6e", "4x4")[0].startswith("recipe: none for qwen3-0.6b on v6e")
    assert "MaxText defaults" in recipe_summary("qwen3-0.6b", "v6e", "4x4")[0]
    assert "ironwood/llama3.1-70b" in recipe_summary("llama3-70b", "tpu7x", "4x4x4")[0]
    assert "none for llama3-8b on v5p" in recipe_summary("llama3-8b", "v5p", "2x2x2")[0]

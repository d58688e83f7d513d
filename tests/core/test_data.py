"""Real data (core/data.py): each model's own tokenizer, the dataset types offered, and how they resume.

Sources (MaxText 0.2.5 as installed; re-read here from the package where a test can):
- maxtext/assets/tokenizers/: tokenizer_llama3.tiktoken, qwen3-tokenizer/ (the tokenizers the wheel ships).
- maxtext/configs/models/qwen3-0.6b.yml: `tokenizer_type: "huggingface"`.
- maxtext/configs/base.yml: "hf pipeline only supports huggingface type"; `grain_use_elastic_iterator`:
  "For elastic training, set to this true and packing=false".
- maxtext/common/checkpointing.py `save_checkpoint`: the data iterator is saved (checkpointables["iter"]) only
  for dataset_type == "grain".
"""
from __future__ import annotations

import importlib.resources
import inspect

import pytest

from core import data
from core.errors import PlanError
from core.maxtext_args import RunSettings, maxtext_overrides
from core.planner import PlanRequest, plan
from core.presets import PRESETS

maxtext = pytest.importorskip("maxtext")
ASSETS = importlib.resources.files("maxtext") / "assets" / "tokenizers"


def _keys(argv):
    return dict(item.split("=", 1) for item in argv)


def test_every_preset_has_a_tokenizer_that_maxtext_ships():
    assert set(data.TOKENIZERS) == set(PRESETS)
    for model, tok in data.TOKENIZERS.items():
        assert (ASSETS / tok.asset).exists(), f"{model}: {tok.asset} not in maxtext's assets"


def test_llama3_tokenizer_fills_the_llama3_vocabulary_exactly():
    """Llama 3's vocab_size (128,256) is the tiktoken BPE's 128,000 ranks + 256 special tokens; the Llama-2
    sentencepiece model MaxText used to default to has 32,000."""
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    tok = build_tokenizer(str(ASSETS / data.LLAMA3.asset), data.LLAMA3.type, True, True, None)
    assert tok.model.n_vocab == PRESETS["llama3-8b"].vocab_size == PRESETS["llama3-70b"].vocab_size == 128256
    ids = tok.encode("Spot capacity trains too.")
    assert ids and max(ids) < 128256


def test_qwen3_tokenizer_fits_the_qwen3_vocabulary():
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    path = importlib.resources.files("maxtext") / "configs" / "models" / "qwen3-0.6b.yml"
    assert 'tokenizer_type: "huggingface"' in path.read_text()
    tok = build_tokenizer(str(ASSETS / data.QWEN3.asset), data.QWEN3.type, False, False, None)
    ids = tok.encode("Spot capacity trains too.")
    assert ids and max(ids) < PRESETS["qwen3-0.6b"].vocab_size


@pytest.mark.parametrize("model, tokenizer, expected", [
    ("llama3-8b", "tokenizer.llama2", "tokenizer_llama3.tiktoken"),
    ("llama3-70b", "gs://b/tok/qwen3-tokenizer", "tokenizer_llama3.tiktoken"),
    ("qwen3-0.6b", "tokenizer_llama3.tiktoken", "qwen3-tokenizer"),
])
def test_another_models_tokenizer_is_refused_in_one_line(model, tokenizer, expected):
    with pytest.raises(PlanError) as err:
        data.check_dataset(model, "grain", "gs://b/*.arrayrecord", tokenizer, {})
    message = str(err.value)
    assert "\n" not in message and f"tokenizer_path={tokenizer!r}" in message and expected in message


def test_the_models_own_tokenizer_reaches_maxtext():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    keys = _keys(maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, dataset_type="grain",
                                                  dataset_path="gs://b/c4/*.arrayrecord")))
    assert (keys["tokenizer_path"], keys["tokenizer_type"]) == ("tokenizer_llama3.tiktoken", "tiktoken")
    copy = _keys(maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10, dataset_type="grain",
                                                  dataset_path="gs://b/c4/*", tokenizer_path="gs://b/t/tokenizer_llama3.tiktoken")))
    assert copy["tokenizer_path"] == "gs://b/t/tokenizer_llama3.tiktoken"
    synthetic = _keys(maxtext_overrides(p, RunSettings("r", "gs://b", 100, 10)))
    assert "tokenizer_path" not in synthetic


@pytest.mark.parametrize("dataset_type, path, pattern", [
    ("grain", "", "dataset_type=grain needs a dataset path"),
    ("tfds", "c4/en:3.1.0", "dataset_type=tfds is not offered: needs TensorFlow"),
    ("hf", "allenai/c4", "dataset_type=hf is not offered: restarts from its first record"),
    ("synthetic", "gs://b/x", "dataset_type=synthetic, which reads no files"),
    ("webdataset", "x", "unknown"),
])
def test_dataset_types_that_cannot_train_or_resume_are_refused(dataset_type, path, pattern):
    with pytest.raises(PlanError, match=pattern):
        data.check_dataset("llama3-8b", dataset_type, path, "", {})


def test_only_grains_position_is_saved_with_the_model():
    """Why tfds and hf are gone: MaxText checkpoints the data iterator for grain only."""
    from maxtext.common import checkpointing

    source = inspect.getsource(checkpointing.save_checkpoint)
    assert 'checkpointables["iter"]' in source and '"dataset_type", None) == "grain"' in source
    assert data.DATASET_TYPES == ("synthetic", "grain")


def test_elastic_runs_are_refused_grain_data_until_maxtext_and_grain_agree():
    """MaxText 0.2.5 saves Grain's position as one global state only when the loader's iterator is an
    ElasticIterator (maxtext/common/grain_utility.py `for_save`: isinstance(data_iterator.local_iterator,
    ElasticIterator)); Grain 0.2.18's ElasticIterator is a dataset whose __iter__ returns another object
    (`return self._default_iterator`), so the state is saved per host and a resize cannot restore it (seen on the
    local run: "4 processes found in Grain checkpoint directory ..., but only 2 jax processes"). Until that
    changes, an elastic run on grain is refused; this test fails when either side changes, to re-check."""
    from grain.experimental import ElasticIterator
    from maxtext.common import grain_utility

    assert "isinstance(data_iterator.local_iterator, ElasticIterator)" in inspect.getsource(grain_utility.for_save)
    assert "return self._default_iterator" in inspect.getsource(ElasticIterator.__iter__)
    elastic = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1))
    run = RunSettings("r", "gs://b", 100, 10, dataset_type="grain", dataset_path="gs://b/*.arrayrecord")
    with pytest.raises(PlanError, match="dataset_type=grain cannot resume after an elastic resize") as err:
        maxtext_overrides(elastic, run)
    assert "\n" not in str(err.value)
    maxtext_overrides(elastic, RunSettings("r", "gs://b", 100, 10))             # synthetic data stays elastic
    fixed = _keys(maxtext_overrides(plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2)), run))
    assert "grain_use_elastic_iterator" not in fixed and fixed["dataset_type"] == "grain"


def test_the_cpu_test_model_reads_pretokenized_data_only():
    with pytest.raises(PlanError, match="tokenize_train_data=false"):
        data.check_dataset("tiny", "grain", "/d/*.arrayrecord", "", {})
    data.check_dataset("tiny", "grain", "/d/*.arrayrecord", "", {"tokenize_train_data": "false"})


def test_the_workers_find_the_tokenizers_maxtext_ships(tmp_path):
    """MaxText 0.2.5 installed from its wheel looks for its tokenizers under <package>/src/maxtext/assets
    (maxtext/utils/globals.py MAXTEXT_ASSETS_ROOT: the repo root is the package directory when no .git is next to
    it), which does not exist; the trainer points it at the package's assets/ (maxtext_runtime.pin_assets_root)."""
    import os
    import subprocess
    import sys

    probe = ("import os, sys; {pin}from maxtext.utils import globals as g; "
             "print(os.path.exists(os.path.join(g.MAXTEXT_ASSETS_ROOT, 'tokenizers', 'tokenizer_llama3.tiktoken')))")
    env = {k: v for k, v in os.environ.items() if k != "MAXTEXT_ASSETS_ROOT"}
    repo = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = repo

    def found(pin: str) -> str:
        out = subprocess.run([sys.executable, "-c", probe.format(pin=pin)], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip().splitlines()[-1]

    assert found("") == "False"                       # MaxText's own default, installed from the wheel
    assert found("from trainer.maxtext_runtime import pin_assets_root; pin_assets_root(); ") == "True"


def test_an_elastic_run_is_judged_elastic_at_every_group_size():
    """The resized plan of an elastic run at its minimum is no longer `elastic` (core.planner at_slices); the
    worker passes the full plan's elasticity, so the grain refusal (and the data keys) do not flip with the
    group's size."""
    from trainer.worker import request_to_dict, run_to_dict, worker_plan_and_argv

    request = PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1)
    run = RunSettings("r", "gs://b", 100, 10, dataset_type="grain", dataset_path="gs://b/*.arrayrecord")
    config = {"plan_request": request_to_dict(request), "run": run_to_dict(run)}
    for world in (4, 8):                                   # one slice of 4 hosts, two slices
        with pytest.raises(PlanError, match="elastic resize"):
            worker_plan_and_argv(config, world, "base.yml")
    assert not plan(request).at_slices(1).elastic

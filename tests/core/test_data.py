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

import dataclasses

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


def test_elastic_runs_read_arrayrecord_through_grains_global_position():
    """An elastic run on grain data sets MaxText's grain_use_elastic_iterator and packing=false (base.yml: "For
    elastic training, set to this true and packing=false"); a fixed-size run keeps MaxText's defaults."""
    elastic = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1))
    run = RunSettings("r", "gs://b", 100, 10, dataset_type="grain", dataset_path="gs://b/*.arrayrecord")
    keys = _keys(maxtext_overrides(elastic, run))
    assert (keys["grain_use_elastic_iterator"], keys["packing"], keys["grain_file_type"]) == ("true", "false",
                                                                                              "arrayrecord")
    fixed = _keys(maxtext_overrides(plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2)), run))
    assert "grain_use_elastic_iterator" not in fixed and "packing" not in fixed and fixed["dataset_type"] == "grain"
    maxtext_overrides(elastic, RunSettings("r", "gs://b", 100, 10))             # synthetic data stays elastic


@pytest.mark.parametrize("path, extra, pattern", [
    ("gs://b/*.parquet", {}, "dataset_format=parquet cannot keep its position through an elastic resize"),
    ("gs://b/a*.arrayrecord,0.5;gs://b/c*.arrayrecord,0.5", {}, "is a weighted mixture"),
    ("gs://b/*.arrayrecord", {"packing": "true"}, "packing=true cannot be set on an elastic run"),
    ("gs://b/*.arrayrecord", {"use_truncation": "false"}, "use_truncation=false splits long documents"),
])
def test_what_an_elastic_position_cannot_address_is_refused(path, extra, pattern):
    """Parquet is read as per-host file shares (maxtext/input_pipeline/grain_data_processing.py get_datasets: an
    IterDataset, no index), mixtures are IterDataset.mix, and chunking (TokenizeAndChunk, a FlatMap) breaks the
    one-record-one-row index ElasticIterator counts in."""
    with pytest.raises(PlanError, match=pattern) as err:
        data.check_dataset("llama3-8b", "grain", path, "", extra, elastic=True)
    assert "\n" not in str(err.value)
    data.check_dataset("llama3-8b", "grain", path, "", {}, elastic=False) if ";" not in path else None


@pytest.mark.parametrize("path, given, expected", [
    ("gs://b/c4/*.parquet", "", "parquet"), ("gs://b/c4/*.arrayrecord", "", "arrayrecord"),
    ("gs://b/c4/*.array_record", "", "arrayrecord"), ("gs://b/c4/part-*", "parquet", "parquet"),
])
def test_the_file_format_is_named_or_read_from_the_suffix(path, given, expected):
    assert data.dataset_format(path, given) == expected


def test_a_path_without_a_known_suffix_is_maxtexts_default_format():
    assert data.dataset_format("gs://b/c4/part-*") == "arrayrecord"
    with pytest.raises(PlanError, match="dataset_format='jsonl' unknown"):
        data.dataset_format("gs://b/c4/part-*", "jsonl")


def _elastic_hosts(count, records=1000, batch=8):
    from grain import MapDataset
    from grain.python import ShardOptions
    from grain.experimental import ElasticIterator

    return [iter(ElasticIterator(MapDataset.range(records), batch, ShardOptions(i, count))) for i in range(count)]


def test_an_elastic_position_saved_on_four_hosts_restores_on_two_without_a_gap_or_a_repeat(tmp_path):
    """MaxText 0.2.5 saves the iterator Grain 0.2.18's ElasticIterator returns per host (grain_utility.for_save
    recognizes only the ElasticIterator dataset itself), and its for_restore refuses 4 files on 2 hosts; every
    file holds the same global index, so the trainer restores all hosts from host 0's
    (trainer/maxtext_runtime.py install_elastic_grain_restore). Real Grain iterators, MaxText's own file reader."""
    import asyncio
    import json
    import types

    from etils import epath
    from maxtext.common import grain_utility

    from trainer import maxtext_runtime

    assert "isinstance(data_iterator.local_iterator, ElasticIterator)" in inspect.getsource(grain_utility.for_save)
    before = _elastic_hosts(4)
    read = [[int(x) for x in next(it)] for _ in range(3) for it in before]      # 3 steps of 8 records on 4 hosts
    step_dir = tmp_path / "7" / "iter"
    step_dir.mkdir(parents=True)
    for i, it in enumerate(before):
        (step_dir / f"process_{i}-of-4.json").write_text(json.dumps(it.get_state()))
    manager = types.SimpleNamespace(directory=epath.Path(tmp_path))
    after = _elastic_hosts(2)
    loaders = [types.SimpleNamespace(local_iterator=it) for it in after]

    with pytest.raises(AssertionError, match="4 processes found in Grain checkpoint directory"):
        grain_utility.for_restore(manager, 7, loaders[0], -1)           # MaxText alone, with jax's one process

    maxtext_runtime.install_elastic_grain_restore()
    try:
        for loader in loaders:
            checkpointable = grain_utility.for_restore(manager, 7, loader, -1)

            async def load(c=checkpointable):
                await (await c.load(epath.Path(step_dir)))
            asyncio.run(load())
    finally:
        grain_utility.for_restore = grain_utility.for_restore._trainer_original
    read += [[int(x) for x in next(it)] for _ in range(2) for it in after]      # 2 more steps on 2 hosts
    flat = sorted(x for batch in read for x in batch)
    assert flat == list(range(3 * 8 + 2 * 8))                                  # every record once, none skipped


def test_disagreeing_elastic_positions_are_a_data_error(tmp_path):
    from etils import epath

    from trainer import maxtext_runtime

    for i, index in enumerate((16, 16, 24)):
        (tmp_path / f"process_{i}-of-3.json").write_text(f'{{"global_next_index": {index}}}')
    with pytest.raises(maxtext_runtime.ElasticPositionError, match="disagree"):
        maxtext_runtime.elastic_restore_source(epath.Path(tmp_path))
    (tmp_path / "process_2-of-3.json").write_text('{"global_next_index": 16}')
    assert maxtext_runtime.elastic_restore_source(epath.Path(tmp_path)) == (0, 3)
    (tmp_path / "process_0-of-3.json").unlink()
    with pytest.raises(maxtext_runtime.ElasticPositionError, match="no complete set"):
        maxtext_runtime.elastic_restore_source(epath.Path(tmp_path))


def test_the_cpu_test_model_reads_pretokenized_data_only():
    with pytest.raises(PlanError, match="tokenize_train_data=false"):
        data.check_dataset("tiny", "grain", "/d/*.arrayrecord", "", {})
    data.check_dataset("tiny", "grain", "/d/*.arrayrecord", "", {}, pretokenized=True)


def test_the_text_test_model_fits_the_llama2_tokenizer_maxtext_ships():
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    tok = build_tokenizer(str(ASSETS / data.LLAMA2.asset), data.LLAMA2.type, True, True, None)
    assert tok._tokenizer_model.vocab_size() == PRESETS["tiny-text"].vocab_size == 32000
    p = plan(PlanRequest("tiny-text", "v6e", "2x4", slices=1))
    keys = _keys(maxtext_overrides(p, RunSettings("r", "/o", 10, 5, dataset_type="grain", hardware="cpu",
                                                  dataset_path="/d/*.parquet")))
    assert (keys["tokenizer_path"], keys["tokenizer_type"], keys["grain_file_type"],
            keys["tokenize_train_data"]) == ("tokenizer.llama2", "sentencepiece", "parquet", "true")
    # The same CPU model as `tiny` but for the vocabulary: MaxText is told the same dimensions, vocab_size aside.
    tiny, text = PRESETS["tiny"], PRESETS["tiny-text"]
    differing = {f.name for f in dataclasses.fields(tiny) if getattr(tiny, f.name) != getattr(text, f.name)}
    assert differing == {"name", "vocab_size", "dimension_overrides", "source"}
    assert ({**tiny.dimension_overrides, "vocab_size": "32000"} == dict(text.dimension_overrides)
            and text.param_count - tiny.param_count == 2 * (32000 - 32) * tiny.emb_dim)


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
    worker passes the full plan's elasticity, so the data keys (the global position) do not flip with the
    group's size."""
    from trainer.worker import request_to_dict, run_to_dict, worker_plan_and_argv

    request = PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1)
    run = RunSettings("r", "gs://b", 100, 10, dataset_type="grain", dataset_path="gs://b/*.arrayrecord")
    config = {"plan_request": request_to_dict(request), "run": run_to_dict(run)}
    for world in (4, 8):                                   # one slice of 4 hosts, two slices
        _, argv = worker_plan_and_argv(config, world, "base.yml")
        assert "grain_use_elastic_iterator=true" in argv
    assert not plan(request).at_slices(1).elastic

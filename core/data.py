"""Real data: the dataset types the trainer offers, each model's tokenizer, and how the data position comes back
with the model after a restore (pure; facts about MaxText 0.2.5 as installed).

Offered:
- `synthetic`: MaxText's generated batches (no files, nothing to resume).
- `grain`: files read by Grain, in one of two formats (MaxText `grain_file_type`):
  - `arrayrecord`: ArrayRecord files of tf.train.Example records, a `text` feature (bytes: text to tokenize; int64:
    token ids). Random access (a Grain MapDataset), so it can be read elastically (below).
  - `parquet`: Parquet files with a `text` column (strings, or lists of token ids when pre-tokenized), read
    as they are: no conversion step. Read sequentially, each host its share of the files (or of the rows, when
    there are fewer files than hosts: maxtext/input_pipeline/grain_data_processing.py get_datasets).
  Text is tokenized with the model's own tokenizer (TOKENIZERS, MaxText `tokenize_train_data`); pre-tokenized data
  skips that. MaxText saves Grain's iterator with every checkpoint and restores it with the model
  (maxtext/common/checkpointing.py `save_checkpoint`: checkpointables["iter"] only when dataset_type == "grain"),
  so a resumed run reads on from the next record.

Elastic runs. A resize changes the number of data-loading hosts, which a per-host position cannot follow. Grain's
ElasticIterator keeps one global position instead: the index of the next record, the same number on every host
(grain/_src/python/dataset/elastic_iterator.py: host i of n reads records start+i, start+i+n, ... and every host
adds the global batch to the index each step), and MaxText uses it with `grain_use_elastic_iterator=true` (and
`packing=false`; maxtext/configs/base.yml). MaxText 0.2.5 then still saves one file per host
(maxtext/common/grain_utility.py `for_save` checks `isinstance(local_iterator, ElasticIterator)`, but the loader
holds the *iterator* that Grain 0.2.18's ElasticIterator returns, a plain DatasetIterator, so the standard
per-host save runs) and refuses to restore them on another host count (`for_restore`: "4 processes found in Grain
checkpoint directory ..., but only 2 jax processes"). Since every host's file holds the same global index, the
trainer restores an elastic position from one of them, after checking that all of them agree
(trainer/maxtext_runtime.py install_elastic_grain_restore). What that gives: no record is skipped or read twice on
the run's history; the steps since the last checkpoint are trained again after a resize, on the same records
(as after any restore). Only arrayrecord can do this: Parquet is read sequentially with a per-host file split
that an index cannot address, so elastic runs are refused Parquet. Packing is off on elastic runs (documents are
trimmed or padded to the sequence length), and a weighted mixture of patterns (`a,0.5;b,0.5`) is refused there.
An eval split keeps no position (each pass starts at its first record), so it is read as on a fixed run: MaxText
0.2.5 would leave its elements unbatched on an elastic run (`format_and_batch` skips batching whenever
`grain_use_elastic_iterator` is set, though the eval iterator is not elastic); the trainer builds it with that flag
off (trainer/maxtext_runtime.py install_elastic_eval_batches).

Removed, because they cannot work as offered:
- `tfds`: needs TensorFlow and tensorflow-datasets, which are not in the workers' lock (maxtext[tpu] 0.2.5 does not
  depend on them; TensorFlow alone is a wheel of several hundred MB for a data reader), and its position is not
  saved: a restore restarts the dataset from its first record.
- `hf`: its position is not saved either (only Grain's iterator is checkpointed), so every preemption on Spot would
  train the first records again; and MaxText's hf pipeline takes only Hugging Face tokenizers (base.yml: "hf
  pipeline only supports huggingface type"), while the Llama 3 tokenizer MaxText ships is tiktoken.
Data in those formats can be converted once to ArrayRecord or parquet and read with `grain`.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import PlanError

DATASET_TYPES = ("synthetic", "grain")
# Files a grain dataset may be (MaxText grain_file_type), with the file suffix that names each.
DATASET_FORMATS = {"arrayrecord": (".arrayrecord", ".array_record"), "parquet": (".parquet",)}
# Formats whose position survives a change in the number of hosts (module docstring).
ELASTIC_FORMATS = frozenset({"arrayrecord"})
# MaxText keys an elastic run on grain data sets (maxtext/configs/base.yml: "For elastic training, set to this
# true and packing=false").
ELASTIC_GRAIN_SETTINGS = {"grain_use_elastic_iterator": "true", "packing": "false"}
# Dataset types the trainer used to offer and why each is gone (the message a user who asks for one gets).
REMOVED_DATASET_TYPES = {
    "tfds": "needs TensorFlow, which the workers' lock does not hold, and restarts from its first record after "
            "every restore; convert the data to ArrayRecord or parquet and use dataset_type=grain",
    "hf": "restarts from its first record after every restore (MaxText saves only Grain's position) and takes only "
          "Hugging Face tokenizers; convert the data to parquet and use dataset_type=grain",
}


@dataclass(frozen=True)
class Tokenizer:
    asset: str            # name under maxtext/assets/tokenizers in the maxtext 0.2.5 wheel
    type: str             # MaxText tokenizer_type
    description: str


LLAMA3 = Tokenizer("tokenizer_llama3.tiktoken", "tiktoken",
                   "the Llama 3 tiktoken BPE (128,000 tokens + 256 special = vocab 128,256)")
QWEN3 = Tokenizer("qwen3-tokenizer", "huggingface", "the Qwen3 Hugging Face tokenizer (tokenizer.json)")
LLAMA2 = Tokenizer("tokenizer.llama2", "sentencepiece", "the Llama 2 SentencePiece model (32,000 tokens)")
# The CPU test model's vocabulary is 32 ids: no real tokenizer fits it. It reads pre-tokenized data
# (tokenize_train_data=false); MaxText still builds a tokenizer for the padding id, and this one has none.
TINY = Tokenizer("tokenizer_llama3.tiktoken", "tiktoken", "for its padding id only: the data is pre-tokenized")

TOKENIZERS = {"llama3-8b": LLAMA3, "llama3-70b": LLAMA3, "qwen3-0.6b": QWEN3, "tiny": TINY, "tiny-text": LLAMA2}
PRETOKENIZED_ONLY = frozenset({"tiny"})


def tokenizer_of(model: str) -> Tokenizer:
    try:
        return TOKENIZERS[model]
    except KeyError:
        raise PlanError(f"model {model} has no tokenizer on record (core/data.py TOKENIZERS)") from None


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def check_dataset_type(dataset_type: str, dataset_path: str) -> None:
    """Refuse a dataset type that is not offered, and real data without a path. Raises PlanError."""
    if dataset_type in REMOVED_DATASET_TYPES:
        raise PlanError(f"dataset_type={dataset_type} is not offered: {REMOVED_DATASET_TYPES[dataset_type]}")
    if dataset_type not in DATASET_TYPES:
        raise PlanError(f"dataset_type={dataset_type!r} unknown; allowed: {', '.join(DATASET_TYPES)}")
    if dataset_type != "synthetic" and not dataset_path:
        raise PlanError(f"dataset_type={dataset_type} needs a dataset path (files, e.g. gs://bucket/data/*.arrayrecord)")


def dataset_format(dataset_path: str, given: str = "") -> str:
    """The grain file format: the one given, else the one the path's suffix names, else MaxText's default
    (arrayrecord). Raises PlanError for a format not offered."""
    if given:
        if given not in DATASET_FORMATS:
            raise PlanError(f"dataset_format={given!r} unknown; allowed: {', '.join(DATASET_FORMATS)}")
        return given
    return format_named_by(dataset_path) or "arrayrecord"     # MaxText's default grain_file_type (base.yml)


def format_named_by(dataset_path: str) -> str | None:
    """The format a file pattern's name says: a format's suffix in its last part, also before a shard suffix
    (train.array_record-00000-of-00064); None when the name says none (the stack config refuses such a
    datasetPath)."""
    last = dataset_path.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((name for name, suffixes in DATASET_FORMATS.items() if any(s in last for s in suffixes)), None)


def check_dataset(model: str, dataset_type: str, dataset_path: str, tokenizer_path: str,
                  extra: dict[str, str], elastic: bool = False, *, file_format: str = "",
                  pretokenized: bool = False, eval_dataset_path: str = "") -> None:
    """Refuse, in one line naming the value, what cannot train or resume. Raises PlanError."""
    own = tokenizer_of(model)
    if tokenizer_path and _basename(tokenizer_path) != own.asset:
        raise PlanError(f"tokenizer_path={tokenizer_path!r} is not {model}'s tokenizer: {model} uses {own.asset} "
                        f"({own.description}); leave tokenizer_path unset for it")
    check_dataset_type(dataset_type, dataset_path)
    if dataset_type == "synthetic":
        for key, value in (("dataset_path", dataset_path), ("eval_dataset_path", eval_dataset_path)):
            if value:
                raise PlanError(f"{key}={value!r} given with dataset_type=synthetic, which reads no "
                                "files; set dataset_type=grain to train on it")
        return
    fmt = dataset_format(dataset_path, file_format)
    if eval_dataset_path:
        dataset_format(eval_dataset_path, file_format)
    if elastic and fmt not in ELASTIC_FORMATS:
        raise PlanError(f"dataset_format={fmt} cannot keep its position through an elastic resize (each host "
                        f"reads its own share of the files; core/data.py): use "
                        f"{', '.join(sorted(ELASTIC_FORMATS))} files, or a fixed number of slices")
    if elastic and ";" in dataset_path:
        raise PlanError(f"dataset_path={dataset_path!r} is a weighted mixture, whose position cannot survive an "
                        "elastic resize: give one file pattern, or a fixed number of slices")
    for key in ELASTIC_GRAIN_SETTINGS:
        if elastic and key in extra:
            raise PlanError(f"{key}={extra[key]} cannot be set on an elastic run with grain data: the stack sets "
                            f"{key}={ELASTIC_GRAIN_SETTINGS[key]} so that the data position survives a resize")
    if elastic and extra.get("use_truncation", "true").lower() == "false":
        raise PlanError("use_truncation=false splits long documents into several records, which an elastic run's "
                        "record index cannot address: leave use_truncation unset")
    if model in PRETOKENIZED_ONLY and not pretokenized:
        raise PlanError(f"model {model} has a 32-id test vocabulary that no tokenizer fits: its data must be "
                        "pre-tokenized (pretokenized data, MaxText tokenize_train_data=false)")


def data_overrides(model: str, dataset_path: str, file_format: str, tokenizer_path: str, pretokenized: bool,
                   eval_dataset_path: str, elastic: bool) -> dict[str, str]:
    """MaxText keys for a run on grain data (checked by check_dataset first)."""
    keys = {"grain_train_files": dataset_path, "grain_file_type": dataset_format(dataset_path, file_format),
            "tokenize_train_data": str(not pretokenized).lower()}
    if eval_dataset_path:
        keys.update({"grain_eval_files": eval_dataset_path, "tokenize_eval_data": str(not pretokenized).lower()})
    keys.update(tokenizer_overrides(model, tokenizer_path))
    if elastic:
        keys.update(ELASTIC_GRAIN_SETTINGS)
    return keys


def tokenizer_overrides(model: str, tokenizer_path: str) -> dict[str, str]:
    """MaxText's tokenizer keys for a run on real data: the model's own tokenizer, by its asset name (MaxText
    resolves a bare name against its packaged assets, maxtext/configs/types.py) unless a copy's path is given."""
    own = tokenizer_of(model)
    return {"tokenizer_path": tokenizer_path or own.asset, "tokenizer_type": own.type}

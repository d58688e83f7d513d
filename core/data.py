"""Real data: the dataset types the trainer offers, each model's tokenizer, and how the data position comes back
with the model after a restore (pure; facts about MaxText 0.2.5 as installed).

Offered:
- `synthetic`: MaxText's generated batches (no files, nothing to resume).
- `grain`: files read by Grain (ArrayRecord of tf.train.Example by default, `grain_file_type` for parquet...).
  MaxText saves Grain's iterator with every checkpoint and restores it with the model
  (maxtext/common/checkpointing.py `save_checkpoint`: checkpointables["iter"] only when dataset_type == "grain"),
  so a resumed run reads on from where it stopped. An elastic run changes the number of data-loading hosts on a
  resize, which a per-host iterator state cannot follow: MaxText's `grain_use_elastic_iterator` is meant to keep one
  global position instead (with `packing=false`; maxtext/configs/base.yml: "For elastic training, set to this true
  and packing=false"). With the versions the workers run it does not: Grain 0.2.18's ElasticIterator is a dataset
  whose `iter()` gives a plain DatasetIterator, while MaxText 0.2.5 saves the global position only when the
  loader's iterator *is* an ElasticIterator (maxtext/common/grain_utility.py `for_save` / `for_restore`), so it
  saves one state per host and, after a resize, refuses to restore ("4 processes found in Grain checkpoint
  directory ..., but only 2 jax processes", seen on the local run). So elastic runs are refused grain data at
  config time (once the two agree, such a run would set grain_use_elastic_iterator=true and packing=false).

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
# Dataset types the trainer used to offer and why each is gone (the message a user who asks for one gets).
REMOVED_DATASET_TYPES = {
    "tfds": "needs TensorFlow, which the workers' lock does not hold, and restarts from its first record after "
            "every restore; convert the data to ArrayRecord or parquet and use dataset_type=grain",
    "hf": "restarts from its first record after every restore (MaxText saves only Grain's position) and takes only "
          "Hugging Face tokenizers; convert the data to parquet and use dataset_type=grain",
}
# MaxText key that takes each dataset type's location (maxtext 0.2.5 configs/base.yml).
DATASET_LOCATION_KEY = {"grain": "grain_train_files"}


@dataclass(frozen=True)
class Tokenizer:
    asset: str            # name under maxtext/assets/tokenizers in the maxtext 0.2.5 wheel
    type: str             # MaxText tokenizer_type
    description: str


LLAMA3 = Tokenizer("tokenizer_llama3.tiktoken", "tiktoken",
                   "the Llama 3 tiktoken BPE (128,000 tokens + 256 special = vocab 128,256)")
QWEN3 = Tokenizer("qwen3-tokenizer", "huggingface", "the Qwen3 Hugging Face tokenizer (tokenizer.json)")
# The CPU test model's vocabulary is 32 ids: no real tokenizer fits it. It reads pre-tokenized data
# (tokenize_train_data=false); MaxText still builds a tokenizer for the padding id, and this one has none.
TINY = Tokenizer("tokenizer_llama3.tiktoken", "tiktoken", "for its padding id only: the data is pre-tokenized")

TOKENIZERS = {"llama3-8b": LLAMA3, "llama3-70b": LLAMA3, "qwen3-0.6b": QWEN3, "tiny": TINY}
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


def check_dataset(model: str, dataset_type: str, dataset_path: str, tokenizer_path: str,
                  extra: dict[str, str], elastic: bool = False) -> None:
    """Refuse, in one line naming the value, what cannot train or resume. Raises PlanError."""
    own = tokenizer_of(model)
    if tokenizer_path and _basename(tokenizer_path) != own.asset:
        raise PlanError(f"tokenizer_path={tokenizer_path!r} is not {model}'s tokenizer: {model} uses {own.asset} "
                        f"({own.description}); leave tokenizer_path unset for it")
    check_dataset_type(dataset_type, dataset_path)
    if dataset_type == "synthetic":
        if dataset_path:
            raise PlanError(f"dataset_path={dataset_path!r} given with dataset_type=synthetic, which reads no "
                            "files; set dataset_type=grain to train on it")
        return
    if elastic and dataset_type == "grain":
        raise PlanError("dataset_type=grain cannot resume after an elastic resize with MaxText 0.2.5 and Grain 0.2.18 "
                        "(the data position is saved per host; core/data.py): train real data on a fixed number of "
                        "slices (no --elastic / elasticMinSlices)")
    if model in PRETOKENIZED_ONLY and extra.get("tokenize_train_data", "true").lower() != "false":
        raise PlanError(f"model {model} has a 32-id test vocabulary that no tokenizer fits: its data must be "
                        "pre-tokenized (set tokenize_train_data=false)")


def tokenizer_overrides(model: str, tokenizer_path: str) -> dict[str, str]:
    """MaxText's tokenizer keys for a run on real data: the model's own tokenizer, by its asset name (MaxText
    resolves a bare name against its packaged assets, maxtext/configs/types.py) unless a copy's path is given."""
    own = tokenizer_of(model)
    return {"tokenizer_path": tokenizer_path or own.asset, "tokenizer_type": own.type}

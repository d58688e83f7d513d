"""Small real datasets for the local run, made here: pre-tokenized documents in one ArrayRecord file, the format
`dataset_type=grain` reads by default (MaxText 0.2.5 `grain_file_type: 'arrayrecord'`), and text documents as
Parquet or ArrayRecord for the `tiny-text` model (write_text_parquet, write_text_arrayrecord).

Each record is a tf.train.Example with an int64 `text` feature (MaxText's own protobuf classes parse it,
maxtext/input_pipeline/input_pipeline_utils.py ParseFeatures; no TensorFlow). Token ids are below the CPU test
model's vocabulary (32) and documents vary in length, so Grain packs them; a fixed seed makes every run read the
same data, which is what lets a resumed run's losses be compared with an uninterrupted one's.

    python -m trainer.local.tiny_data OUT_DIR          # writes OUT_DIR/tiny-00000.arrayrecord, prints its pattern
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

VOCAB = 32          # the `tiny` preset's vocab_size
RECORDS = 4000      # a 30-step local run (16 sequences of 128 tokens a step, packed) reads well under half


def write(out_dir: str | Path, records: int = RECORDS, seed: int = 0) -> str:
    """Write the dataset; return the file pattern to pass as --dataset-path."""
    from array_record.python.array_record_module import ArrayRecordWriter
    from maxtext.input_pipeline.protos import example_pb2

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tiny-00000.arrayrecord"
    rng = np.random.default_rng(seed)
    writer = ArrayRecordWriter(str(path), "group_size:1")
    try:
        for _ in range(records):
            # Ids 1..VOCAB-1 (0 left to padding); a repeating pattern plus noise gives the model something to learn.
            length = int(rng.integers(16, 128))
            start = int(rng.integers(1, VOCAB))
            tokens = (start + np.arange(length)) % (VOCAB - 1) + 1
            noise = rng.random(length) < 0.1
            tokens[noise] = rng.integers(1, VOCAB, noise.sum())
            example = example_pb2.Example()
            example.features.feature["text"].int64_list.value.extend(int(t) for t in tokens)
            writer.write(example.SerializeToString())
    finally:
        writer.close()
    return str(out / "tiny-*.arrayrecord")


# Text documents for the `tiny-text` model, which MaxText tokenizes with the Llama 2 SentencePiece model it ships.
# Document i starts with "record <i>:", so the first tokens of a row tell which record it is (the data trace).
WORDS = ("the quick brown fox jumps over the lazy dog while the small cat sleeps on a warm mat near the old "
         "red door and the bird sings").split()
TEXT_RECORDS = 2000


def text(i: int, rng: np.random.Generator) -> str:
    """Record i: its number, then a run of the word cycle from a random place (a pattern to learn)."""
    start = int(rng.integers(0, len(WORDS)))
    length = int(rng.integers(20, 60))
    return f"record {i:05d}: " + " ".join(WORDS[(start + k) % len(WORDS)] for k in range(length))


def texts(records: int = TEXT_RECORDS, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [text(i, rng) for i in range(records)]


def write_text_parquet(out_dir: str | Path, records: int = TEXT_RECORDS, seed: int = 0, first: int = 0) -> str:
    """Text in a Parquet file's `text` column, as a user has it: MaxText reads it as it is (grain_file_type=parquet).
    `first`: the file starts at that record (the others keep their numbers)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts(records, seed)[first:]}), out / "text-00000.parquet")
    return str(out / "text-*.parquet")


def write_text_arrayrecord(out_dir: str | Path, records: int = TEXT_RECORDS, seed: int = 0) -> str:
    """The same texts as ArrayRecord of tf.train.Example with a bytes `text` feature (what elastic runs read)."""
    from array_record.python.array_record_module import ArrayRecordWriter
    from maxtext.input_pipeline.protos import example_pb2

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writer = ArrayRecordWriter(str(out / "text-00000.arrayrecord"), "group_size:1")
    try:
        for doc in texts(records, seed):
            example = example_pb2.Example()
            example.features.feature["text"].bytes_list.value.append(doc.encode())
            writer.write(example.SerializeToString())
    finally:
        writer.close()
    return str(out / "text-*.arrayrecord")


# MaxText keys a local run on this data needs besides the dataset type and path (and --pretokenized for the
# token-id data): Grain reads in the training process (its default, one worker process per host, is a process too
# many for a 2-core machine running 4 fake hosts).
LOCAL_GRAIN_SETTINGS = ("grain_worker_count=0",)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m trainer.local.tiny_data OUT_DIR", file=sys.stderr)
        sys.exit(2)
    print(write(sys.argv[1]))

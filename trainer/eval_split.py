"""An eval split too small for the hosts that read it: refused when the data iterators are built, before step 1.

MaxText 0.2.5 pads the eval pass of a host that runs out of eval data with a zeroed copy of that host's last batch
(maxtext/input_pipeline/multihost_dataloading.py, MultiHostDataLoadIterator._make_padding_batch), and raises
ValueError("last_local_data is None, cannot make padding batch.") when the host has had no eval batch at all. That
happens at the first eval, after `eval_interval` billed steps, and again after every restart: a ValueError in the
steps is a runtime failure, retried. A host has no eval batch exactly when its share of the split has no record,
since the pre-training pipeline batches the last partial batch with padding (grain_data_processing.py,
`batch_and_pad`). The share is MaxText's own:
- ArrayRecord: one record index over every file, host h reads records h, h+n, ... (grain_data_processing.py
  `_apply_mapdataset_transforms`, `dataset[dataloading_host_index::dataloading_host_count]`);
- Parquet: files h, h+n, ... when there are at least as many files as hosts, else each file is read by a group of
  hosts that split its rows by index (input_pipeline_utils.compute_file_sharding, IndexShardIterDataset).
Record counts come from the files' own indexes (ArrayRecord's footer through grain's ArrayRecordDataSource, which
MaxText reads the split with; Parquet's footer metadata), not from reading the records. What cannot be counted
that way (TFRecord, a Parquet split on gs:// without a mount, Hugging Face paths) is not checked: the docs say so.
"""
from __future__ import annotations

from typing import Callable, Sequence

# MaxText's file sharding for Parquet/TFRecord: (file count, host index, host count) -> (file slice, files per
# host, (row shard index, row shard count) or None). Injected so the rule is tested against MaxText's own function.
FileSharding = Callable[[int, int, int], tuple[slice, int, "tuple[int, int] | None"]]


def records_per_host(file_type: str, rows_per_file: Sequence[int], host_count: int,
                     file_sharding: FileSharding) -> list[int]:
    """How many eval records each of the `host_count` data-loading hosts reads in one pass, as MaxText 0.2.5
    shards the split (module docstring)."""
    if file_type == "arrayrecord":
        total = sum(rows_per_file)
        return [len(range(host, total, host_count)) for host in range(host_count)]
    counts = []
    for host in range(host_count):
        file_slice, _, row_shard = file_sharding(len(rows_per_file), host, host_count)
        rows = list(rows_per_file)[file_slice]
        if row_shard is not None:
            index, count = row_shard
            rows = [len(range(index, n, count)) for n in rows]
        counts.append(sum(rows))
    return counts


def too_small_problem(eval_files: str, file_type: str, rows_per_file: Sequence[int], host_count: int,
                      file_sharding: FileSharding) -> str | None:
    """One line naming evalDatasetPath and the host count when some host would read no eval record; else None."""
    counts = records_per_host(file_type, rows_per_file, host_count, file_sharding)
    empty = [host for host, n in enumerate(counts) if n == 0]
    if not empty:
        return None
    return (f"evalDatasetPath={eval_files!r}: {sum(rows_per_file)} eval records in {len(rows_per_file)} "
            f"{file_type} files leave {len(empty)} of the {host_count} data-loading hosts with none (first: host "
            f"{empty[0]}); MaxText 0.2.5 cannot pad an eval pass for a host that had no batch and fails at the "
            f"first eval: give the eval split at least one record per host, or no evalDatasetPath")


def rows_per_file(file_type: str, files: Sequence[str]) -> list[int] | None:
    """Each file's record count from its own index, or None when this format or location cannot be counted
    without reading the records."""
    if file_type == "arrayrecord":
        import grain.python as grain

        return [len(grain.ArrayRecordDataSource([path])) for path in files]
    if file_type == "parquet" and not any("://" in path for path in files):
        import pyarrow.parquet as parquet

        return [parquet.ParquetFile(path).metadata.num_rows for path in files]
    return None


def _loading_hosts(config, mesh) -> list[int]:
    """The processes that load eval data, as MaxText's create_data_iterator picks them."""
    from maxtext.input_pipeline.input_pipeline_interface import get_process_loading_real_data

    return get_process_loading_real_data(config.data_sharding, config.global_batch_size_to_load_eval,
                                         config.global_batch_size_to_eval_on, config.max_target_length, mesh)


def check_eval_split(config, mesh, loading_hosts: Callable = _loading_hosts) -> str | None:
    """The refusal line for MaxText's `config` (eval on, Grain data) on `mesh`, or None: the same files and the
    same data-loading hosts as MaxText's make_grain_eval_iterator (input_pipeline_interface.create_data_iterator,
    get_process_loading_real_data)."""
    if config.dataset_type != "grain" or config.eval_interval <= 0 or not config.grain_eval_files:
        return None
    if config.colocated_python_data_input:
        return None                      # Pathways' remote iterator: another loader, not this padding
    from maxtext.input_pipeline import grain_data_processing, input_pipeline_utils

    hosts = loading_hosts(config, mesh)
    if ";" in str(config.grain_eval_files):
        return None                      # a weighted mixture: each part is sharded on its own
    files = grain_data_processing.find_data_files(config.grain_eval_files)
    rows = rows_per_file(config.grain_file_type, files)
    if rows is None:
        return None
    return too_small_problem(config.grain_eval_files, config.grain_file_type, rows, len(hosts),
                             input_pipeline_utils.compute_file_sharding)

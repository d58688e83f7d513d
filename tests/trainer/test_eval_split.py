"""An eval split with no record for some data-loading host is refused when the data iterators are built
(trainer/eval_split.py), with a data error (not retried) naming evalDatasetPath and the host count.

MaxText 0.2.5 cannot pad the eval pass of a host that had no eval batch: maxtext/input_pipeline/
multihost_dataloading.py MultiHostDataLoadIterator._make_padding_batch raises ValueError("last_local_data is None,
cannot make padding batch.") at the first eval. The shares are MaxText's own: ArrayRecord records
`dataset[h::n]` (grain_data_processing.py `_apply_mapdataset_transforms`), Parquet files or rows through
input_pipeline_utils.compute_file_sharding, which these tests call rather than restate. The counts are read from
real files (an ArrayRecord written with array_record's writer, a Parquet file written with pyarrow).
"""
from __future__ import annotations

import glob
from types import SimpleNamespace

import pytest

from core import exit_codes
from trainer import eval_split, failures

pytest.importorskip("maxtext")
from maxtext.input_pipeline.input_pipeline_utils import compute_file_sharding  # noqa: E402


def test_arrayrecord_records_are_dealt_one_per_host_in_turn():
    assert eval_split.records_per_host("arrayrecord", [2, 1], 4, compute_file_sharding) == [1, 1, 1, 0]
    assert eval_split.records_per_host("arrayrecord", [5], 2, compute_file_sharding) == [3, 2]


def test_parquet_files_fewer_than_hosts_split_their_rows_among_a_group():
    # 2 files, 4 hosts: hosts 0 and 2 share file 0, hosts 1 and 3 file 1 (compute_file_sharding's groups).
    assert eval_split.records_per_host("parquet", [3, 1], 4, compute_file_sharding) == [2, 1, 1, 0]
    # As many files as hosts: one file each, whatever its size.
    assert eval_split.records_per_host("parquet", [0, 7], 2, compute_file_sharding) == [0, 7]


def test_a_split_with_a_record_for_every_host_passes_and_one_without_is_named():
    assert eval_split.too_small_problem("/data/eval-*", "arrayrecord", [4], 4, compute_file_sharding) is None
    line = eval_split.too_small_problem("/data/eval-*", "arrayrecord", [3], 4, compute_file_sharding)
    assert line.startswith("evalDatasetPath='/data/eval-*': 3 eval records") and "of the 4 data-loading hosts" in line
    assert "host 3" in line and len(line) < 400


def test_the_record_counts_come_from_the_files_own_indexes(tmp_path):
    from trainer.local import tiny_data

    [arrayrecord] = glob.glob(tiny_data.write_text_arrayrecord(tmp_path / "ar", records=3))
    assert eval_split.rows_per_file("arrayrecord", [arrayrecord]) == [3]
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "eval.parquet"
    parquet.write_table(pyarrow.table({"text": ["a", "b", "c", "d", "e"]}), path)
    assert eval_split.rows_per_file("parquet", [str(path)]) == [5]
    # Not countable from an index: not checked (the docs say so).
    assert eval_split.rows_per_file("tfrecord", [str(path)]) is None
    assert eval_split.rows_per_file("parquet", ["gs://bucket/eval.parquet"]) is None


def _maxtext_config(eval_files: str, **changes) -> SimpleNamespace:
    keys = dict(dataset_type="grain", eval_interval=10, grain_eval_files=eval_files, grain_file_type="arrayrecord",
                colocated_python_data_input=False)
    return SimpleNamespace(**{**keys, **changes})


def test_the_run_s_split_is_checked_against_the_hosts_maxtext_loads_eval_data_on(tmp_path):
    from trainer.local import tiny_data

    tiny_data.write_text_arrayrecord(tmp_path / "eval", records=3)
    pattern = str(tmp_path / "eval" / "*.arrayrecord")
    two_hosts, four_hosts = (lambda config, mesh: [0, 1]), (lambda config, mesh: [0, 1, 2, 3])
    assert eval_split.check_eval_split(_maxtext_config(pattern), None, two_hosts) is None
    line = eval_split.check_eval_split(_maxtext_config(pattern), None, four_hosts)
    assert line and "evalDatasetPath=" in line and "of the 4 data-loading hosts" in line
    # No eval, or no Grain split: nothing to check.
    assert eval_split.check_eval_split(_maxtext_config(pattern, eval_interval=0), None, four_hosts) is None
    assert eval_split.check_eval_split(_maxtext_config(pattern, dataset_type="synthetic"), None, four_hosts) is None


def test_the_refusal_is_a_data_error_that_ends_the_run_before_the_iterators(monkeypatch):
    """Through the phase guard MaxText's train loop calls (trainer/maxtext_runtime.py install_phase_guards): the
    line leaves as DATA_ERROR (not retried) and MaxText's own create_data_iterator is never reached."""
    from maxtext.input_pipeline import input_pipeline_interface as pipeline
    from maxtext.trainers.pre_train import train

    from trainer import maxtext_runtime, patching

    monkeypatch.setattr(train, "initialize", train.initialize)      # the guards wrap it too: restored after
    reached = []
    monkeypatch.setattr(pipeline, "create_data_iterator", lambda config, mesh: reached.append(config))
    monkeypatch.setattr(eval_split, "check_eval_split", lambda config, mesh: "evalDatasetPath='x': too small")
    maxtext_runtime.install_phase_guards()
    assert patching.original(pipeline.create_data_iterator) is not pipeline.create_data_iterator
    with pytest.raises(failures.DataError) as refused:
        pipeline.create_data_iterator(_maxtext_config("x"), None)
    assert not reached
    assert str(refused.value) == "evalDatasetPath='x': too small"
    assert refused.value.exit_code == exit_codes.DATA_ERROR

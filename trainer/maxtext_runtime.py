"""MaxText as installed on a worker: version gate, base config, and the two hooks the trainer needs.

Hooks (wrapping MaxText's MetricLogger methods, which train.py looks up on the class at call time):
- model check: when MaxText has built the parameters, count them and compare with the preset. The seed runs
  trained MaxText's ~1B default model while believing it was llama3-8b (docs/platform-notes.md §6); this makes that loud.
- step callback: every logged training step (step, loss, step time) goes to a callback (the progress log).
MaxText is imported lazily so the planner and CLI work where MaxText is not installed.
"""
from __future__ import annotations

import importlib.metadata
import importlib.resources
from typing import Callable

from core.maxtext_facts import MIN_MAXTEXT
from trainer import cpu_compile_cache, eval_split, patching
from trainer.failures import ConfigurationError, DataError, EnvironmentImportError

# Preset parameter formulas are exact for the dense decoders here; the slack only absorbs an unforeseen
# small tensor (a bias, a norm), never a different model (the default model is ~7x off llama3-8b).
PARAM_TOLERANCE = 0.01


class MaxTextVersionError(EnvironmentImportError):
    """MaxText missing, or older than the trainer needs: a new image or lock fixes it, a retry does not."""


class ModelMismatchError(EnvironmentImportError):
    """MaxText built a model whose size is not the requested preset's (the installed MaxText reads the model
    config differently): deterministic, like an import error."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("maxtext")
    except importlib.metadata.PackageNotFoundError:
        return None


def require_version(version: str | None = None) -> str:
    """The installed MaxText version, or MaxTextVersionError if it is missing or too old."""
    version = version if version is not None else installed_version()
    if version is None:
        raise MaxTextVersionError("maxtext is not installed (run scripts/install_maxtext.sh)")
    if _version_tuple(version) < MIN_MAXTEXT:
        raise MaxTextVersionError(
            f"maxtext {version} < {'.'.join(map(str, MIN_MAXTEXT))}: older releases silently train the "
            "default model instead of the requested one")
    return version


def base_config_path() -> str:
    """base.yml from the installed package: model configs are resolved relative to it (docs/platform-notes.md §5, §6)."""
    path = importlib.resources.files("maxtext") / "configs" / "base.yml"
    if not path.is_file():
        raise MaxTextVersionError(f"maxtext package has no configs/base.yml at {path}")
    return str(path)


def pin_assets_root() -> str:
    """Point MaxText at the tokenizers its wheel ships. MaxText 0.2.5 looks for them under MAXTEXT_ASSETS_ROOT,
    default `<repo root>/src/maxtext/assets` (maxtext/utils/globals.py), and takes the package directory as the repo
    root when no `.git` sits next to it — an installed wheel — so the default is site-packages/maxtext/src/maxtext/
    assets, which does not exist, and a tokenizer named by its asset name (tokenizer_llama3.tiktoken) is not found.
    Must run before MaxText's globals are imported; an explicit MAXTEXT_ASSETS_ROOT wins."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        raise MaxTextVersionError("maxtext is not installed (run scripts/install_maxtext.sh)")
    root = os.path.join(list(spec.submodule_search_locations)[0], "assets")
    return os.environ.setdefault("MAXTEXT_ASSETS_ROOT", root)


def check_param_count(actual: int, expected: int, model_name: str) -> None:
    if abs(actual - expected) > PARAM_TOLERANCE * expected:
        raise ModelMismatchError(
            f"MaxText built {actual:,} parameters but {model_name} has {expected:,} "
            f"(off by {actual / expected:.3f}x): the requested model was not loaded")


def install_hooks(expected_params: int, model_name: str,
                  on_params: Callable[[int], None] | None = None,
                  on_step: Callable[[int, float, float], None] | None = None,
                  on_eval_start: Callable[[], None] | None = None,
                  on_eval_step: Callable[[int], None] | None = None) -> None:
    """Wrap MaxText's MetricLogger so this process checks the model and reports steps, eval passes and eval
    steps. MaxText 0.2.5's train loop (maxtext/trainers/pre_train/train.py) calls `mark_eval_loop_start` before
    an eval pass and `buffer_and_write_metrics(..., is_training=False)` after each eval step.

    Idempotent per process: re-installing replaces the previous hooks (each Ray Train attempt runs in a
    fresh worker process anyway).
    """
    from maxtext.common import metric_logger
    from maxtext.utils import max_utils

    cls = metric_logger.MetricLogger
    for name in ("write_setup_info_to_tensorboard", "write_metrics", "mark_eval_loop_start",
                 "buffer_and_write_metrics"):
        if not hasattr(cls, name):
            raise MaxTextVersionError(f"maxtext MetricLogger has no {name}(); the trainer's hooks need updating")
    setup_info = patching.original(cls.write_setup_info_to_tensorboard)
    write_metrics = patching.original(cls.write_metrics)

    def checked_setup_info(self, params):
        actual = int(max_utils.calculate_num_params_from_pytree(params))
        check_param_count(actual, expected_params, model_name)
        if on_params:
            on_params(actual)
        return setup_info(self, params)

    def reported_write_metrics(self, metrics, step, metric_type="train"):
        result = write_metrics(self, metrics, step, metric_type)
        if on_step and metric_type == "train" and metrics:
            scalars = metrics.get("scalar", {})
            on_step(int(step), float(scalars.get("learning/loss", float("nan"))),
                    float(scalars.get("perf/step_time_seconds", 0.0)))
        return result

    eval_loop_start = patching.original(cls.mark_eval_loop_start)
    buffer_and_write = patching.original(cls.buffer_and_write_metrics)

    def reported_eval_loop_start(self):
        if on_eval_start:
            on_eval_start()
        return eval_loop_start(self)

    def reported_buffer_and_write(self, metrics, step, step_time_delta=None, is_training=True):
        result = buffer_and_write(self, metrics, step, step_time_delta, is_training)
        if on_eval_step and not is_training:
            on_eval_step(int(step))
        return result

    patching.install(cls, "write_setup_info_to_tensorboard", checked_setup_info, setup_info)
    patching.install(cls, "write_metrics", reported_write_metrics, write_metrics)
    patching.install(cls, "mark_eval_loop_start", reported_eval_loop_start, eval_loop_start)
    patching.install(cls, "buffer_and_write_metrics", reported_buffer_and_write, buffer_and_write)


def install_phase_guards() -> None:
    """Name the phase a MaxText error comes from, so a retry is not spent on what cannot change
    (trainer.failures): an error while MaxText reads its settings is a configuration error, one while it builds
    the data iterator a data error, an import error anywhere the environment's. Errors during the steps stay
    runtime failures. Wraps `train.initialize` (looked up as a module global by `train.main`) and
    `input_pipeline_interface.create_data_iterator` (imported at call time by train_utils.setup_train_loop).
    Idempotent per process."""
    from maxtext.input_pipeline import input_pipeline_interface as pipeline
    from maxtext.trainers.pre_train import train

    initialize = patching.original(train.initialize)
    create_data_iterator = patching.original(pipeline.create_data_iterator)

    def guarded_initialize(argv):
        try:
            return initialize(argv)
        except ImportError as err:
            raise EnvironmentImportError(f"MaxText could not import {err.name or err}: {err}") from err
        except (ValueError, TypeError, KeyError, AssertionError) as err:   # pydantic's ValidationError is a ValueError
            raise ConfigurationError(f"MaxText refused the settings: {type(err).__name__}: {err}") from err

    def guarded_create_data_iterator(config, mesh):
        try:
            # Before the iterators and step 1: an eval split with no record for some host fails only at the
            # first eval, after billed steps, and again after each restart (trainer/eval_split.py).
            problem = eval_split.check_eval_split(config, mesh)
            if problem:
                raise DataError(problem)
            return create_data_iterator(config, mesh)
        except DataError:
            raise
        except ImportError as err:
            raise EnvironmentImportError(f"dataset_type={config.dataset_type} needs {err.name or err}: {err}") from err
        except (ConnectionError, TimeoutError):
            raise                                   # a transient storage fault: worth a retry
        except Exception as err:  # noqa: BLE001 - any other failure to open the data repeats on retry
            raise DataError(f"dataset_type={config.dataset_type}: cannot open the data: "
                            f"{type(err).__name__}: {err}") from err

    patching.install(train, "initialize", guarded_initialize, initialize)
    patching.install(pipeline, "create_data_iterator", guarded_create_data_iterator, create_data_iterator)


class ElasticPositionError(DataError):
    """The hosts' saved data positions of an elastic run disagree: no one of them is the run's position."""


def _elastic_position_iterator(data_iterator):
    """The Grain iterator an elastic run reads through (what Grain 0.2.18's ElasticIterator returns), or None."""
    from grain._src.python.dataset import elastic_iterator

    local = getattr(data_iterator, "local_iterator", None)
    return local if isinstance(local, elastic_iterator._ElasticMapDatasetIterator) else None


def elastic_restore_source(directory) -> tuple[int, int]:
    """(host index, host count) of the saved position file an elastic run restores from: host 0's, after
    checking that every host's file holds the same state (ElasticPositionError otherwise)."""
    import json
    import re

    files = {}
    for path in directory.glob("process_*-of-*.json"):
        match = re.fullmatch(r"process_(\d+)-of-(\d+)\.json", path.name)
        if match:
            files[(int(match.group(1)), int(match.group(2)))] = json.loads(path.read_text())
    counts = {count for _, count in files}
    if len(counts) != 1 or (0, next(iter(counts))) not in files:
        raise ElasticPositionError(f"no complete set of Grain position files in {directory}: {sorted(files)}")
    (count,) = counts
    states = {json.dumps(state, sort_keys=True) for state in files.values()}
    if len(states) != 1:
        raise ElasticPositionError(f"the {count} hosts' Grain positions in {directory} disagree: {sorted(states)}")
    return 0, count


def install_elastic_grain_restore() -> None:
    """Restore an elastic run's data position on any number of hosts (core/data.py, "Elastic runs").

    With grain_use_elastic_iterator, each host's loader holds the iterator Grain's ElasticIterator returns, whose
    state is one global record index, equal on every host (grain/_src/python/dataset/elastic_iterator.py
    `_ElasticMapDatasetIterator`: every host adds the global batch per step). MaxText 0.2.5 saves it per host
    (`process_<i>-of-<n>.json`) and `grain_utility.for_restore` (looked up on the module by
    checkpointing.load_state_if_possible) refuses those files when the host count changed. For such an iterator
    this restores every host from host 0's file, through MaxText's own single-file reader
    (GrainCheckpointable(restore_process_index, restore_process_count)). Other iterators take MaxText's path.
    Idempotent per process."""
    from maxtext.common import grain_utility

    original = patching.original(grain_utility.for_restore)

    def for_restore(checkpoint_manager, step, data_iterator, expansion_factor_real_data):
        local = None if isinstance(data_iterator, list) else _elastic_position_iterator(data_iterator)
        if local is None:
            return original(checkpoint_manager, step, data_iterator, expansion_factor_real_data)
        index, count = elastic_restore_source(checkpoint_manager.directory / str(step) / "iter")
        return grain_utility.GrainCheckpointable(local, restore_process_index=index, restore_process_count=count)

    patching.install(grain_utility, "for_restore", for_restore, original)


class _NotElastic:
    """A MaxText config seen with `grain_use_elastic_iterator` off; every other key as it is."""

    def __init__(self, config) -> None:
        self._config = config

    def __getattr__(self, name):
        # Only names the instance lacks reach here. Its own slot is never forwarded: pickle and copy build the
        # object without __init__ and look up special names on it, which would otherwise recurse for ever.
        if name == "_config":
            raise AttributeError(name)
        if name == "grain_use_elastic_iterator":
            return False
        return getattr(self._config, name)

    def __reduce__(self):
        # Grain pickles what it hands its worker processes and MaxText copies configs: rebuilt the same way.
        return (type(self), (self._config,))


def install_elastic_eval_batches() -> None:
    """Batch and shard an elastic run's eval data like a fixed run's (core/data.py, "Elastic runs").

    MaxText 0.2.5 builds the eval iterator without Grain's ElasticIterator (input_pipeline/grain_data_processing.py
    `make_grain_eval_iterator` passes no `elastic`), but the shared formatting step skips batching whenever
    `grain_use_elastic_iterator` is set, leaving it to that iterator (data_processing_utils.py `format_and_batch`),
    so eval elements come unbatched ((seq,), not (batch, seq)) and cannot take the input sharding. An eval pass
    restarts from the split's first record each time and keeps no position, so it needs nothing elastic: this
    builds it with the elastic flag off, through MaxText's own function (looked up by name on
    input_pipeline_interface by `create_data_iterator` at call time). Idempotent per process."""
    from maxtext.input_pipeline import input_pipeline_interface

    original = patching.original(input_pipeline_interface.make_grain_eval_iterator)

    def make_grain_eval_iterator(config, global_mesh, process_indices):
        if getattr(config, "grain_use_elastic_iterator", False):
            config = _NotElastic(config)
        return original(config, global_mesh, process_indices)

    patching.install(input_pipeline_interface, "make_grain_eval_iterator", make_grain_eval_iterator, original)


# The local run's data trace (trainer.local --trace-data): a directory where every training process appends,
# per batch it loads, the Grain position and the first tokens of each row, so a test can tell which records
# each host trained on.
DATA_TRACE_ENV = "TRAINER_DATA_TRACE_DIR"
TRACE_TOKENS = 12


def install_data_trace(trace_dir: str) -> None:
    """Record every batch this process loads (DATA_TRACE_ENV). Idempotent per process."""
    import json
    import os
    import time

    import jax
    from maxtext.input_pipeline import multihost_dataloading

    cls = multihost_dataloading.MultiHostDataLoadIterator
    original = patching.original(cls._get_next_batch_sharded)
    path = os.path.join(trace_dir, f"data-{os.getpid()}.jsonl")
    calls = {"n": 0}

    class _Recorder:
        """Stands in for the loader's local iterator during one batch: passes it through and keeps what came."""

        def __init__(self, inner):
            self.inner, self.batches = inner, []

        def __next__(self):
            batch = next(self.inner)
            self.batches.append(batch)
            return batch

    def traced(self):
        inner = self.local_iterator
        state = inner.get_state() if hasattr(inner, "get_state") else None
        position = state.get("global_next_index") if isinstance(state, dict) else None
        recorder = _Recorder(inner)
        self.local_iterator = recorder
        try:
            result = original(self)
        finally:
            self.local_iterator = inner
        rows = [[int(t) for t in row[:TRACE_TOKENS]] for batch in recorder.batches for row in batch["inputs"]]
        record = {"t": time.time(), "pid": os.getpid(), "call": calls["n"], "rank": jax.process_index(),
                  "hosts": jax.process_count(), "position": position, "rows": rows}
        calls["n"] += 1
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        return result

    patching.install(cls, "_get_next_batch_sharded", traced, original)


def parse_absl_flags() -> None:
    """Give absl's flags their defaults, as `python -m maxtext.trainers.pre_train.train` does (its `__main__` runs
    `app.run(main)`, which parses them). The trainer calls `train.main` itself, and Grain reads an absl flag when it
    starts its worker processes (grain/_src/core/profiler.py `grain_enable_multiprocess_worker_profiling`): unparsed,
    that raises UnparsedFlagAccessError at the first batch read through Grain workers (grain_worker_count > 0; the
    eval split's default). Idempotent."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def run_pre_train(argv: list[str]) -> None:
    import os

    from maxtext.trainers.pre_train import train

    parse_absl_flags()
    install_phase_guards()
    install_elastic_grain_restore()
    install_elastic_eval_batches()
    if os.environ.get(DATA_TRACE_ENV):
        install_data_trace(os.environ[DATA_TRACE_ENV])
    if os.environ.get(cpu_compile_cache.CACHE_ENV):            # the local run's CPU workers (trainer.local)
        cpu_compile_cache.install(os.environ[cpu_compile_cache.CACHE_ENV])
    train.main(argv)

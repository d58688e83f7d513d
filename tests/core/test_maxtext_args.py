"""The shared MaxText argv builder and the Ray scaling config derived from a plan."""
import pytest

from trainer.entrypoint import scaling_kwargs, worker_env
from core.errors import PlanError
from core.maxtext_args import PRE_TRAIN_MODULE, RunSettings, default_checkpoint_period, maxtext_overrides, pre_train_argv
from core.planner import PlanRequest, plan


def _as_dict(overrides):
    pairs = [item.split("=", 1) for item in overrides]
    assert len({k for k, _ in pairs}) == len(pairs), "a key appears twice"
    return dict(pairs)


RUN = RunSettings(run_name="r1", base_output_directory="gs://bucket/runs", steps=1000, checkpoint_period=100)


def test_tpu_argv_carries_the_plan_and_the_run():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, ici_fsdp=4, ici_tensor=4))
    argv = pre_train_argv(p, RUN, "/site/maxtext/configs/base.yml")
    assert argv[:2] == [PRE_TRAIN_MODULE, "/site/maxtext/configs/base.yml"]
    keys = _as_dict(argv[2:])
    assert keys["model_name"] == "llama3-8b"
    assert (keys["ici_fsdp_parallelism"], keys["ici_tensor_parallelism"]) == ("4", "4")
    assert (keys["dcn_data_parallelism"], keys["dcn_fsdp_parallelism"]) == ("2", "1")
    assert keys["checkpoint_period"] == "100" and keys["enable_checkpointing"] == "true"
    assert keys["jax_cache_dir"] == "gs://bucket/runs/jax_cache"       # survives pod restarts (docs/platform-notes.md §6)
    assert keys["steps"] == "1000" and keys["run_name"] == "r1" and keys["dataset_type"] == "synthetic"
    assert "hardware" not in keys                                         # MaxText's default is tpu


def test_argv_is_stable():
    p = plan(PlanRequest("llama3-70b", "v6e", "4x8", slices=2))
    assert maxtext_overrides(p, RUN) == maxtext_overrides(p, RUN)


def test_cpu_mode_folds_dcn_into_ici_with_the_same_device_count():
    p = plan(PlanRequest("tiny", "v6e", "2x4", slices=2))
    keys = _as_dict(maxtext_overrides(p, RunSettings("t", "local-output", 30, 5, hardware="cpu")))
    assert keys["hardware"] == "cpu" and keys["num_slices"] == "1"
    assert (keys["ici_data_parallelism"], keys["ici_fsdp_parallelism"]) == ("2", "8")
    assert (keys["dcn_data_parallelism"], keys["dcn_fsdp_parallelism"]) == ("1", "1")
    assert keys["base_emb_dim"] == "32" and keys["model_name"] == "default"
    assert keys["jax_cache_dir"] == ""          # see maxtext_args._jax_cache_dir: cache skew breaks gloo


def test_cpu_mode_folds_dcn_fsdp_into_ici_fsdp():
    p = plan(PlanRequest("tiny", "v6e", "2x4", slices=2, dcn_fsdp=2))
    keys = _as_dict(maxtext_overrides(p, RunSettings("t", "local-output", 30, 5, hardware="cpu")))
    assert (keys["ici_data_parallelism"], keys["ici_fsdp_parallelism"]) == ("1", "16")


def test_dataset_location_goes_to_the_key_its_type_reads():
    p = plan(PlanRequest("qwen3-0.6b", "v6e", "2x4"))
    keys = _as_dict(maxtext_overrides(p, RunSettings("r", "gs://b", 10, 5, dataset_type="grain",
                                                     dataset_path="gs://b/data/*.arrayrecord")))
    assert keys["grain_train_files"] == "gs://b/data/*.arrayrecord" and keys["dataset_type"] == "grain"


@pytest.mark.parametrize("run, pattern", [
    (RunSettings("r", "gs://b", 30, 10_000), r"checkpoint_period=10000 must be within 1..steps=30"),
    (RunSettings("bad name", "gs://b", 30, 5), r"run_name='bad name'"),
    (RunSettings("r", "", 30, 5), r"base_output_directory is required"),
    (RunSettings("r", "gs://b", 0, 1), r"steps=0"),
    (RunSettings("r", "gs://b", 30, 5, dataset_type="grain"), r"needs a dataset path"),
    (RunSettings("r", "gs://b", 30, 5, dataset_type="tfds", dataset_path="c4"), r"tfds is not offered"),
    (RunSettings("r", "gs://b", 30, 5, extra={"ici_fsdp_parallelism": "2"}), r"would replace planned values"),
])
def test_bad_run_settings_are_refused(run, pattern):
    p = plan(PlanRequest("qwen3-0.6b", "v6e", "2x4"))
    with pytest.raises(PlanError, match=pattern):
        maxtext_overrides(p, run)


def test_cpu_test_model_is_refused_on_tpu():
    with pytest.raises(PlanError, match="CPU test model"):
        maxtext_overrides(plan(PlanRequest("tiny", "v6e", "2x4")), RunSettings("t", "gs://b", 30, 5))


def test_default_checkpoint_period_bounds_lost_work():
    assert [default_checkpoint_period(n) for n in (1, 30, 1000, 100_000)] == [1, 3, 100, 100]


def test_scaling_config_fixed_and_elastic():
    fixed = scaling_kwargs(plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2)))
    assert fixed == {"use_tpu": True, "topology": "4x4", "accelerator_type": "TPU-V6E", "num_workers": 8,
                     "resources_per_worker": {"TPU": 4}, "placement_strategy": "SPREAD"}
    elastic = scaling_kwargs(plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1)), 5.0)
    assert elastic["num_workers"] == (4, 8) and elastic["elastic_resize_monitor_interval_s"] == 5.0


def test_local_worker_env_pretends_each_host_has_its_chips():
    p = plan(PlanRequest("tiny", "v6e", "2x4", slices=2))
    env = worker_env(p, local_cpu=True, maxtext_version="0.2.5")
    assert env["JAX_PLATFORMS"] == "cpu" and env["XLA_FLAGS"].endswith("device_count=4")
    assert worker_env(p, local_cpu=False, maxtext_version="0.2.5") == {"TRAINER_MAXTEXT_VERSION": "0.2.5"}


def test_weights_eval_split_and_file_type_reach_maxtext():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    run = RunSettings("r1", "gs://bucket/runs", 1000, 100, dataset_type="grain",
                      dataset_path="/mnt/training-data/d/text/part-*.parquet",
                      eval_dataset_path="/mnt/training-data/d/eval/part-*.parquet", eval_interval=250,
                      load_parameters_path="gs://w/llama3-8b/0/items")
    keys = _as_dict(maxtext_overrides(p, run))
    assert keys["grain_file_type"] == "parquet"
    assert (keys["grain_eval_files"], keys["eval_interval"]) == ("/mnt/training-data/d/eval/part-*.parquet", "250")
    assert keys["load_parameters_path"] == "gs://w/llama3-8b/0/items"
    arrayrecord = RunSettings("r1", "gs://bucket/runs", 1000, 100, dataset_type="grain",
                              dataset_path="/d/train.array_record-00000-of-00008")
    assert _as_dict(maxtext_overrides(p, arrayrecord))["grain_file_type"] == "arrayrecord"
    # A shard suffix after the format's suffix still names it; a name that names none gets MaxText's default, said
    # explicitly; a format given wins over the name.
    parquet_shards = RunSettings("r1", "gs://b/r", 10, 5, dataset_type="grain", dataset_path="/d/x.parquet-00001")
    assert _as_dict(maxtext_overrides(p, parquet_shards))["grain_file_type"] == "parquet"
    assert _as_dict(maxtext_overrides(p, RunSettings(
        "r1", "gs://b/r", 10, 5, dataset_type="grain", dataset_path="/d/*")))["grain_file_type"] == "arrayrecord"
    told = RunSettings("r1", "gs://b/r", 10, 5, dataset_type="grain", dataset_path="/d/x.parquet",
                       dataset_format="arrayrecord")
    assert _as_dict(maxtext_overrides(p, told))["grain_file_type"] == "arrayrecord"


@pytest.mark.parametrize("run,pattern", [
    (RunSettings("r", "gs://b", 10, 5, eval_dataset_path="/e/*.parquet", eval_interval=5), "needs dataset_type=grain"),
    (RunSettings("r", "gs://b", 10, 5, dataset_type="grain", dataset_path="/d/*.parquet",
                 eval_dataset_path="/e/*.parquet"), "needs eval_interval >= 1"),
])
def test_an_eval_split_needs_grain_and_an_interval(run, pattern):
    with pytest.raises(PlanError, match=pattern):
        run.validate()


def test_the_trainer_flags_carry_weights_and_eval_split():
    from trainer import cli
    from trainer.entrypoint import build_parser

    args = build_parser().parse_args(["--dataset-type", "grain", "--dataset-path", "/d/*.parquet",
                                      "--eval-dataset-path", "/e/*.parquet", "--eval-interval", "20",
                                      "--load-parameters-path", "gs://w/ck/0/items", "--run-name", "r",
                                      "--base-output-directory", "gs://b"])
    run = cli.run_settings(args, "tpu")
    assert (run.load_parameters_path, run.eval_dataset_path, run.eval_interval) == \
        ("gs://w/ck/0/items", "/e/*.parquet", 20)

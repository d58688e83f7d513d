"""What a run trains on, from which weights, with which MaxText settings, under which name (datasetType,
datasetPath, evalDatasetPath, evalInterval, loadParametersPath, maxtextSettings, runName).

Table-driven like tests/infra/test_config_catalogue.py: every wrong value is refused in one line naming the key,
the value and what is allowed, in config build (infra/config) or in the Cloud Storage look-ups that run before
anything registers (infra/data_lookups.py; Cloud Storage is played by preview.harness.GCS_OBJECTS). The rendered
stacks prove what the pods run: the command reads the data on the read-only FUSE mount and the weights as gs://,
the training identity reads exactly the data and weights buckets and writes neither, two run names give two jobs.
"""
from __future__ import annotations

import importlib.resources
import json
import math
import shlex

import pulumi
import pytest
import yaml

from core.maxtext_args import STACK_KEYS, maxtext_overrides, recipe_settings
from core.maxtext_memory_keys import LIFTED_KEYS
from core.planner import plan
from trainer import cli
from trainer.entrypoint import build_parser
from infra.config import NAMESPACE, ConfigError, build
from infra.config.data_rules import maxtext_base_keys
from infra.data_lookups import Lookups, RunFacts, checkpoint_problems, look_up
from core.presets import PRESETS
from preview import harness
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, MINIMAL, REPO
from workloads import common
from workloads.backends import backend_for
from workloads.jobset import spec as jobset_spec
from workloads.pathways import spec as pathways_spec
from workloads.ray import spec as ray_spec

DATA = "gs://my-data/c4/train-*.array_record"
PARQUET = "gs://my-text/corpus/part-*.parquet"
WEIGHTS = "gs://my-weights/llama3-8b/0/items"
GRAIN = {**MINIMAL, "datasetType": "grain", "datasetPath": DATA}
PATHWAYS = {**MINIMAL, "workloadBackend": "pathways", "model": "qwen3-0.6b"}
SPOT = {**MINIMAL, "capacity": "spot", "model": "qwen3-0.6b"}

# (case id, config, the KEY=VALUE the line must name, further words the line must hold)
REFUSED = [
    ("local data path", {**MINIMAL, "datasetType": "grain", "datasetPath": "/data/train.array_record"},
     "datasetPath='/data/train.array_record'", ["gs://BUCKET/PATH", "TPU VMs never see"]),
    ("relative data path", {**MINIMAL, "datasetType": "grain", "datasetPath": "data/*.parquet"},
     "datasetPath='data/*.parquet'", ["gs://BUCKET/PATH"]),
    ("data on S3", {**MINIMAL, "datasetType": "grain", "datasetPath": "s3://b/x.parquet"},
     "datasetPath='s3://b/x.parquet'", ["s3:// is not read by the pods"]),
    ("data on the Hugging Face hub", {**MINIMAL, "datasetType": "grain", "datasetPath": "hf://datasets/c4/*.parquet"},
     "datasetPath='hf://datasets/c4/*.parquet'", ["hf:// is not read"]),
    ("data glob names no format", {**GRAIN, "datasetPath": "gs://my-data/c4/*"}, "datasetPath='gs://my-data/c4/*'",
     ["*.array_record", "*.parquet"]),
    ("data path is a folder", {**GRAIN, "datasetPath": "gs://my-data/c4/"}, "datasetPath='gs://my-data/c4/'",
     ["not a folder"]),
    ("data path is a bucket", {**GRAIN, "datasetPath": "gs://my-data"}, "datasetPath='gs://my-data'",
     ["a path inside the bucket"]),
    ("data bucket name invalid", {**GRAIN, "datasetPath": "gs://My_Data/x.parquet"},
     "datasetPath='gs://My_Data/x.parquet'", ["not a bucket name"]),
    ("data mixture", {**GRAIN, "datasetPath": "gs://a-b/x.array_record,0.3;gs://a-b/y.array_record,0.7"},
     "datasetPath='gs://a-b/x.array_record,0.3;", ["one file pattern"]),
    ("grain without a path", {**MINIMAL, "datasetType": "grain"}, "datasetType='grain'", ["needs", "datasetPath"]),
    ("dataset type not offered", {**MINIMAL, "datasetType": "tfds"}, "datasetType='tfds'",
     ["synthetic, grain"]),
    ("hf dataset type not offered", {**MINIMAL, "datasetType": "hf"}, "datasetType='hf'", ["synthetic, grain"]),
    ("data with synthetic", {**MINIMAL, "datasetPath": DATA}, f"datasetPath={DATA!r}",
     ["datasetType='synthetic'", "reads no files"]),
    ("local eval path", {**GRAIN, "evalDatasetPath": "./eval.parquet", "evalSteps": 10}, "evalDatasetPath='./eval.parquet'",
     ["gs://BUCKET/PATH"]),
    ("eval interval without eval data", {**GRAIN, "evalInterval": 100}, "evalInterval=100", ["evalDatasetPath"]),
    # Grain shards the eval split over the hosts (ds[i::n]); without a fixed number of steps a host whose share
    # runs out leaves the eval loop while the others wait in the eval step (MaxText 0.2.5 pads only with
    # eval_steps > 0: configs/types.py).
    ("eval split on several hosts without eval steps", {**GRAIN, "evalDatasetPath": DATA}, "evalSteps=None",
     ["evalDatasetPath on 8 hosts needs evalSteps >= 1"]),
    ("eval steps zero", {**GRAIN, "evalDatasetPath": DATA, "evalSteps": 0}, "evalSteps=0", ["at least 1"]),
    # MaxText 0.2.5 acts on a notice only at the train step's checkpoint call, after the eval pass
    # (trainers/pre_train/train.py): a pass longer than the Spot notice leaves no time for the save.
    ("eval pass longer than the notice", {**SPOT, "datasetType": "grain", "datasetPath": DATA,
                                          "evalDatasetPath": DATA, "evalSteps": 100000}, "evalSteps=100000",
     ["at most", "only after the eval pass", "s pods get"]),
    ("eval interval zero", {**GRAIN, "evalDatasetPath": DATA, "evalInterval": 0, "evalSteps": 10}, "evalInterval=0",
     ["at least 1"]),
    ("local weights", {**MINIMAL, "loadParametersPath": "/ckpt/llama3-8b"}, "loadParametersPath='/ckpt/llama3-8b'",
     ["Orbax checkpoint directory", "gs://BUCKET/PATH"]),
    ("weights on another cloud", {**MINIMAL, "loadParametersPath": "s3://w/ck"}, "loadParametersPath='s3://w/ck'",
     ["s3:// is not read"]),
    ("weights as a glob", {**MINIMAL, "loadParametersPath": "gs://my-weights/*/items"},
     "loadParametersPath='gs://my-weights/*/items'", ["not a pattern"]),
    ("run name uppercase", {**MINIMAL, "runName": "C4-Run"}, "runName='C4-Run'", ["lowercase"]),
    ("run name with a slash", {**MINIMAL, "runName": "c4/v1"}, "runName='c4/v1'", ["lowercase"]),
    ("run name too long", {**MINIMAL, "runName": "r" * 41}, "runName='" + "r" * 41, ["at most 40"]),
    ("run name too long for a Pathways JobSet", {**PATHWAYS, "runName": "r" * 23}, "runName='" + "r" * 23,
     ["at most 22", "pathwaysJobName"]),
    ("MaxText key unknown", {**MINIMAL, "maxtextSettings": {"learnin_rate": 1e-4}},
     "maxtextSettings.learnin_rate='0.0001'", ["not a MaxText 0.2.5 setting", "learning_rate"]),
    ("MaxText key the stack sets: steps", {**MINIMAL, "maxtextSettings": {"steps": 10}},
     "maxtextSettings.steps='10'", ["set by the stack", "trainSteps"]),
    ("MaxText key the stack sets: run_name", {**MINIMAL, "maxtextSettings": {"run_name": "x"}},
     "maxtextSettings.run_name='x'", ["runName"]),
    ("MaxText key the stack sets: data", {**MINIMAL, "maxtextSettings": {"grain_train_files": "/x"}},
     "maxtextSettings.grain_train_files='/x'", ["datasetPath"]),
    ("MaxText key the stack sets: weights", {**MINIMAL, "maxtextSettings": {"load_parameters_path": "gs://a/b"}},
     "maxtextSettings.load_parameters_path='gs://a/b'", ["loadParametersPath"]),
    ("MaxText key the stack sets: batch", {**MINIMAL, "maxtextSettings": {"per_device_batch_size": 2}},
     "maxtextSettings.per_device_batch_size='2'", ["perDeviceBatchSize"]),
    ("MaxText key the stack sets: mesh", {**MINIMAL, "maxtextSettings": {"ici_fsdp_parallelism": 8}},
     "maxtextSettings.ici_fsdp_parallelism='8'", ["the planner"]),
    ("MaxText key the stack sets: dataset type", {**MINIMAL, "maxtextSettings": {"dataset_type": "hf"}},
     "maxtextSettings.dataset_type='hf'", ["datasetType"]),
    ("MaxText key the stack sets: goodput name", {**MINIMAL, "maxtextSettings": {"goodput_job_name": "x"}},
     "maxtextSettings.goodput_job_name='x'", ["runName", "dashboard"]),
    ("MaxText setting nested", {**MINIMAL, "maxtextSettings": {"learning_rate": [1, 2]}},
     "maxtextSettings=", ["a map of names to plain values"]),
    ("MaxText settings not a map", {**MINIMAL, "maxtextSettings": ["learning_rate=1"]},
     "maxtextSettings=", ["a map of names to plain values"]),
    ("planned MaxText key not a number", {**MINIMAL, "maxtextSettings": {"num_vocab_tiling": "many"}},
     "maxtextSettings", ["planner", "whole number"]),
    # Grain's position per host cannot follow an elastic resize (core/data.py check_dataset, the one place).
    # An elastic run keeps Grain's one global position of ArrayRecord data (core/data.py), not Parquet's per-host
    # file shares, nor a position that packing moves.
    # What is refused is Parquet on an elastic run (not Grain, and not by switching to synthetic data): the fixes
    # are ArrayRecord files or a fixed-size run.
    ("Parquet on an elastic Spot run", {**SPOT, "datasetType": "grain", "datasetPath": PARQUET},
     f"datasetPath='{PARQUET}'", ["is parquet data, refused on an elastic run", "capacity=spot",
                                  "convert it to arrayrecord", "elasticMinSlices=2"]),
    ("Parquet with elasticMinSlices", {**GRAIN, "datasetPath": PARQUET, "model": "qwen3-0.6b", "elasticMinSlices": 1},
     f"datasetPath='{PARQUET}'", ["elasticMinSlices", "1..2 slices", "arrayrecord"]),
    ("packing on an elastic run's grain data", {**SPOT, "datasetType": "grain", "datasetPath": DATA,
                                                "maxtextSettings": {"packing": True}},
     "datasetType='grain'", ["elastic", "packing"]),
    ("grain on elastic Pathways", {**PATHWAYS, "slices": 2, "pathwaysElasticSlices": 1, "datasetType": "grain",
                                   "datasetPath": DATA},
     "datasetType='grain'", ["pathwaysElasticSlices=1", "colocated-Python"]),
]

# Refusals only Cloud Storage can give (infra/data_lookups.py): (case id, config, bucket contents, named, words).
QWEN3_METADATA = {"tree_metadata": {
    "('params', 'params', 'decoder', 'layers', 'mlp', 'wi_0', 'kernel')": {
        "key_metadata": [{"key": k} for k in ("params", "params", "decoder", "layers", "mlp", "wi_0", "kernel")],
        "value_metadata": {"value_type": "jax.Array", "write_shape": [1024, 28, 3072]}},
    "('params', 'params', 'decoder', 'layers', 'self_attention', 'query_norm', 'scale')": {
        "key_metadata": [{"key": k} for k in ("params", "params", "decoder", "layers", "self_attention",
                                               "query_norm", "scale")],
        "value_metadata": {"value_type": "jax.Array", "write_shape": [128, 28]}},
    "('params', 'params', 'token_embedder', 'embedding')": {
        "key_metadata": [{"key": k} for k in ("params", "params", "token_embedder", "embedding")],
        "value_metadata": {"value_type": "jax.Array", "write_shape": [151936, 1024]}}}}


def llama3_8b_metadata() -> dict:
    text = json.dumps(QWEN3_METADATA).replace("[1024, 28, 3072]", "[4096, 32, 14336]").replace(
        "[151936, 1024]", "[128256, 4096]")
    metadata = json.loads(text)
    metadata["tree_metadata"] = {key: value for key, value in metadata["tree_metadata"].items()
                                 if "query_norm" not in key}
    return metadata


DATA_FILES = {"c4/train-00000.array_record": "", "c4/train-00001.array_record": ""}
LOOKUP_REFUSED = [
    ("data glob matches nothing", GRAIN, {"my-data": {"c4/validation-00000.array_record": ""}},
     f"datasetPath={DATA!r}", ["matches no file", "no object matches"]),
    ("data bucket missing", GRAIN, {}, f"datasetPath={DATA!r}", ["its bucket does not exist"]),
    ("eval glob matches nothing", {**GRAIN, "evalDatasetPath": "gs://my-data/c4/validation-*.array_record",
                                   "evalSteps": 10},
     {"my-data": DATA_FILES}, "evalDatasetPath='gs://my-data/c4/validation-*.array_record'", ["matches no file"]),
    ("weights not a checkpoint", {**MINIMAL, "loadParametersPath": WEIGHTS}, {"my-weights": {}},
     f"loadParametersPath={WEIGHTS!r}", ["not an Orbax checkpoint", "_METADATA"]),
    ("weights of another model", {**MINIMAL, "loadParametersPath": WEIGHTS},
     {"my-weights": {"llama3-8b/0/items/_METADATA": json.dumps(QWEN3_METADATA)}},
     f"loadParametersPath={WEIGHTS!r}", ["holds 28 decoder layers", "151936 x 1024", "allowed: a checkpoint of "
                                        "llama3-8b (32 layers"]),
]


@pytest.fixture
def cloud_storage():
    """Cloud Storage for one test (preview.harness.GCS_OBJECTS: empty buckets to fill), offline again after it."""
    harness.GCS_OBJECTS = {}
    yield harness.GCS_OBJECTS
    harness.GCS_OBJECTS = None


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        build(raw)
    return error.value.problems


@pytest.mark.parametrize("raw,named,words", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_every_wrong_value_is_refused_in_one_line_naming_key_value_and_what_is_allowed(raw, named, words):
    problems = _problems(raw)
    assert len(problems) == 1, problems
    [line] = problems
    assert f"{NAMESPACE}:{named.split('=')[0].split('.')[0]}" in line and named in line, line
    for word in words:
        assert word in line, (word, line)


def _lookups(objects: dict[str, dict[str, str]]) -> Lookups:
    """The look-ups against an in-memory Cloud Storage, as the mocks play it."""
    def list_objects(bucket, pattern, page_token):
        if bucket not in objects:
            raise RuntimeError("googleapi: Error 404: The specified bucket does not exist., notFound")
        return [name for name in objects[bucket] if harness.gcs_glob(pattern).fullmatch(name)], None

    def read_object(bucket, name):
        if name not in objects.get(bucket, {}):
            raise RuntimeError(f"googleapi: Error 404: No such object: {bucket}/{name}, notFound")
        return objects[bucket][name]

    return Lookups(list_objects, read_object)


@pytest.mark.parametrize("raw,objects,named,words", [case[1:] for case in LOOKUP_REFUSED],
                         ids=[case[0] for case in LOOKUP_REFUSED])
def test_what_only_cloud_storage_knows_is_refused_in_one_line(raw, objects, named, words):
    with pytest.raises(ConfigError) as error:
        look_up(build(raw), _lookups(objects))
    [line] = error.value.problems
    assert named in line, line
    for word in words:
        assert word in line, (word, line)


# A representative of each kind runs the whole program, as `pulumi up` would: nothing registers.
UNDER_PULUMI = ["local data path", "grain without a path", "MaxText key the stack sets: steps",
                "Parquet on an elastic Spot run", "grain on elastic Pathways", "weights as a glob"]
LOOKUPS_UNDER_PULUMI = ["data glob matches nothing", "weights of another model"]


@pytest.mark.parametrize("case_id", UNDER_PULUMI + LOOKUPS_UNDER_PULUMI)
def test_refusals_under_pulumi_register_nothing(case_id, cloud_storage):
    cases = {case[0]: (case[1], {}, case[2]) for case in REFUSED}
    cases.update({case[0]: (case[1], case[2], case[3]) for case in LOOKUP_REFUSED})
    raw, objects, named = cases[case_id]
    cloud_storage.update(objects)
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as error:
        run_program(raw, stack="data", monitor=monitor)
    assert [r.type for r in monitor.registrations if r.custom] == []
    assert named in str(error.value) and "Traceback" not in str(error.value)


def test_the_weights_check_tells_models_apart_and_accepts_shards():
    llama = llama3_8b_metadata()
    assert checkpoint_problems(llama, PRESETS["llama3-8b"]) == []
    assert checkpoint_problems(QWEN3_METADATA, PRESETS["qwen3-0.6b"]) == []
    # 70B has 80 layers of width 8192: the 8B checkpoint's 32 layers are refused.
    assert "holds 32 decoder layers" in checkpoint_problems(llama, PRESETS["llama3-70b"])[0]
    # A checkpoint saved sharded writes each shard's shape: one that divides the model's is accepted.
    sharded = json.loads(json.dumps(llama).replace("[128256, 4096]", "[128256, 1024]"))
    assert checkpoint_problems(sharded, PRESETS["llama3-8b"]) == []
    other_vocab = json.loads(json.dumps(llama).replace("[128256, 4096]", "[151936, 4096]"))
    assert "151936 x 4096" in checkpoint_problems(other_vocab, PRESETS["llama3-8b"])[0]
    with_qk_norm = json.loads(json.dumps(QWEN3_METADATA).replace("[1024, 28, 3072]", "[4096, 32, 14336]")
                              .replace("[151936, 1024]", "[128256, 4096]"))
    assert "query_norm" in checkpoint_problems(with_qk_norm, PRESETS["llama3-8b"])[0]


def test_the_run_s_checkpoints_say_whether_an_up_starts_resumes_or_finds_it_finished():
    config = build({**MINIMAL, "runName": "c4-v1", "trainSteps": 200})
    bucket, prefix = config.storage.bucket_name, "maxtext/c4-v1/checkpoints"
    assert look_up(config, _lookups({})).action(200) == "start"                  # no bucket yet: a first up
    assert look_up(config, _lookups({bucket: {}})).action(200) == "start"
    steps = {f"{prefix}/{step}/_CHECKPOINT_METADATA": "" for step in (0, 50, 100)}
    facts = look_up(config, _lookups({bucket: {**steps, "maxtext/other-run/checkpoints/150/_CHECKPOINT_METADATA": ""}}))
    assert (facts.latest_step, facts.action(200)) == (100, "resume")
    # A checkpoint at step 199 is 200 steps done: MaxText would refuse to train on (train_utils
    # validate_completed_steps), so the up warns and names what to do.
    finished = look_up(config, _lookups({bucket: {f"{prefix}/199/_CHECKPOINT_METADATA": ""}}))
    assert finished.action(200) == "finished"
    assert any("name a new run" in warning for warning in finished.warnings)

    def forbidden(bucket, pattern, page_token):
        raise RuntimeError("googleapi: Error 403: caller does not have storage.objects.list access, forbidden")
    unknown = look_up(config, Lookups(forbidden, lambda b, n: ""))
    assert unknown.action(200) == "unknown" and "not listed (googleapi: Error 403" in unknown.warnings[0]


def test_maxtext_base_keys_snapshot_is_the_installed_maxtext_base_yml():
    base = importlib.resources.files("maxtext") / "configs" / "base.yml"
    assert maxtext_base_keys() == frozenset(yaml.safe_load(base.read_text()))


def _ray_argv(config) -> list[str]:
    """MaxText's argv as the Ray trainer makes it from the RayJob entrypoint's flags."""
    args = build_parser().parse_args(ray_spec.entrypoint(config)[3:])
    return maxtext_overrides(plan(cli.plan_request(args, 1)), cli.run_settings(args, "tpu"))


def test_every_key_a_stack_command_sets_is_owned_so_maxtext_settings_cannot_replace_it():
    for stack in COMMITTED_STACKS:
        config = build(load_stack_config(stack, REPO))
        # Ray's workers build MaxText's argv themselves: ask the trainer's own parser and builder for it.
        keys = ({item.split("=", 1)[0] for item in _ray_argv(config) if "=" in item}
                if config.workload.backend == "rayjob" else set(backend_for(config).maxtext_settings(config)))
        tuning = recipe_settings(config.workload.plan, "tpu")
        owned = set(STACK_KEYS) | set(LIFTED_KEYS) | set(tuning) | set(config.workload.plan.model.dimension_overrides)
        assert keys - owned == set(), (stack, keys - owned)


# ---- rendered stacks: what the pods run and what the identity may do ----------------------------------

def _with_data(stack: str, **extra) -> dict:
    raw = load_stack_config(stack, REPO)
    raw.update({"datasetType": "grain", "datasetPath": DATA, "loadParametersPath": WEIGHTS, "runName": "c4-v1",
                "maxtextSettings": {"learning_rate": 3e-5}, **extra})
    if stack == "pathways":
        raw.update({"pathwaysElasticSlices": 0, "loadParametersPath": "gs://my-weights/qwen3-0.6b/0/items"})
    return raw


def _storage(model: str) -> dict[str, dict[str, str]]:
    metadata = QWEN3_METADATA if model.startswith("qwen3") else llama3_8b_metadata()
    return {"my-data": dict(DATA_FILES),
            "my-weights": {f"{model}/0/items/_METADATA": json.dumps(metadata)}}


def _objects(run, kind: str) -> list[dict]:
    return [r.inputs for r in run.resources if r.type.endswith(f":{kind}")]


def _maxtext_pods(run) -> list[tuple[dict, dict]]:
    """(pod template, MaxText container) of every pod that runs MaxText: Ray TPU workers, JobSet pods, the
    Pathways head."""
    pods = []
    for job in _objects(run, "RayJob"):
        for group in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
            pods.append((group["template"], group["template"]["spec"]["containers"][0]))
    for jobset in _objects(run, "JobSet"):
        for replicated in jobset["spec"]["replicatedJobs"]:
            template = replicated["template"]["spec"]["template"]
            for container in template["spec"]["containers"]:
                if container["name"] == "maxtext":
                    pods.append((template, container))
    return pods


def _command_keys(run) -> dict[str, str]:
    """MaxText key=value of the training command, whichever backend launches it."""
    items: list[str] = []
    for job in _objects(run, "RayJob"):
        # The RayJob runs the smoke test, then `exec` the trainer entrypoint, whose flags the trainer's own
        # parser turns into MaxText's argv (as tests/workloads/test_ray.py does for the plan).
        script = shlex.split(job["spec"]["entrypoint"])[-1]
        words = shlex.split(script.split("&& exec ", 1)[-1])
        assert words[:3] == ["python", "-m", "trainer.entrypoint"]
        args = build_parser().parse_args(words[3:])
        items += maxtext_overrides(plan(cli.plan_request(args, 1)), cli.run_settings(args, "tpu"))
    for jobset in _objects(run, "JobSet"):
        for replicated in jobset["spec"]["replicatedJobs"]:
            for container in replicated["template"]["spec"]["template"]["spec"]["containers"]:
                if container["name"] == "maxtext":
                    items += container.get("args") or container["command"]
    return dict(item.split("=", 1) for item in items if "=" in item and not item.startswith("-"))


@pytest.mark.parametrize("stack", ["prod", "jobset", "pathways"])
def test_rendered_stack_trains_on_the_data_from_the_weights_under_the_run_name(stack, cloud_storage):
    raw = _with_data(stack)
    config = build(raw)
    cloud_storage.update(_storage(config.workload.model))
    run = run_program(raw, stack=stack)
    keys = _command_keys(run)
    mounted = f"{common.DATA_MOUNT}/my-data/c4/train-*.array_record"
    assert keys["dataset_type"] == "grain" and keys["grain_train_files"] == mounted
    assert keys["grain_file_type"] == "arrayrecord"
    assert keys["load_parameters_path"] == raw["loadParametersPath"]
    assert keys["run_name"] == "c4-v1" and keys["learning_rate"] == "3e-05"
    assert keys["tokenizer_path"] in ("tokenizer_llama3.tiktoken", "qwen3-tokenizer")
    # Every pod that runs MaxText mounts the data bucket read-only through the GCS FUSE CSI driver.
    pods = _maxtext_pods(run)
    if stack == "pathways":
        head = next(r["template"]["spec"]["template"] for job in _objects(run, "JobSet")
                    for r in job["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
        pods = [(head, next(c for c in head["spec"]["containers"] if c["name"] == "maxtext"))]
    assert pods
    for template, container in pods:
        assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        [volume] = [v for v in template["spec"]["volumes"] if "csi" in v]
        assert volume["csi"]["driver"] == common.GCSFUSE_DRIVER and volume["csi"]["readOnly"] is True
        assert volume["csi"]["volumeAttributes"]["bucketName"] == "my-data"
        options = volume["csi"]["volumeAttributes"]["mountOptions"].split(",")
        assert "file-cache:enable-parallel-downloads:true" in options and "metadata-cache:ttl-secs:-1" in options
        # Only the dataset's folder is mounted (the driver's only-dir: gcs-fuse-csi-driver
        # docs/sub-directory-mounts.md), where MaxText's path expects it.
        assert "only-dir=c4" in options
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount == {"name": volume["name"], "mountPath": f"{common.DATA_MOUNT}/my-data/c4", "readOnly": True}
        assert mounted.startswith(mount["mountPath"] + "/")
        assert ("hostNetworkPodKSA" in volume["csi"]["volumeAttributes"]) == bool(template["spec"].get("hostNetwork"))
        # The file cache is on the pod's own disk, not the node's boot disk (tests/workloads/test_fuse_cache.py).
        assert any(v["name"] == "gke-gcsfuse-cache" and "ephemeral" in v for v in template["spec"]["volumes"])
    # The identity reads the data and weights buckets and writes neither: objectViewer only (objects.get and
    # objects.list; IAM "Cloud Storage roles"), while the checkpoint bucket keeps its object user role.
    bindings = _objects(run, "BucketIAMMember")
    roles = {(b["bucket"], b["role"]) for b in bindings}
    for bucket in ("my-data", "my-weights"):
        assert {role for name, role in roles if name == bucket} == {"roles/storage.objectViewer"}
    principal = next(b["member"] for b in bindings if b["role"] == "roles/storage.objectUser"
                     and not b["member"].startswith("serviceAccount:"))
    assert {b["member"] for b in bindings if b["bucket"] == "my-data"} >= {principal}
    assert "c4-v1" in run.outputs["run"] and "starts it" in run.outputs["run"]
    # The dashboard's goodput charts filter on the run's name (MaxText's goodput job name).
    [dashboard] = _objects(run, "Dashboard")
    assert 'resource.labels.workload_id=\\"c4-v1\\"' in dashboard["dashboardJson"]


def _job_names(run) -> set[str]:
    return {obj["metadata"]["name"] for kind in ("RayJob", "JobSet") for obj in _objects(run, kind)
            if "smoke" not in obj["metadata"]["name"]}


@pytest.mark.parametrize("stack", ["prod", "jobset", "pathways"])
def test_two_run_names_give_two_jobs_writing_two_folders(stack, cloud_storage):
    names, folders = [], []
    for run_name in ("c4-v1", "c4-v2"):
        raw = _with_data(stack, runName=run_name)
        cloud_storage.clear()
        cloud_storage.update(_storage(build(raw).workload.model))
        run = run_program(raw, stack=stack)
        names.append(_job_names(run))
        folders.append(_command_keys(run)["run_name"])
    assert folders == ["c4-v1", "c4-v2"]
    assert names[0] and names[1] and names[0].isdisjoint(names[1]), names


def test_a_run_with_checkpoints_resumes_and_the_plan_says_so(cloud_storage):
    raw = _with_data("jobset")
    config = build(raw)
    cloud_storage.update(_storage(config.workload.model))
    cloud_storage[config.storage.bucket_name] = {"maxtext/c4-v1/checkpoints/50/_CHECKPOINT_METADATA": ""}
    summary = run_program(raw, stack="jobset").outputs["run"]
    assert "resumes it from its newest checkpoint, step 50 of 200" in summary
    assert "data position on restart: kept" in summary and "tokenizer_llama3.tiktoken" in summary


def test_the_default_trains_on_synthetic_data_and_says_so(dev):
    summary = dev.outputs["run"]
    assert "data: synthetic" in summary and "datasetType=grain" in summary
    assert all(not v.get("csi") for job in _objects(dev, "RayJob")
               for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] for v in g["template"]["spec"]["volumes"])


def test_planned_maxtext_settings_go_through_the_planner_and_unmodeled_ones_are_named():
    config = build({**MINIMAL, "maxtextSettings": {"num_vocab_tiling": 4, "quantization": "int8",
                                                   "learning_rate": 1e-4}})
    assert config.workload.plan.num_vocab_tiling == 4
    assert ("quantization", "int8") in config.workload.plan.unmodeled
    assert dict(config.workload.run.maxtext_settings) == {"quantization": "int8", "learning_rate": "0.0001"}
    # The Ray entrypoint carries the planned key so its own planner plans the same run.
    command = ray_spec.entrypoint(config)
    assert "num_vocab_tiling=4" in command and "learning_rate=0.0001" in command


def test_run_facts_action_is_start_without_checkpoints():
    assert RunFacts().action(10) == "start"
    assert RunFacts(latest_step=8).action(10) == "resume"
    assert RunFacts(latest_step=9).action(10) == "finished"
    assert RunFacts(run_listed=False).action(10) == "unknown"


def test_the_offline_plan_reaches_no_cloud_storage_and_says_so_without_refusing():
    """Offline (no GCS_OBJECTS), a data glob is not refused for matching nothing, and the run is 'unknown'."""
    assert harness.GCS_OBJECTS is None
    run = run_program(_with_data("jobset"), stack="jobset")
    assert "starts or resumes it (its checkpoints could not be listed)" in run.outputs["run"]
    assert any(r.type == "gcp:container/cluster:Cluster" for r in run.resources)


def test_an_elastic_run_reads_arrayrecord_grain_data_with_grains_global_position():
    """The dev stack's shape (elastic on Spot) on the user's ArrayRecord data: accepted, and the launched run keeps
    Grain's one global position (core/data.py ELASTIC_GRAIN_SETTINGS) that every host restores after a resize."""
    config = build({**SPOT, "datasetType": "grain", "datasetPath": DATA})
    assert config.workload.plan.elastic
    settings = _ray_argv(config)
    keys = dict(item.split("=", 1) for item in settings if "=" in item)
    assert (keys["grain_use_elastic_iterator"], keys["packing"], keys["grain_file_type"]) == ("true", "false",
                                                                                              "arrayrecord")


def test_eval_steps_reach_maxtext_with_padding_on_every_multi_host_backend():
    """evalSteps becomes MaxText's eval_steps and generate_padding_batch_eval=true (a host whose share of the eval
    split runs out pads: maxtext input_pipeline/multihost_dataloading.py), on the Ray job's command and in the
    JobSet's argv alike; a Pathways run (one JAX client) needs none."""
    from workloads.jobset import spec as jobset_spec
    from workloads.ray import spec as ray_spec

    config = build({**GRAIN, "evalDatasetPath": DATA, "evalSteps": 25})
    assert config.workload.run.eval_steps == 25
    command = ray_spec.entrypoint(config)
    assert command[command.index("--eval-steps") + 1] == "25"
    argv = jobset_spec.training_argv(build({**GRAIN, "evalDatasetPath": DATA, "evalSteps": 25,
                                            "workloadBackend": "jobset"}))
    assert "eval_steps=25" in argv and "generate_padding_batch_eval=true" in argv
    build({**PATHWAYS, "datasetType": "grain", "datasetPath": DATA, "evalDatasetPath": DATA})


def test_the_eval_pass_bound_is_what_the_spot_notice_leaves_after_the_save():
    """The largest evalSteps accepted is the pass that fits, with the save, in the pods' time after a Spot notice
    (core/preemption.py eval_steps_within_grace); one more is refused."""
    from core.preemption import eval_step_seconds, eval_steps_within_grace, shutdown_budget

    raw = {**SPOT, "datasetType": "grain", "datasetPath": DATA, "evalDatasetPath": DATA, "evalSteps": 1}
    config = build(raw)
    # The checkpoint period changes neither the save's time nor the notice's.
    budget = shutdown_budget(config.workload.plan, spot=True, sees_notice=True, checkpoint_period=1)
    limit = eval_steps_within_grace(budget, config.workload.plan)
    assert limit >= 1
    assert limit * eval_step_seconds(config.workload.plan) + budget.needed_s <= budget.notice_s
    assert build({**raw, "evalSteps": limit}).workload.run.eval_steps == limit
    [line] = _problems({**raw, "evalSteps": limit + 1})
    assert f"at most {limit}:" in line



def test_off_spot_the_pods_grace_covers_an_eval_pass_and_its_bound_is_that_grace_s_cap():
    """Issue 43: off Spot a drain's or a maintenance's SIGTERM is acted on only after the eval pass, as a Spot
    notice is (MaxText 0.2.5 checks it in the train step's checkpoint call), but the pods' grace is ours to size:
    it covers the pass and the save, up to MAX_POD_GRACE_S, and a pass that cannot fit that cap is refused."""
    from core.preemption import MAX_POD_GRACE_S, eval_step_seconds, eval_steps_within_grace

    on_demand = {**MINIMAL, "model": "qwen3-0.6b", "datasetType": "grain", "datasetPath": DATA,
                 "evalDatasetPath": DATA}
    without_eval = build({**MINIMAL, "model": "qwen3-0.6b", "datasetType": "grain", "datasetPath": DATA})
    save_only = without_eval.workload.shutdown.pod_grace_s
    assert save_only == without_eval.workload.shutdown.needed_s
    config = build({**on_demand, "evalSteps": 5})
    plan = config.workload.plan
    assert config.workload.shutdown.pod_grace_s == save_only + math.ceil(5 * eval_step_seconds(plan))
    assert any("after the rest of an eval pass" in line for line in config.workload.shutdown.describe())
    limit = eval_steps_within_grace(config.workload.shutdown, plan)
    assert limit * eval_step_seconds(plan) + save_only <= MAX_POD_GRACE_S
    assert build({**on_demand, "evalSteps": limit}).workload.shutdown.pod_grace_s <= MAX_POD_GRACE_S
    [line] = _problems({**on_demand, "evalSteps": limit + 1})
    assert f"at most {limit}:" in line and "drain" in line and f"({MAX_POD_GRACE_S} s)" in line

"""`python -m preview` end to end: every committed stack plans and validates; files round-trip; bad
config exits 2 without a traceback; invalid objects exit 1 listing each error by object and field path."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from preview import graph as graph_module
from infra.config import build
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.cli import render_text
from preview.files import load_kubernetes_files, write_plan_files
from preview.model import build_plan, cluster_version, tpu_pools
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO, SPLIT_STACKS, build_stack, committed_stack_run

REQUIRED_KEYS = {"resources", "manifests", "exports", "validation", "cost", "critical_path"}


def run_cli(*args: str, root: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "preview", *args, "--root", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cli_plans(tmp_path_factory):
    """One CLI run per committed stack (JSON, with --out and --graph), shared by the tests below."""
    cache: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def plan(stack: str) -> tuple[subprocess.CompletedProcess, Path]:
        if stack not in cache:
            out = tmp_path_factory.mktemp(f"plan-{stack}")
            cache[stack] = run_cli("--stack", stack, "--json", "--out", str(out / "files"),
                                   "--graph", str(out / "graph.svg")), out
        return cache[stack]
    return plan


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_every_committed_stack_plans_and_validates(cli_plans, stack):
    proc, _ = cli_plans(stack)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert REQUIRED_KEYS <= set(document)
    assert document["validation"]["errors"] == []
    assert document["validation"]["cr_check_skipped"] is False
    for resource in document["resources"]:
        assert {"type", "name", "parent", "depends_on", "inputs"} <= set(resource)
    kinds = {m["kind"] for m in document["manifests"]}
    assert {"Namespace", "ServiceAccount"} <= kinds
    assert document["cost"]["chips"] == document["exports"]["totalChips"]
    assert document["critical_path"]["deploy"]["longest_s"] < document["critical_path"]["deploy"]["sum_of_all_steps_s"]


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_offline_is_said_once_inside_the_plan_not_as_a_warning(cli_plans, stack):
    """No Cloud Storage offline is every plan's normal state: one assumption line, nothing on stderr."""
    proc, _ = cli_plans(stack)
    assert "Cloud Storage" not in proc.stderr
    offline = [line for line in json.loads(proc.stdout)["assumptions"] if "offline plan reaches no Cloud Storage" in line]
    assert len(offline) == 1


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_secrets_are_never_printed(cli_plans, stack):
    proc, _ = cli_plans(stack)
    document = json.loads(proc.stdout)
    assert document["exports"]["kubeconfig"] == "[secret]"
    # The kubeconfig is also an input of the Kubernetes provider: masked there too.
    assert "certificate-authority-data" not in proc.stdout


@pytest.mark.parametrize("stack", SPLIT_STACKS)
def test_the_split_stacks_plans_print_no_secret(stack):
    """The shared cluster and its runs, in process from their cached program runs (a CLI run each would cost
    minutes): a run stack's kubeconfig comes through its StackReference, still a secret in its provider."""
    from preview.model import build_plan

    plan = build_plan(committed_stack_run(stack), build_stack(stack), stack, None, REPO)
    text = json.dumps(plan.as_dict())
    assert plan.exports.get("kubeconfig", "[secret]") == "[secret]"
    provider = next(r for r in plan.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"
    assert "certificate-authority-data" not in text and "clusterCaCertificate" not in text


def test_graph_picture_is_written(cli_plans):
    proc, out = cli_plans("prod")
    if shutil.which("dot"):
        assert "<svg" in (out / "graph.svg").read_text()
    else:
        assert (out / "graph.dot").read_text().startswith("digraph")


def test_out_files_round_trip_through_yaml_and_revalidate(cli_plans):
    proc, out = cli_plans("prod")
    document = json.loads(proc.stdout)
    loaded = load_kubernetes_files(out / "files")
    assert loaded == document["manifests"]
    config = build(load_stack_config("prod", REPO))
    run = committed_stack_run("prod")
    report = validate_objects(loaded, default_schemas_dir(), cluster_version(run, config), tpu_pools(run.resources))
    assert report.errors == []
    gcp_files = sorted((out / "files" / "gcp").glob("*.json"))
    gcp_resources = [r for r in document["resources"] if r["type"].startswith("gcp:") and r["custom"]]
    assert len(gcp_files) == len(gcp_resources)
    assert {json.loads(p.read_text())["type"] for p in gcp_files} == {r["type"] for r in gcp_resources}


def test_files_are_rewritten_not_accumulated(tmp_path):
    config = build(load_stack_config("prod", REPO))
    plan = build_plan(committed_stack_run("prod"), config, "prod", default_schemas_dir())
    stale = tmp_path / "kubernetes" / "999-old.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("kind: Old\n")
    write_plan_files(plan, tmp_path)
    assert not stale.exists()


@pytest.mark.parametrize("args, expected", [
    (["--stack", "prod", "--set", "slices=0"], "tpu-multislice:slices=0"),
    (["--stack", "prod", "--set", "slicez=3"], "did you mean 'slices'"),
    (["--stack", "prod", "--set", "dcnSubnets[0]=10.0.0.0/16"], "overlaps"),
    (["--stack", "prod", "--set", "slices"], "expected KEY=VALUE"),
    (["--stack", "nosuchstack"], "no stack 'nosuchstack'"),
])
def test_bad_config_exits_2_with_the_message_and_no_traceback(args, expected):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("args, key, value, allowed", [
    # `allowed`: always a list of strings or null (preview/errors_document.py ERRORS_SCHEMA).
    (["--stack", "prod", "--set", "slices=0"], "slices", 0, ["at least 1"]),
    (["--stack", "prod", "--set", "slicez=3"], "slicez", "3", ["a config key, e.g. slices"]),
    (["--stack", "prod", "--set", "capacity=cheap"], "capacity", "cheap",
     ["on-demand", "spot", "reservation", "flex-start"]),
    (["--stack", "dev", "--set", "perDeviceBatchSize=40"], "perDeviceBatchSize", "40",
     ["tpu-multislice:perDeviceBatchSize=21"]),
    # A rule between keys that wrote its line whole: the key it names first, with the value the user set.
    (["--stack", "prod", "--set", "dcnSubnets[0]=10.0.0.0/16"], "dcnSubnets", ["10.0.0.0/16", "10.60.0.0/16"],
     None),
    (["--stack", "prod", "--set", "slices"], "--set", "slices", None),      # the one --set refused
    (["--stack", "nosuchstack"], "--stack", "nosuchstack", None),
])
def test_a_json_refusal_prints_an_errors_document_on_stdout(args, key, value, allowed):
    """--json is for programs on a refusal too: the rows of the refusal on stdout, exit 2, the prose on stderr."""
    proc = run_cli(*args, "--json")
    assert proc.returncode == 2
    rows = json.loads(proc.stdout)["errors"]
    assert [set(row) for row in rows] == [{"key", "value", "message", "allowed"}] * len(rows)
    row = next(row for row in rows if row["key"] == key)
    assert (row["value"], row["allowed"]) == (value, allowed)
    # stderr lays the same words out within 100 columns (core/cli_errors.fit_columns).
    assert "".join(row["message"].split("\n")[0].split()) in "".join(proc.stderr.split())


def test_json_summary_leaves_out_the_objects_and_the_planner_gives_numbers():
    proc = run_cli("--stack", "prod", "--json=summary")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["manifests"] is None and all("inputs" not in r for r in document["resources"])
    assert len(proc.stdout) < 150_000
    chosen = build(load_stack_config("prod", REPO)).workload.plan
    planner = document["planner"]
    assert planner["notes"] == list(chosen.notes)
    assert (planner["estimate_bytes"], planner["limit_bytes"], planner["verdict"]) == (
        chosen.memory.total, chosen.memory.hbm, chosen.memory.verdict)
    from core.planner import batch_bounds
    assert (planner["largest_batch_fits_outright"], planner["largest_batch"]) == batch_bounds(chosen)
    assert planner["per_slice_count"] == [{"slices": chosen.slices, "global_batch_size": chosen.global_batch_size,
                                           "estimate_bytes": chosen.memory.total, "verdict": chosen.memory.verdict}]


def test_an_elastic_runs_planner_fields_cover_every_slice_count():
    from core.planner import PlanRequest, plan
    from preview.model import planner_fields
    chosen = plan(PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, min_slices=1))
    rows = planner_fields(chosen)["per_slice_count"]
    assert [(r["slices"], r["global_batch_size"]) for r in rows] == [(1, 32), (2, 64)]


def _keys_documented(keys: set[str]) -> set[str]:
    page = (REPO / "docs" / "offline-plan.md").read_text()
    return {key for key in keys if f"`{key}`" not in page}


def test_every_json_key_is_documented(cli_plans):
    """docs/offline-plan.md names every key of the document, of its validation and planner sections, and of an
    errors row."""
    document = json.loads(cli_plans("prod")[0].stdout)
    keys = set(document) | set(document["validation"]) | set(document["planner"]) | {"compile"}
    keys |= set(document["planner"]["per_slice_count"][0]) | set(document["resources"][0])
    keys |= {"errors", "key", "value", "message", "allowed"}
    assert _keys_documented(keys) == set()


BROKEN_PROGRAM = '''
import pulumi
import pulumi_kubernetes as k8s

ns = k8s.core.v1.Namespace("ns", metadata={"name": "train"})
pod = {"spec": {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                 "cloud.google.com/gke-tpu-topology": "4x4"},
                "containers": [{"name": "w", "image": "ray", "resources": {"limits": {"google.com/tpu": 4}}}]}}
k8s.apiextensions.CustomResource(
    "cluster", api_version="ray.io/v1", kind="RayCluster", metadata={"name": "train", "namespace": "train"},
    spec={"headGroupSpec": {"rayStartParams": {},
                            "template": {"spec": {"containers": [{"name": "h", "image": "ray"}]}}},
          "workerGroupSpecs": [{"groupName": "tpu", "replicas": 1, "numOfHosts": 3, "rayStartParams": {},
                                "template": pod, "numOfHost": 4}]})
pulumi.export("slices", 1)
'''


def test_invalid_objects_exit_1_listing_each_error_with_its_path(tmp_path):
    # A stand-in program in a scratch project: the real config, a program registering a broken RayCluster.
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    (tmp_path / "__main__.py").write_text(BROKEN_PROGRAM)
    # The scratch root has no ../shared beside it: name the CRD directory explicitly.
    proc = run_cli("--stack", "dev", "--schemas", str(default_schemas_dir()), root=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "ERROR RayCluster/train/train spec.workerGroupSpecs[0].numOfHosts: numOfHosts=3" in proc.stdout
    assert "ERROR RayCluster/train/train spec.workerGroupSpecs[0].numOfHost: unknown field" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_text_report_has_every_section():
    config = build(load_stack_config("prod", REPO))
    plan = build_plan(committed_stack_run("prod"), config, "prod", default_schemas_dir())
    text = io.StringIO()
    render_text(plan, default_schemas_dir(), text)
    report = text.getvalue()
    for expected in ("slice-0  [gcp:container/nodePool:NodePool]  ct6e-standard-4t, topology 4x4, autoscaling 0-4 nodes per zone",
                     "hosts 8, chips 32, HBM 1024 GiB", "estimated TPU price: on-demand",
                     "kubeconfig = [secret]", "0 error(s)", "Critical path, deploy", "Critical path, destroy"):
        assert expected in report


def test_graph_falls_back_to_dot_without_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_module.shutil, "which", lambda name: None)
    written, what = graph_module.write_graph("digraph x {}\n", tmp_path / "g.svg")
    assert written == tmp_path / "g.dot" and written.read_text() == "digraph x {}\n"
    assert "not found" in what

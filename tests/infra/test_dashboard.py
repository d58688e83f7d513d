"""infra.dashboard: the dashboard JSON is what Cloud Monitoring API v1 accepts, and charts this stack only.

The `Dashboard` schema comes from the discovery document google-api-python-client ships
(googleapiclient/discovery_cache/documents/monitoring.v1.json), made strict by tests/infra/discovery_schema.py
so that a misspelt field or enum value fails here rather than at `pulumi up`.
"""
from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest

from infra.dashboard import (ACCELERATOR_FIELD, COLUMNS, METRICS, NODE_POOL_FIELD, DashboardInputs, chart_filters,
                             chart_summaries, dashboard_console_url, dashboard_spec)
from tests.infra.discovery_schema import load_discovery, to_json_schema

ONE_SLICE = DashboardInputs(project="my-tpu-project", location="us-east5-b", cluster_name="tpu-dev",
                            namespace="training", slices=1, node_pools=("slice-0",),
                            tpu_accelerator="tpu-v6e-slice", chips_per_slice=16, job_name="llama2-7b-4x4")
FOUR_SLICES = DashboardInputs(project="prod-project-123", location="us-central1", cluster_name="tpu-prod",
                              namespace="maxtext", slices=4, node_pools=("slice-0", "slice-1", "slice-2", "slice-3"),
                              tpu_accelerator="tpu-v5p-slice", chips_per_slice=64, job_name="jobset-llama3-8b")
# Autopilot: GKE names the TPU pools, so the stack passes none.
AUTOPILOT = DashboardInputs(project="my-tpu-project", location="us-east5", cluster_name="tpu-auto",
                            namespace="training", slices=2, node_pools=(), tpu_accelerator="tpu-v6e-slice",
                            chips_per_slice=16, job_name="maxtext-llama3-8b")
INPUTS = [pytest.param(ONE_SLICE, id="one-slice"), pytest.param(FOUR_SLICES, id="four-slices"),
          pytest.param(AUTOPILOT, id="autopilot")]


@pytest.fixture(scope="module")
def discovery() -> dict:
    return load_discovery("googleapiclient", "monitoring.v1.json")


@pytest.fixture(scope="module")
def validator(discovery) -> jsonschema.Draft202012Validator:
    schema = to_json_schema(discovery, "Dashboard")
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, spec) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(spec)]


def widgets(spec):
    return [tile["widget"] for tile in spec["mosaicLayout"]["tiles"]]


@pytest.mark.parametrize("inputs", INPUTS)
def test_spec_is_a_valid_dashboard(validator, inputs):
    assert errors(validator, dashboard_spec(inputs)) == []


# --- the strict schema catches what the API would refuse -------------------------------------------------

def test_misspelled_field_fails(validator):
    spec = dashboard_spec(ONE_SLICE)
    widget = next(w for w in widgets(spec) if "xyChart" in w)
    widget["xyChartt"] = widget.pop("xyChart")
    found = errors(validator, spec)
    assert any("xyChartt" in e for e in found), found


def test_wrong_enum_fails(validator):
    spec = dashboard_spec(ONE_SLICE)
    query = next(w for w in widgets(spec) if "xyChart" in w)["xyChart"]["dataSets"][0]["timeSeriesQuery"]
    query["timeSeriesFilter"]["aggregation"]["perSeriesAligner"] = "ALIGN_MEANN"
    found = errors(validator, spec)
    assert any("ALIGN_MEANN" in e and "perSeriesAligner" in e for e in found), found


def test_misspelled_nested_field_and_bad_duration_fail(validator):
    spec = dashboard_spec(ONE_SLICE)
    aggregation = next(w for w in widgets(spec) if "xyChart" in w)["xyChart"]["dataSets"][0][
        "timeSeriesQuery"]["timeSeriesFilter"]["aggregation"]
    aggregation["groupByField"] = aggregation.pop("groupByFields")
    aggregation["alignmentPeriod"] = "60"  # a Duration needs its unit: "60s"
    found = errors(validator, spec)
    assert any("groupByField" in e for e in found) and any("alignmentPeriod" in e for e in found), found


def test_deprecated_and_output_only_fields_are_refused(discovery):
    schema = to_json_schema(discovery, "Dashboard")
    assert "statisticalTimeSeriesFilter" not in schema["$defs"]["TimeSeriesFilter"]["properties"]
    assert "createTime" not in schema["$defs"]["MetricsScope"]["properties"]


def _descriptions_saying(discovery, pattern: str) -> list[tuple[str, str, re.Match]]:
    """(schema, field, match) for every field description of the document matching `pattern`."""
    found = []
    for name, schema in discovery["schemas"].items():
        for field, prop in schema.get("properties", {}).items():
            match = re.search(pattern, prop.get("description", ""))
            if match:
                found.append((name, field, match))
    return found


def walk(value, path=()):
    """Every (path, dict) inside a JSON value."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, index))


@pytest.mark.parametrize("inputs", INPUTS)
def test_thresholds_carry_only_the_fields_their_widget_allows(discovery, inputs):
    # The discovery document says it in prose, e.g. Threshold.color "Color is not allowed in a XyChart." and
    # Threshold.targetAxis "Target axis is not allowed in a Scorecard."; the API refuses such a dashboard.
    rules = _descriptions_saying(discovery, r"is not allowed in a (XyChart|Scorecard)")
    assert {(schema, field, m.group(1)) for schema, field, m in rules} >= {
        ("Threshold", "color", "XyChart"), ("Threshold", "direction", "XyChart"),
        ("Threshold", "targetAxis", "Scorecard")}
    widget_key = {"XyChart": "xyChart", "Scorecard": "scorecard"}
    checked = 0
    for widget in widgets(dashboard_spec(inputs)):
        for schema, field, match in rules:
            container = widget.get(widget_key[match.group(1)])
            if schema == "Threshold" and container:
                for threshold in container.get("thresholds", []):
                    assert field not in threshold, (widget["id"], field)
                    checked += 1
    assert checked, "no threshold was checked"


@pytest.mark.parametrize("inputs", INPUTS)
def test_required_fields_are_set(discovery, inputs):
    # Fields documented "Required." (Dashboard.displayName, TimeSeriesFilter.filter, ...): the strict schema
    # cannot say so because discovery documents carry no `required` list.
    required = {(schema, field) for schema, field, _ in _descriptions_saying(discovery, r"^Required\.")}
    assert ("Dashboard", "displayName") in required and ("XyChart", "dataSets") in required
    spec = dashboard_spec(inputs)
    assert spec["displayName"]
    for path, node in walk(spec):
        if path and path[-1] in ("timeSeriesFilter", "numerator", "denominator"):
            assert node.get("filter"), path
        if path and path[-1] == "xyChart":
            assert node.get("dataSets"), path
        in_data_sets = len(path) >= 2 and path[-2] == "dataSets"
        if path and (path[-1] == "scorecard" or in_data_sets):
            assert node.get("timeSeriesQuery"), path
        if path and path[-1] == "sparkChartView":
            assert node.get("sparkChartType"), path


def _seconds(duration: str) -> float:
    return float(duration.rstrip("s"))


@pytest.mark.parametrize("inputs", INPUTS)
def test_alignment_periods_meet_the_api_minimum(discovery, inputs):
    # Aggregation.alignmentPeriod: "The value must be at least 60 seconds."
    description = discovery["schemas"]["Aggregation"]["properties"]["alignmentPeriod"]["description"]
    minimum = int(re.search(r"must be at least (\d+) seconds", description).group(1))
    periods = [node["alignmentPeriod"] for _, node in walk(dashboard_spec(inputs)) if "alignmentPeriod" in node]
    assert periods and all(_seconds(p) >= minimum for p in periods), periods


@pytest.mark.parametrize("inputs", INPUTS)
def test_no_field_the_api_would_drop_as_a_default(inputs):
    """The API returns a dashboard without proto3 default values (0, false, ""), and the provider diffs the
    stored JSON against ours ignoring only fields the API added: a 0 we send (e.g. a tile at xPos 0) would
    show as a change on every `pulumi preview` (hashicorp/terraform-provider-google#7242, #16173)."""
    for path, node in walk(dashboard_spec(inputs)):
        if path and path[-1] == "labels":
            continue  # a map: its values are data, not defaults
        for key, value in node.items():
            assert value not in (0, False, "", [], {}), (path, key, value)


@pytest.mark.parametrize("inputs", INPUTS)
def test_each_widget_holds_exactly_one_content(discovery, inputs):
    # Widget.content is a oneof in the API; discovery cannot say so, so check it here.
    content = set(discovery["schemas"]["Widget"]["properties"]) - {"title", "id", "visibilityCondition"}
    for widget in widgets(dashboard_spec(inputs)):
        assert len(content & set(widget)) == 1, widget.get("id")


# --- layout -------------------------------------------------------------------------------------------

def max_columns(discovery) -> int:
    description = discovery["schemas"]["MosaicLayout"]["properties"]["columns"]["description"]
    return int(re.search(r"between 1 and (\d+)", description).group(1))


@pytest.mark.parametrize("inputs", INPUTS)
def test_tiles_fit_the_grid_and_do_not_overlap(discovery, inputs):
    layout = dashboard_spec(inputs)["mosaicLayout"]
    assert layout["columns"] == COLUMNS <= max_columns(discovery) == 48
    # An absent position is 0 (proto3 default; test_no_field_the_api_would_drop_as_a_default).
    tiles = [{"xPos": 0, "yPos": 0, **tile} for tile in layout["tiles"]]
    for tile in tiles:
        assert tile["xPos"] >= 0 and tile["yPos"] >= 0 and tile["width"] >= 1 and tile["height"] >= 1
        assert tile["xPos"] + tile["width"] <= layout["columns"], tile["widget"]["id"]
    for a, b in itertools.combinations(tiles, 2):
        apart = (a["xPos"] + a["width"] <= b["xPos"] or b["xPos"] + b["width"] <= a["xPos"]
                 or a["yPos"] + a["height"] <= b["yPos"] or b["yPos"] + b["height"] <= a["yPos"])
        assert apart, (a["widget"]["id"], b["widget"]["id"])


@pytest.mark.parametrize("inputs", INPUTS)
def test_widget_ids_are_unique_and_well_formed(inputs):
    ids = [w["id"] for w in widgets(dashboard_spec(inputs))]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)  # Widget.id's documented alphabet


# --- what is charted ----------------------------------------------------------------------------------

METRIC_TYPE = re.compile(r'metric\.type="([^"]+)"')
RESOURCE_TYPE = re.compile(r'resource\.type="([^"]+)"')


@pytest.mark.parametrize("inputs", INPUTS)
def test_every_metric_comes_from_the_cited_table(inputs):
    by_type = {source.type: source for source in METRICS.values()}
    used = set()
    for title, filters in chart_filters(dashboard_spec(inputs)):
        for f in filters:
            (metric,) = METRIC_TYPE.findall(f)
            assert metric in by_type, (title, metric)
            assert RESOURCE_TYPE.findall(f) == [by_type[metric].resource], (title, f)
            used.add(metric)
    assert used == set(by_type), "table entries no chart uses"
    assert all(s.doc.startswith("https://") for s in METRICS.values())


@pytest.mark.parametrize("inputs", INPUTS)
def test_filters_name_this_stack(inputs):
    pools = "one_of(" + ",".join(f'"{p}"' for p in inputs.node_pools) + ")"
    for title, filters in chart_filters(dashboard_spec(inputs)):
        for f in filters:
            resource = RESOURCE_TYPE.findall(f)[0]
            if resource.startswith("k8s_"):
                assert f'resource.labels.project_id="{inputs.project}"' in f, title
                assert f'resource.labels.cluster_name="{inputs.cluster_name}"' in f, title
            if resource == "k8s_container":
                assert f'resource.labels.namespace_name="{inputs.namespace}"' in f, title
            if resource == "k8s_node" and inputs.node_pools:
                assert f"{NODE_POOL_FIELD}={pools}" in f, title
            if resource == "k8s_node" and not inputs.node_pools:
                assert f'{ACCELERATOR_FIELD}="{inputs.tpu_accelerator}"' in f, title
            if resource == "k8s_node_pool" and inputs.node_pools:
                assert f"resource.labels.node_pool_name={pools}" in f, title
            if resource == "compute.googleapis.com/Workload":
                assert f'resource.labels.workload_id="{inputs.job_name}"' in f, title


@pytest.mark.parametrize("inputs", INPUTS)
def test_chart_titles_say_which_question_they_answer(inputs):
    titles = [title for title, _ in chart_filters(dashboard_spec(inputs))]
    assert titles and all("?" in t for t in titles)


@pytest.mark.parametrize("inputs, slices", [(FOUR_SLICES, 4), (AUTOPILOT, 2)])
def test_chip_and_slice_thresholds_follow_the_inputs(inputs, slices):
    by_id = {w["id"]: w for w in widgets(dashboard_spec(inputs))}
    assert by_id["slices-up"]["scorecard"]["gaugeView"]["upperBound"] == slices
    assert by_id["slices-up"]["scorecard"]["thresholds"][0]["value"] == slices
    assert by_id["chips-reporting"]["xyChart"]["thresholds"][0]["value"] == inputs.chips_per_slice


def test_chart_summaries_one_line_per_chart():
    spec = dashboard_spec(FOUR_SLICES)
    lines = chart_summaries(spec)
    assert len(lines) == len(chart_filters(spec))
    assert any("goodput / total elapsed time" in line and "workload/goodput_time" in line
               and "workload/total_elapsed_time" in line for line in lines)
    assert all(" <- " in line and "." in line.split(" <- ")[1] for line in lines)


def test_console_url():
    expected = "https://console.cloud.google.com/monitoring/dashboards/builder/abc-123?project=my-tpu-project"
    assert dashboard_console_url("my-tpu-project", "abc-123") == expected
    assert dashboard_console_url("my-tpu-project", "projects/1234/dashboards/abc-123") == expected


@pytest.mark.parametrize("change", [
    {"namespace": 'ns" OR metric.type="x'}, {"node_pools": ["slice-0"]}, {"node_pools": ("slice-0", "slice-1")},
    {"node_pools": ("slice-0", "slice-0"), "slices": 2}, {"chips_per_slice": 0}, {"chips_per_slice": True},
    {"slices": 0}, {"job_name": ""}, {"cluster_name": "a b"}, {"tpu_accelerator": 'tpu" OR x'},
])
def test_inputs_that_would_break_a_filter_are_refused(change):
    fields = {**ONE_SLICE.__dict__, **change}
    with pytest.raises(ValueError):
        DashboardInputs(**fields)


def test_spec_is_plain_json_data():
    # What gcp.monitoring.Dashboard(dashboard_json=...) gets is json.dumps of it: it must round-trip, and
    # the builder must be deterministic so that `pulumi preview` shows no diff between runs.
    spec = dashboard_spec(ONE_SLICE)
    assert json.loads(json.dumps(spec)) == spec == dashboard_spec(ONE_SLICE)

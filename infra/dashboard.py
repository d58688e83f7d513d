"""A Cloud Monitoring dashboard for one stack, as the Monitoring API v1 `Dashboard` JSON (pure, no Pulumi).

What it answers, per slice (one multi-host TPU node pool each): are all slices up, are all of their hosts
and chips reporting, how busy are the TensorCores, how full is HBM; then whether the training pods restart
and how much of the wall-clock time MaxText's goodput library counted as productive.

The returned dict is the request body of `projects.dashboards.create` (camelCase field names,
https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards), so the same value can be
handed to `gcp.monitoring.Dashboard(dashboard_json=json.dumps(...))`, to `gcloud monitoring dashboards
create --config-from-file`, or printed by the offline plan. tests/infra/test_dashboard.py validates it
against the `Dashboard` schema of the discovery document that google-api-python-client ships.

Only system metrics GKE already writes and the metrics ml-goodput-measurement writes are charted: nothing
here needs an agent. What each source needs switched on is in the METRICS table comments.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

# --- Sources -------------------------------------------------------------------------------------------
# GKE system metrics reference (metric type, kind, monitored resource, labels):
GKE_METRICS_DOC = "https://cloud.google.com/monitoring/api/metrics_kubernetes"
# ml-goodput-measurement: the Cloud Monitoring metrics it writes and what they mean.
GOODPUT_DOC = "https://cloud.google.com/tpu/docs/goodput"
# Where the goodput metric types, their labels and the compute.googleapis.com/Workload resource labels
# (location, workload_id, replica_id) are written; read in ml-goodput-measurement 0.2.3 (the pinned one).
GOODPUT_SOURCE = ("https://github.com/AI-Hypercomputer/ml-goodput-measurement/blob/main/"
                  "ml_goodput_measurement/src/monitoring.py")


@dataclasses.dataclass(frozen=True)
class MetricSource:
    """One metric this dashboard charts: its type, the monitored resource it is written against, its
    kind/value type (which decides the legal aligners) and the page that documents it."""
    type: str
    resource: str
    kind: str
    doc: str


# Every metric type the dashboard uses, and nothing else (the test checks each filter against this table).
METRICS: dict[str, MetricSource] = {
    # TPU runtime metrics per chip of each TPU VM (metric labels make, model, accelerator_id[, tpu_topology]).
    # Node-level rather than container-level: a chip with no pod on it still reports, and the node carries
    # the node-pool label that tells which slice it belongs to. GKE_METRICS_DOC; duty_cycle/memory_* need
    # the TPU container to expose containerPort 8431, tensorcore/bandwidth need GKE >= 1.28.1-gke.1066000
    # (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus, "Observability and metrics").
    "duty_cycle": MetricSource("kubernetes.io/node/accelerator/duty_cycle", "k8s_node",
                               "GAUGE DOUBLE %", GKE_METRICS_DOC),
    "tensorcore": MetricSource("kubernetes.io/node/accelerator/tensorcore_utilization", "k8s_node",
                               "GAUGE DOUBLE %", GKE_METRICS_DOC),
    "hbm_used": MetricSource("kubernetes.io/node/accelerator/memory_used", "k8s_node",
                             "GAUGE INT64 bytes", GKE_METRICS_DOC),
    "hbm_total": MetricSource("kubernetes.io/node/accelerator/memory_total", "k8s_node",
                              "GAUGE INT64 bytes", GKE_METRICS_DOC),
    "hbm_bandwidth": MetricSource("kubernetes.io/node/accelerator/memory_bandwidth_utilization", "k8s_node",
                                  "GAUGE DOUBLE %", GKE_METRICS_DOC),
    # Node conditions (metric labels condition, status); GKE >= 1.32.1-gke.1357001. GKE_METRICS_DOC.
    "node_condition": MetricSource("kubernetes.io/node/status_condition", "k8s_node",
                                   "GAUGE BOOL", GKE_METRICS_DOC),
    # True while every node of a multi-host TPU node pool is available (metric label
    # unavailability_reason); resource labels project_id, location, cluster_name, node_pool_name.
    # GKE_METRICS_DOC.
    "pool_available": MetricSource("kubernetes.io/node_pool/multi_host/available", "k8s_node_pool",
                                   "GAUGE BOOL", GKE_METRICS_DOC),
    # Container restarts; resource labels include namespace_name, pod_name, container_name. GKE_METRICS_DOC.
    "restarts": MetricSource("kubernetes.io/container/restart_count", "k8s_container",
                             "CUMULATIVE INT64", GKE_METRICS_DOC),
    # ml-goodput-measurement (GOODPUT_DOC, GOODPUT_SOURCE). Written with an end time only, so GAUGE; the
    # values themselves are running totals of the job. workload_id is MaxText's goodput job name.
    "goodput_time": MetricSource("compute.googleapis.com/workload/goodput_time", "compute.googleapis.com/Workload",
                                 "GAUGE DOUBLE s", GOODPUT_DOC),
    "badput_time": MetricSource("compute.googleapis.com/workload/badput_time", "compute.googleapis.com/Workload",
                                "GAUGE DOUBLE s", GOODPUT_DOC),
    "elapsed_time": MetricSource("compute.googleapis.com/workload/total_elapsed_time",
                                 "compute.googleapis.com/Workload", "GAUGE DOUBLE s", GOODPUT_DOC),
    "max_productive_steps": MetricSource("compute.googleapis.com/workload/max_productive_steps",
                                         "compute.googleapis.com/Workload", "GAUGE INT64", GOODPUT_DOC),
    "step_time_deviation": MetricSource("compute.googleapis.com/workload/step_time_deviation",
                                        "compute.googleapis.com/Workload", "GAUGE DOUBLE", GOODPUT_DOC),
    "disruptions": MetricSource("compute.googleapis.com/workload/disruptions", "compute.googleapis.com/Workload",
                                "GAUGE INT64", GOODPUT_DOC),
}

# Kubernetes node labels become metadata user labels on k8s_node time series
# (https://github.com/GoogleCloudPlatform/k8s-stackdriver/issues/978); GKE puts the node pool's name in
# the node label cloud.google.com/gke-nodepool. That is how node metrics are grouped per slice. Not in a
# Google reference page: public alert policies and scripts filter and group k8s_node series this way.
NODE_POOL_FIELD = 'metadata.user_labels."cloud.google.com/gke-nodepool"'
# On Autopilot GKE creates the TPU node pools itself, under names the stack cannot know: node series are
# then picked by the TPU accelerator node label GKE sets on every TPU node (core.tpu_catalog's
# accelerator_label values, e.g. tpu-v6e-slice).
ACCELERATOR_FIELD = 'metadata.user_labels."cloud.google.com/gke-tpu-accelerator"'

# ml-goodput-measurement labels its running-total series window_type="cumulative" (lower case:
# goodput_utils.MonitoringWindowType.CUMULATIVE in 0.2.3); the clause keeps interval series out of sums.
CUMULATIVE_WINDOW = 'metric.labels.window_type="cumulative"'

# The mosaic grid is at most 48 columns wide (MosaicLayout.columns in the discovery document).
COLUMNS = 48
ALIGNMENT = "60s"  # GKE samples these metrics every 60 s: a shorter period only adds empty buckets.

# Console URL of a custom dashboard. Google's docs give no URL format; this is the form that public
# Terraform outputs, READMEs and runbooks link to ("https://console.cloud.google.com/monitoring/
# dashboards/builder/{dashboard_id}", found by searching public repositories). Some older links use
# /monitoring/dashboards/custom/<id> instead; not verified which one the console prefers today.
CONSOLE_DASHBOARD_URL = "https://console.cloud.google.com/monitoring/dashboards/builder/{id}?project={project}"

# Filter values are pasted between double quotes; refuse anything that could end the quoted string.
_SAFE_VALUE = re.compile(r'^[^"\\\s]+$')


@dataclasses.dataclass(frozen=True)
class DashboardInputs:
    """What the dashboard is about: one stack's cluster, its TPU slice node pools and its MaxText run.

    node_pools are the slice pools' physical names; empty when GKE creates them (Autopilot), in which case
    TPU nodes are picked by tpu_accelerator (the gke-tpu-accelerator node label) and slice-pool
    availability is read for every multi-host pool of the cluster (only multi-host TPU pools report it).

    job_name is MaxText's goodput job name: `goodput_job_name` if the argv sets it, otherwise `run_name`
    (maxtext/common/goodput.py get_goodput_job_name); ml-goodput-measurement writes it as the Workload
    resource's workload_id label.
    """
    project: str
    location: str
    cluster_name: str
    namespace: str
    slices: int
    node_pools: tuple[str, ...]
    tpu_accelerator: str
    chips_per_slice: int
    job_name: str

    def __post_init__(self):
        for field in ("slices", "chips_per_slice"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, not {value!r}")
        if not isinstance(self.node_pools, tuple):
            raise ValueError("node_pools must be a tuple of TPU slice node-pool names (empty on Autopilot)")
        if self.node_pools and len(self.node_pools) != self.slices:
            raise ValueError(f"{len(self.node_pools)} node pools for {self.slices} slices: one pool per slice")
        for field in ("project", "location", "cluster_name", "namespace", "tpu_accelerator", "job_name"):
            _check_value(field, getattr(self, field))
        for pool in self.node_pools:
            _check_value("node_pools", pool)
        if len(set(self.node_pools)) != len(self.node_pools):
            raise ValueError(f"node_pools has duplicates: {self.node_pools}")


def _check_value(field: str, value: Any) -> None:
    if not isinstance(value, str) or not _SAFE_VALUE.match(value):
        raise ValueError(f"{field}={value!r}: expected a non-empty name without quotes, backslashes or spaces")


# --- Filters -------------------------------------------------------------------------------------------
# Monitoring filter syntax: https://cloud.google.com/monitoring/api/v3/filters

def _quoted(value: str) -> str:
    return f'"{value}"'


def _filter(metric: str, *clauses: str) -> str:
    source = METRICS[metric]
    return " AND ".join((f"metric.type={_quoted(source.type)}", f"resource.type={_quoted(source.resource)}",
                         *clauses))


def _cluster_clauses(inputs: DashboardInputs) -> tuple[str, ...]:
    # project_id as well as cluster_name: a metrics scope can hold several projects with same-named
    # clusters. location is left out on purpose: cluster name + project already identify the stack.
    return (f"resource.labels.project_id={_quoted(inputs.project)}",
            f"resource.labels.cluster_name={_quoted(inputs.cluster_name)}")


def _slice_pools_clause(inputs: DashboardInputs, field: str) -> str:
    # Only this stack's slice pools: the system/CPU pool has no TPUs and would only add empty series.
    return f"{field}=one_of({','.join(_quoted(p) for p in inputs.node_pools)})"


def _tpu_nodes_clause(inputs: DashboardInputs) -> str:
    if inputs.node_pools:
        return _slice_pools_clause(inputs, NODE_POOL_FIELD)
    return f"{ACCELERATOR_FIELD}={_quoted(inputs.tpu_accelerator)}"


def _node_filter(inputs: DashboardInputs, metric: str, *extra: str) -> str:
    return _filter(metric, *_cluster_clauses(inputs), _tpu_nodes_clause(inputs), *extra)


def _pool_filter(inputs: DashboardInputs, metric: str) -> str:
    if not inputs.node_pools:
        # k8s_node_pool has no accelerator label; multi_host/available exists only for multi-host TPU pools.
        return _filter(metric, *_cluster_clauses(inputs))
    return _filter(metric, *_cluster_clauses(inputs),
                   _slice_pools_clause(inputs, "resource.labels.node_pool_name"))


def _namespace_filter(inputs: DashboardInputs, metric: str) -> str:
    return _filter(metric, *_cluster_clauses(inputs), f"resource.labels.namespace_name={_quoted(inputs.namespace)}")


def _workload_filter(inputs: DashboardInputs, metric: str, *extra: str) -> str:
    # The Workload resource has no cluster or namespace label, and its location is the zone of the
    # host that uploads (goodput_utils.get_node_zone), not the cluster's location: the job's
    # workload_id is what ties these series to this stack.
    return _filter(metric, f"resource.labels.workload_id={_quoted(inputs.job_name)}", *extra)


# --- Widgets -------------------------------------------------------------------------------------------

def _aggregation(aligner: str, reducer: str | None = None, group_by: tuple[str, ...] = ()) -> dict[str, Any]:
    aggregation: dict[str, Any] = {"alignmentPeriod": ALIGNMENT, "perSeriesAligner": aligner}
    if reducer:
        aggregation["crossSeriesReducer"] = reducer
        if group_by:
            aggregation["groupByFields"] = list(group_by)
    return aggregation


def _series(filter_: str, aggregation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"timeSeriesFilter": {"filter": filter_, "aggregation": aggregation, **extra}}


def _data_set(query: dict[str, Any], plot: str = "LINE", legend: str | None = None) -> dict[str, Any]:
    data_set: dict[str, Any] = {"timeSeriesQuery": query, "plotType": plot, "targetAxis": "Y1",
                                "minAlignmentPeriod": ALIGNMENT}
    if legend:
        data_set["legendTemplate"] = legend
    return data_set


def _xy_chart(widget_id: str, title: str, data_sets: list[dict[str, Any]], y_label: str,
              thresholds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    chart: dict[str, Any] = {"dataSets": data_sets, "chartOptions": {"mode": "COLOR"},
                             "yAxis": {"label": y_label, "scale": "LINEAR"}}
    if thresholds:
        chart["thresholds"] = thresholds
    return {"id": widget_id, "title": title, "xyChart": chart}


def _scorecard(widget_id: str, title: str, query: dict[str, Any], *, gauge: tuple[float, float] | None = None,
               thresholds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    card: dict[str, Any] = {"timeSeriesQuery": query}
    if gauge:
        card["gaugeView"] = _without_zero({"lowerBound": gauge[0], "upperBound": gauge[1]})
    else:
        card["sparkChartView"] = {"sparkChartType": "SPARK_LINE", "minAlignmentPeriod": ALIGNMENT}
    if thresholds:
        card["thresholds"] = thresholds
    return {"id": widget_id, "title": title, "scorecard": card}


# Which Threshold fields each widget takes (Threshold field descriptions in the discovery document): an
# XyChart draws a line and refuses color and direction; a Scorecard colours itself and refuses targetAxis.
def _scorecard_alert_below(value: float, label: str) -> dict[str, Any]:
    return {"value": value, "direction": "BELOW", "color": "RED", "label": label}


def _chart_line(value: float, label: str) -> dict[str, Any]:
    return {"value": value, "label": label, "targetAxis": "Y1"}


def _without_zero(fields: dict[str, Any]) -> dict[str, Any]:
    """Drop fields whose value is 0: the API omits proto3 default values when it returns a dashboard, and
    the provider's diff (it only ignores fields the API adds) would then show them as removed on every
    preview (hashicorp/terraform-provider-google#7242, #16173; the tile-position case is what
    GoogleCloudPlatform/magic-modules#18515 tried to suppress)."""
    return {key: value for key, value in fields.items() if value != 0}


def _header(widget_id: str, title: str, subtitle: str) -> dict[str, Any]:
    return {"id": widget_id, "title": title, "sectionHeader": {"subtitle": subtitle, "dividerBelow": True}}


# A placed widget before layout: (widget, width in grid columns, height in grid rows).
_Placed = tuple[dict[str, Any], int, int]


def _availability(inputs: DashboardInputs) -> list[_Placed]:
    slices = inputs.slices
    by_pool_node = (NODE_POOL_FIELD,)
    return [
        (_header("availability", "Slice availability",
                 f"{slices} x {inputs.tpu_accelerator} slice(s) of {inputs.chips_per_slice} chips in "
                 f"{inputs.cluster_name} ({inputs.location})"), COLUMNS, 4),
        (_scorecard(
            "slices-up", "Are all slices up? (multi-host TPU node pools available now)",
            _series(_pool_filter(inputs, "pool_available"),
                    _aggregation("ALIGN_NEXT_OLDER", "REDUCE_COUNT_TRUE")),
            gauge=(0, slices), thresholds=[_scorecard_alert_below(slices, "a slice is down")]), 12, 16),
        (_xy_chart(
            "pool-availability", "Which slice went down, and when? (node pool availability, 1 = all hosts up)",
            [_data_set(_series(_pool_filter(inputs, "pool_available"),
                               _aggregation("ALIGN_FRACTION_TRUE", "REDUCE_MIN",
                                            ("resource.label.node_pool_name",))))],
            "fraction of the minute available"), 36, 16),
        (_xy_chart(
            "ready-nodes", "Did a slice lose hosts? (Ready nodes per slice node pool)",
            [_data_set(_series(_node_filter(inputs, "node_condition", 'metric.labels.condition="Ready"',
                                            'metric.labels.status="True"'),
                               _aggregation("ALIGN_NEXT_OLDER", "REDUCE_COUNT_TRUE", by_pool_node)))],
            "Ready nodes"), 24, 16),
        (_xy_chart(
            "chips-reporting", "Are all TPU chips of every slice reporting? (chips with TensorCore data)",
            [_data_set(_series(_node_filter(inputs, "tensorcore"),
                               _aggregation("ALIGN_MEAN", "REDUCE_COUNT", by_pool_node)))],
            "chips", thresholds=[_chart_line(inputs.chips_per_slice, f"{inputs.chips_per_slice} chips per slice")]),
         24, 16),
    ]


def _utilisation(inputs: DashboardInputs) -> list[_Placed]:
    by_pool = (NODE_POOL_FIELD,)
    return [
        (_header("utilisation", "TPU utilisation per slice",
                 "GKE TPU metrics of every chip, grouped by the slice's node pool"), COLUMNS, 4),
        (_xy_chart(
            "duty-cycle", "Is every slice busy? (TPU duty cycle, mean over the slice's chips)",
            [_data_set(_series(_node_filter(inputs, "duty_cycle"),
                               _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_pool)))], "% of time active"), 24, 16),
        (_xy_chart(
            "tensorcore", "How much TensorCore capacity is used? (TensorCore utilisation, mean per slice)",
            [_data_set(_series(_node_filter(inputs, "tensorcore"),
                               _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_pool)))], "% utilised"), 24, 16),
        (_xy_chart(
            "hbm-used", "Is HBM close to full? (HBM used vs total, fullest chip per slice)",
            [_data_set(_series(_node_filter(inputs, "hbm_used"),
                               _aggregation("ALIGN_MAX", "REDUCE_MAX", by_pool))),
             _data_set(_series(_node_filter(inputs, "hbm_total"),
                               _aggregation("ALIGN_MAX", "REDUCE_MAX", by_pool)))], "bytes"), 24, 16),
        (_xy_chart(
            "hbm-bandwidth", "Is the slice memory-bound? (HBM bandwidth utilisation, mean per slice)",
            [_data_set(_series(_node_filter(inputs, "hbm_bandwidth"),
                               _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_pool)))], "% of peak bandwidth"),
         24, 16),
    ]


def _training(inputs: DashboardInputs) -> list[_Placed]:
    return [
        (_header("training", "Training job",
                 f"Pods in namespace {inputs.namespace}; goodput of MaxText run {inputs.job_name}"), COLUMNS, 4),
        (_xy_chart(
            "restarts", f"Are training pods restarting? (container restarts per pod in {inputs.namespace})",
            [_data_set(_series(_namespace_filter(inputs, "restarts"),
                               _aggregation("ALIGN_DELTA", "REDUCE_SUM", ("resource.label.pod_name",)),
                               # Only the pods that restarted most: a 64-host run would flood the legend.
                               pickTimeSeriesFilter={"rankingMethod": "METHOD_MAX", "numTimeSeries": 10,
                                                     "direction": "TOP"}),
                       plot="STACKED_BAR")], "restarts per minute"), 24, 16),
        (_xy_chart(
            "goodput", "What fraction of wall-clock time was productive? (goodput / total elapsed time)",
            [_data_set({"timeSeriesFilterRatio": {
                "numerator": {"filter": _workload_filter(inputs, "goodput_time",
                                                         'metric.labels.goodput_source="TOTAL"'),
                              "aggregation": _aggregation("ALIGN_MEAN", "REDUCE_SUM",
                                                          ("resource.label.workload_id",))},
                "denominator": {"filter": _workload_filter(inputs, "elapsed_time",
                                                           CUMULATIVE_WINDOW),
                                "aggregation": _aggregation("ALIGN_MEAN", "REDUCE_SUM",
                                                            ("resource.label.workload_id",))}}})],
            "goodput fraction"), 24, 16),
        (_xy_chart(
            "badput", "Where did the unproductive time go? (badput seconds by source)",
            [_data_set(_series(_workload_filter(inputs, "badput_time"),
                               _aggregation("ALIGN_MEAN", "REDUCE_SUM", ("metric.label.badput_source",))),
                       plot="STACKED_AREA")], "seconds"), 24, 16),
        (_xy_chart(
            "progress", "Is the job still making progress? (highest productive step)",
            [_data_set(_series(_workload_filter(inputs, "max_productive_steps"),
                               _aggregation("ALIGN_MAX", "REDUCE_MAX")))], "step"), 24, 16),
        (_xy_chart(
            "step-time", "Are steps getting slower? (step-time deviation from the job's baseline)",
            [_data_set(_series(_workload_filter(inputs, "step_time_deviation"),
                               _aggregation("ALIGN_MEAN", "REDUCE_MEAN")))], "deviation"), 36, 16),
        (_scorecard(
            "disruptions", "How often was the job disrupted? (disruptions so far)",
            _series(_workload_filter(inputs, "disruptions", CUMULATIVE_WINDOW),
                    _aggregation("ALIGN_MAX", "REDUCE_MAX"))), 12, 16),
    ]


def _layout(placed: list[_Placed], columns: int = COLUMNS) -> list[dict[str, Any]]:
    """Row-first packing: fill a row left to right, start the next one under the row's tallest tile."""
    tiles: list[dict[str, Any]] = []
    x = y = row_height = 0
    for widget, width, height in placed:
        if width > columns:
            raise ValueError(f"tile {widget.get('id')} is {width} columns wide; the grid has {columns}")
        if x + width > columns:
            x, y, row_height = 0, y + row_height, 0
        tiles.append({**_without_zero({"xPos": x, "yPos": y}), "width": width, "height": height,
                      "widget": widget})
        x += width
        row_height = max(row_height, height)
    return tiles


def dashboard_spec(inputs: DashboardInputs) -> dict[str, Any]:
    """The `Dashboard` object for `projects.dashboards.create` (Monitoring API v1, camelCase)."""
    placed = [*_availability(inputs), *_utilisation(inputs), *_training(inputs)]
    return {
        "displayName": f"TPU multislice: {inputs.cluster_name} / {inputs.job_name}",
        # No dashboardFilters: every chart already names this stack's project, cluster, namespace, node
        # pools or workload, and a label filter would blank the Workload charts, which have no such label.
        "mosaicLayout": {"columns": COLUMNS, "tiles": _layout(placed)},
        "labels": {"app": "tpu-multislice"},
    }


def dashboard_console_url(project: str, dashboard_id: str) -> str:
    """Console URL of a dashboard; accepts the bare id or the resource name projects/<p>/dashboards/<id>
    (what the API and gcp.monitoring.Dashboard's id return)."""
    _check_value("project", project)
    short_id = dashboard_id.rsplit("/", 1)[-1]
    _check_value("dashboard_id", short_id)
    return CONSOLE_DASHBOARD_URL.format(id=short_id, project=project)


def _queries(widget: dict[str, Any]) -> list[dict[str, Any]]:
    if "xyChart" in widget:
        return [d["timeSeriesQuery"] for d in widget["xyChart"]["dataSets"]]
    if "scorecard" in widget:
        return [widget["scorecard"]["timeSeriesQuery"]]
    return []


def query_filters(query: dict[str, Any]) -> list[str]:
    """Every Monitoring filter of one TimeSeriesQuery (a ratio has two)."""
    if "timeSeriesFilter" in query:
        return [query["timeSeriesFilter"]["filter"]]
    ratio = query.get("timeSeriesFilterRatio", {})
    return [ratio[part]["filter"] for part in ("numerator", "denominator") if part in ratio]


def chart_filters(spec: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(title, filters) of every chart or scorecard of a spec, in layout order."""
    charts = []
    for tile in spec["mosaicLayout"]["tiles"]:
        queries = _queries(tile["widget"])
        if queries:
            charts.append((tile["widget"]["title"], [f for q in queries for f in query_filters(q)]))
    return charts


_METRIC_TYPE = re.compile(r'metric\.type="([^"]+)"')


def chart_summaries(spec: dict[str, Any]) -> list[str]:
    """One line per chart for the offline plan: its title and the metric type(s) it reads."""
    lines = []
    for title, filters in chart_filters(spec):
        metrics = list(dict.fromkeys(m for f in filters for m in _METRIC_TYPE.findall(f)))
        lines.append(f"{title} <- {', '.join(metrics)}")
    return lines

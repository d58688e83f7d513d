"""Offline plan: everything `pulumi up` would create, with no cloud, credentials or Pulumi CLI.

    python -m preview --stack prod [--set slices=8] [--out DIR] [--graph FILE.svg] [--json[=summary]] [--schemas DIR] [--compile]

Runs the real program (__main__.py) under the project's mocks, then prints the resource tree, TPU
capacity and price, the exports, the validation of every Kubernetes object, and the critical paths of
deploy and destroy. `--compile` then compiles the MaxText training step the stack launches for its TPU target
and slice count with MaxText's ahead-of-time compiler (preview/compile/) and prints XLA's peak HBM per device.
Exit codes: 0 plan valid · 1 Kubernetes validation errors, or no pinned CRDs to check custom resources against
(without --no-crd-check) · 2 bad config or arguments · 3 the program failed under mocks · 4 (`--compile`) the step
does not fit or does not compile.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from core.cli_errors import OneLineParser, refuse
from infra.config import ConfigError, StackConfig, build
from preview.errors_document import error_rows, errors_document
from infra.config import plan_rules
from infra.config.schema import NAMESPACE
from preview.overrides import OverrideError, apply_override
from preview.graph import CriticalPath, write_graph
from preview.k8s import crd_fetch
from preview.costs import CostSummary
from preview.model import DashboardSummary, Plan, PlannedResource
from preview.stack_files import StackFileError, load_stack_config
from preview.terminal import fit, fit_line
from preview.verdict import shape_change_lines, shape_changes_document, verdict_lines

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXIT_OK, EXIT_INVALID, EXIT_CONFIG, EXIT_PROGRAM, EXIT_COMPILE = 0, 1, 2, 3, 4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m preview", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value like `pulumi config set --path` (repeatable), "
                             "e.g. --set slices=8 --set dcnSubnets[0]=10.70.0.0/16")
    parser.add_argument("--out", type=Path, help="write Kubernetes objects (YAML) and GCP resources (JSON) here")
    parser.add_argument("--graph", type=Path, help="write the dependency graph (.svg/.png/.pdf via Graphviz, or .dot)")
    parser.add_argument("--json", nargs="?", const="full", choices=("full", "summary"),
                        help="print one JSON document instead of text (a refusal: its errors); --json=summary leaves "
                             "out the Kubernetes objects and resource inputs (what --out writes)")
    parser.add_argument("--schemas", type=Path, help="directory of CRD YAML files, used as they are (default: the "
                                                     "pinned CRDs, SHA-256 checked: TPU_MULTISLICE_CRDS, "
                                                     "../shared/schemas, then the cache setup.sh fills)")
    parser.add_argument("--no-crd-check", action="store_true",
                        help="plan without checking custom resources against their CRDs (exit 0 without them)")
    parser.add_argument("--compile", action="store_true",
                        help="also compile the stack's MaxText training step for its TPU target at every slice "
                             "count it takes, as the program's config build does: its attention kernels alone "
                             "(scoped VMEM), then the step memory-only (HBM); XLA's figures per device, or why it "
                             "does not fit. Measured on 2 cores (docs/planner.md, time per verdict): the 8B prod "
                             "step 3m11s, a 70B step 4m40s. Without it the stack's compileCheck decides; "
                             "verdicts are kept in compile-verdicts.json")
    parser.add_argument("--full-compile", action="store_true",
                        help="with --compile: the full compile instead (code generation included; tens of minutes "
                             "for an 8B step here)")
    parser.add_argument("--compile-timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="give up on the compile after this long (default 3600)")
    parser.add_argument("--root", type=Path, default=PROJECT_ROOT, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------------
# Text rendering


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def render_tree(resources: list[PlannedResource], out: TextIO) -> None:
    children: dict[str | None, list[PlannedResource]] = {}
    known = {r.urn for r in resources}
    for resource in resources:
        parent = resource.parent if resource.parent in known else None
        children.setdefault(parent, []).append(resource)

    def walk(parent: str | None, prefix: str) -> None:
        items = sorted(children.get(parent, []), key=lambda r: (r.custom, r.type, r.name))
        for position, resource in enumerate(items):
            last = position == len(items) - 1
            branch, extend = ("└─ ", "   ") if last else ("├─ ", "│  ")
            kind = resource.type.split(":")[-1] if not resource.custom else resource.type
            line = f"{prefix}{branch}{resource.name}  [{kind}]"
            if resource.facts:
                line += f"  {resource.facts}"
            if resource.flags:
                line += "  (" + "; ".join(resource.flags) + ")"
            out.write(line + "\n")
            walk(resource.urn, prefix + extend)

    walk(None, "")


def render_path(path: CriticalPath, out: TextIO) -> None:
    out.write(f"Critical path, {path.direction}: {_minutes(path.longest_s)} "
              f"(sum of all steps one by one: {_minutes(path.sum_of_all_steps_s)})\n")
    for step in path.steps:
        guess = "  [guess]" if step.basis.startswith("guess") else ""
        out.write(f"  {_minutes(step.seconds):>9}  {step.name} ({step.type}){guess}\n")
    for note in path.notes:
        out.write(f"  note: {note}\n")


def render_dashboard(dashboard: DashboardSummary, out: TextIO) -> None:
    out.write(f"\nDashboard: {dashboard.display_name!r} (URL: the dashboardUrl export)\n")
    if dashboard.goodput:
        keys = " ".join(f"{key}={value}" for key, value in dashboard.goodput.items())
        out.write(f"  goodput: on for MaxText run {dashboard.workload_id} ({keys})\n")
    else:
        out.write(f"  goodput: OFF for MaxText run {dashboard.workload_id}: the goodput charts stay empty\n")
    for line in dashboard.charts:
        out.write(f"  {line}\n")


def _first_clause(text: str) -> tuple[str, str]:
    """(the text up to its first "; " outside parentheses, the rest): a backend's own "(...; ...)" stays whole."""
    depth = 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith("; ", index):
            return text[:index], text[index + 2:]
    return text, ""


def render_cost(cost: CostSummary, out: TextIO, role: str = "cluster-and-run") -> None:
    """What runs when and what it costs, in lines of at most 100 columns. role: the stack's (stackRole): a shared
    cluster bills its idle cluster only (its runs bill their slices in their own stacks), a run on one its run
    only (the cluster's system pool and fee bill in the cluster stack)."""
    def usd(value: float | None) -> str:
        return f"{value:,.2f} USD/h" if value is not None else "unknown"

    if role == "cluster":
        out.write(f"  cost while up, with or without runs: {usd(cost.idle_usd_per_hour)} (system pool "
                  f"{usd(cost.system_usd_per_hour)}, GKE fee {usd(cost.gke_fee_usd_per_hour)});\n"
                  "    each run's slices bill in its own stack\n")
    else:
        # The data cache disks (a run that mounts data) on a line of their own, within the total.
        cache = (f",\n    data cache {usd(cost.data_cache_usd_per_hour)}" if cost.data_cache_usd_per_hour != 0
                 else "")
        shared = role == "run"
        others = (f", system pool {usd(cost.system_usd_per_hour)}, GKE fee {usd(cost.gke_fee_usd_per_hour)}"
                  if not shared else "")
        out.write(f"  cost while training: {usd(cost.training_usd_per_hour)} (TPU "
                  f"{usd(cost.tpu_training_usd_per_hour)}{others}{cache})\n")
        warm = f", {cost.warm_chips} warm chips" if cost.warm_chips else ""
        idle = "; system pool, GKE fee" if not shared else ""
        out.write(f"  cost while idle: {usd(cost.idle_usd_per_hour)} (TPU {usd(cost.tpu_idle_usd_per_hour)}{warm}"
                  f"{idle})\n")
        if shared:
            out.write("    the cluster's system pool and GKE fee bill in its cluster stack, once for every run\n")
        when, after = _first_clause(cost.released)
        out.write(f"  slices released {when}\n")
        if after:
            out.write(f"    {after}\n")
    for note in cost.notes:
        out.write("\n".join(fit_line(f"    note: {note}")) + "\n")


def _render_tpu(plan: Plan, out: TextIO) -> None:
    """The slices, their price and the TPU quota they need."""
    tpu = plan.tpu
    out.write(f"  TPU: {tpu.slices} slice(s) of {tpu.generation} {tpu.topology} on {tpu.machine_type} "
              f"(from {tpu.source}); capacity {tpu.capacity}\n")
    out.write(f"  hosts {tpu.hosts}, chips {tpu.chips}, HBM {tpu.hbm_gib} GiB, "
              f"peak bf16 {tpu.peak_bf16_pflops} PFLOP/s\n")
    estimate = tpu.estimate

    def usd(value: float | None) -> str:
        return f"{value:,.2f} USD/h" if value is not None else "unknown (no public price)"

    out.write(f"  estimated TPU price: on-demand {usd(estimate.on_demand_usd_per_hour)}, "
              f"spot {usd(estimate.spot_usd_per_hour)}\n")
    out.write(f"    ({estimate.spot_assumption}; TPU VMs only; source {estimate.source})\n")
    if tpu.quota is not None:
        # The Compute Engine quota the slices spend, by the ids Cloud Quotas is assumed to list (infra/tpu_quota.py).
        need = tpu.quota
        out.write(f"  TPU quota to have: {need.chips} {need.generation} chips in {need.region}, {need.kind}\n")
        for i, quota in enumerate(need.quotas):
            out.write(f"    {'or ' if i else ''}{quota.describe()}\n")
        if need.quotas:
            out.write("    (quota ids assumed; docs/deploying.md#tpu-quota lists them with gcloud)\n")
        else:
            out.write(f"    {need.request()}\n")
    if tpu.disk_quota:
        out.write(f"  {tpu.disk_quota}\n")


def render_text(plan: Plan, schemas_dir: Path | None, out: TextIO) -> None:
    custom = [r for r in plan.resources if r.custom]
    out.write(f"Offline plan of stack {plan.stack!r} (program run under Pulumi mocks: nothing was created)\n\n")
    out.write(f"Resources: {len(custom)} to create, in {len(plan.resources) - len(custom)} components\n")
    render_tree(plan.resources, out)

    out.write("\nSummary\n")
    if plan.shared_cluster:
        out.write("  TPU: none of its own (a shared cluster: each run stack creates and bills its slices)\n")
    else:
        _render_tpu(plan, out)
    render_cost(plan.cost, out, plan.role)
    if plan.planner:
        out.write("\nPlanner (the run's plan is the plan export):\n")
        for note in plan.planner:
            out.write("\n".join(fit_line(f"  {note}")) + "\n")

    out.write("\nExports\n")
    for key, value in plan.exports.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if "\n" in text:   # a multi-line value (nextSteps): one indented block under its key
            text = "\n" + "\n".join(f"      {line}" for line in text.splitlines())
        out.write(f"  {key} =" + ("" if text.startswith("\n") else " ") + f"{text}\n")

    if plan.dashboard is not None:
        render_dashboard(plan.dashboard, out)

    report = plan.validation
    crds = "skipped (no CRD directory)" if report.cr_check_skipped else f"CRDs from {schemas_dir}"
    out.write(f"\nValidation: {report.checked} Kubernetes object(s) against Kubernetes {report.kubernetes_version} "
              f"schemas; custom resources: {crds}\n")
    out.write(f"  {len(report.errors)} error(s), {len(report.warnings)} warning(s)\n")
    for finding in report.errors:
        out.write(f"  ERROR {finding}\n")
    for finding in report.warnings:
        out.write(f"  WARN  {finding}\n")
    for note in report.notes + plan.notes:
        out.write(f"  note: {note}\n")

    if plan.recipe:
        out.write("\nRecipe:\n")
        for line in plan.recipe:
            out.write(f"  {line}\n")

    if plan.preemption:
        out.write("\nPreemption (Spot notice, save, grace periods):\n")
        for line in plan.preemption["summary"]:
            out.write(f"  {line}\n")
        for warning in plan.preemption["warnings"]:
            out.write(f"  WARN  {warning}\n")

    if plan.startup:
        out.write("\nStart-up (every start of a slice is a cold node):\n")
        for line in plan.startup:
            out.write("\n".join(fit_line(f"  {line}")) + "\n")

    out.write("\nAssumptions to check (the offline plan cannot verify them):\n")
    for line in plan.assumptions:
        out.write(f"  - {line}\n")

    out.write("\n")
    render_path(plan.deploy, out)
    out.write("\n")
    render_path(plan.destroy, out)


# ---------------------------------------------------------------------------------------------------


def _cluster_outputs(raw: dict[str, Any], root: Path):
    """A run stack's config build reads its cluster stack's outputs, played under mocks (the Pulumi runtime is
    loaded for it only then); other stacks read none."""
    if "clusterStack" not in raw:
        return None
    from preview.harness import played_outputs

    return played_outputs(root)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raw: dict[str, Any] = {}
    try:
        raw = load_stack_config(args.stack, args.root)
    except StackFileError as error:
        # No stack file: nothing else can be checked.
        return refuse_all(args, [(error, ("--stack", args.stack))], raw)
    # Checks that do not depend on each other all run, so one run shows every mistake (docs/offline-plan.md):
    # each --set on its own, the config with the --set that applied (its own checks collect every problem they
    # can), and the CRD copy TPU_MULTISLICE_CRDS names.
    refusals: list[tuple[Exception, tuple[str | None, Any]]] = []
    for assignment in args.overrides:
        try:
            raw = apply_override(raw, assignment)
        except OverrideError as error:
            refusals.append((error, ("--set", assignment)))
    try:
        config = build(raw, stack=args.stack, cluster_outputs=_cluster_outputs(raw, args.root))
    except ConfigError as error:
        refusals.append((error, ("--stack", args.stack)))
    schemas_dir, crd_notice, refused = crd_schemas(args)
    if refused:
        refusals.append((ValueError(refused), (crd_fetch.ENV_OVERRIDE, os.environ.get(crd_fetch.ENV_OVERRIDE))))
    if refusals:
        return refuse_all(args, refusals, raw)

    # Imported only now: the mocks pull in the Pulumi runtime, which a config error never needs.
    from preview.harness import run_program
    from preview.files import write_plan_files
    from preview.model import build_plan

    try:
        run = run_program(raw, stack=args.stack, program=args.root / "__main__.py")
    except Exception as error:  # noqa: BLE001 (any failure of the user's program is reported, not raised)
        print(f"the program failed under mocks: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_PROGRAM

    plan = build_plan(run, config, args.stack, schemas_dir, args.root)
    messages: list[str] = []
    if args.out is not None:
        written = write_plan_files(plan, args.out)
        messages.append(f"wrote {len(written)} file(s) under {args.out}")
    if args.graph is not None:
        path, what = write_graph(plan.graph.to_dot(plan.deploy), args.graph)
        messages.append(f"graph: {what}: {path}")

    compiled, retry = None, None
    counts = slices_to_compile(config, args.compile)
    if counts:
        from preview.compile import CompileStopped
        try:
            shapes, compiler = compile_stack(config, plan, args.root, args.compile_timeout, counts,
                                             args.full_compile)
        except (KeyboardInterrupt, CompileStopped) as stop:
            # run_compile has already ended the compile's process group.
            print("compile: stopped (Ctrl-C or SIGTERM); the compile worker was stopped too", file=sys.stderr)
            return 130 if isinstance(stop, KeyboardInterrupt) else 143
        # The verdict is the worst shape's: the first that XLA refused, else the launch shape (the last).
        compiled = next((result for result in shapes if not result.compiled), shapes[-1])
        plan.compile = compiled.as_dict()
        plan.compile["shapes"] = [result.as_dict() for result in shapes]
        retry = batch_to_try(config, compiled)
        if retry is not None:
            plan.compile["nearest_to_try"] = {"perDeviceBatchSize": retry}

    crd_missing = bool(crd_notice) and not args.no_crd_check
    refusal_lines: list[str] = []
    if not plan.validation.ok or crd_missing:
        code = EXIT_INVALID
    elif compiled is not None and not compiled.compiled:
        code, refusal_lines = compile_outcome(config, compiled, compiler, args)
    else:
        code = EXIT_OK
    verdict = verdict_lines(plan, args.stack, code, crd_missing, args.no_crd_check)
    if args.json:
        document = plan.as_dict(summary=args.json == "summary")
        document["files"] = messages
        document["validation"]["crd_check"] = " ".join(" ".join(crd_notice).split()) or None
        document["shape_changes"] = shape_changes_document(config)
        document["verdict"] = {"exit_code": code, "lines": [line.strip() for line in verdict[1:]]}
        print_json(document)
    else:
        text = io.StringIO()
        text.writelines(line + "\n" for line in crd_notice)   # first: the plan's verdict does not cover CRDs
        # Then what config build changed of the run that no key asked for (infra/config/shape_changes.py).
        text.writelines(line + "\n" for line in shape_change_lines(config, plan))
        render_text(plan, None if plan.validation.cr_check_skipped else schemas_dir, text)
        for message in messages:
            text.write(message + "\n")
        if compiled is not None:
            from preview.compile import render
            for result in shapes:
                render(result, text)
            if retry is not None:
                text.write(f"  nearest to try: tpu-multislice:perDeviceBatchSize={retry:g} (the largest smaller "
                           "batch the planner lays out; compile again to check)\n")
        # Last: one block that says what the exit code means (preview/verdict.py).
        text.write("\n" + "\n".join(verdict) + "\n")
        sys.stdout.write(fit(text.getvalue()))
    if crd_notice and args.json:
        print(f"python -m preview: {crd_notice[0]}", file=sys.stderr)
    for line in refusal_lines:
            print(line, file=sys.stderr)
    return code


def compile_outcome(config: StackConfig, compiled, compiler, args: argparse.Namespace) -> tuple[int, list[str]]:
    """The exit code of a shape XLA did not pass, and the lines (stderr, after the plan) that say why."""
    if compiled.timed_out_after_s is not None:
        from core.compile_verdicts import RETRY_ENV
        return EXIT_COMPILE, [fit(f"compile: undecided after {compiled.timed_out_after_s:.0f} s on "
                                  f"{compiled.num_slices} slice(s) (kept; the next preview does not compile it "
                                  f"again; {RETRY_ENV}=1 does)").rstrip("\n")]
    lines = xla_refusal(config, compiled, args.root, compiler)
    from aot.runner import decided
    if not decided(compiled) and not args.compile and config.workload.compile_check == "auto":
        # No verdict (no compiler here, a compile that could not run): compileCheck=auto warns, as the program's
        # config build does; XLA's own refusal, --compile and always exit 4.
        return EXIT_OK, lines
    return EXIT_COMPILE, lines


def refuse_all(args: argparse.Namespace, refusals: list[tuple[Exception, tuple[str | None, Any]]],
               raw: dict[str, Any]) -> int:
    """Every refusal of the run, one line per mistake on stderr (each naming the key, the value and what is
    allowed; a refusal over HBM keeps its further lines: the nearest fit, the planner's why, the compile
    command), and with --json one document of all their rows on stdout (preview/errors_document.py)."""
    if args.json:
        print_json(errors_document([row for error, option in refusals for row in error_rows(error, raw, option)]))
    for error, _ in refusals:
        for problem in getattr(error, "problems", None) or [str(error)]:
            refuse("python -m preview", problem)
    return EXIT_CONFIG


def crd_schemas(args: argparse.Namespace) -> tuple[Path | None, list[str], str | None]:
    """(the CRD directory, the lines the plan opens with when custom resources go unchecked, a refusal): --schemas
    as given, else the pinned CRDs (preview/k8s/crd_fetch.py)."""
    if args.no_crd_check:
        return None, [crd_fetch.OPTED_OUT], None
    if args.schemas is not None:
        return args.schemas, [], None
    lookup = crd_fetch.find_schemas(args.root)
    if lookup.directory or lookup.refused:
        return lookup.directory, [], lookup.refused
    return None, [*crd_fetch.MISSING, *(f"  {note}" for note in lookup.notes)], None


def print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def xla_refusal(config: StackConfig, refused, root: Path, compiler=None) -> list[str]:
    """A step XLA refused, in lines of at most 100 columns: the key (perDeviceBatchSize), what failed (XLA's bytes
    or its error code), and the nearest batch XLA compiled (from compile-verdicts.json) or the one to try next."""
    import textwrap

    from core import compile_verdicts
    from core.memory import GIB

    if (refused.reason or "").startswith("could not set up the compile"):
        # Not XLA's verdict: nothing was compiled (MaxText or libtpu missing here, no topology for the shape).
        why = refused.reason.partition(": ")[2]
        missing = re.match(r"no (\S+) here", why)
        if missing:
            return [f"compile: {missing.group(1)} is not installed here: bash scripts/setup.sh installs it, or set "
                    "compileCheck=off"]
        return textwrap.wrap(f"compile: the step was not compiled: {why}", 100, subsequent_indent="    ")
    planned = config.workload.plan
    if refused.required_bytes and refused.hbm_bytes:
        failed = (f"XLA needs {refused.required_bytes / GIB:.2f} GiB per device of "
                  f"{refused.hbm_bytes / GIB:.2f}" + (f" ({refused.error_code})" if refused.error_code else ""))
    else:
        failed = refused.error_code or "XLA does not compile it"
    key, batch = _batch_key(config, refused)
    where = ""
    if refused.step == compile_verdicts.STEP_EVAL:
        where = f" in the eval step ({NAMESPACE}:evalDatasetPath is set)"
    lines = [f"{NAMESPACE}:{key}={batch:g} is refused by XLA{where} on {refused.num_slices} x "
             f"{planned.shape.pod_type}: {failed}"]
    verdicts = compile_verdicts.load(compile_verdicts.verdicts_path(root))
    nearest = None
    if compiler is not None and not where:
        nearest = compile_verdicts.nearest_compiled(
            planned, refused.num_slices, lambda plan, count: compile_verdicts.lookup(
                verdicts, compiler.key(config, count, plan.per_device_batch_size)))
    if nearest is not None:
        lines.append(f"    nearest that compiled: {NAMESPACE}:perDeviceBatchSize={nearest:g} (compile-verdicts.json)")
    else:
        retry = batch_to_try(config, refused)
        if retry is not None:
            lines.append(f"    nearest to try: {NAMESPACE}:perDeviceBatchSize={retry:g} (not compiled yet)")
    if refused.reason and not refused.cached:
        lines += textwrap.wrap(f"XLA: {refused.reason}", 100, initial_indent="    ", subsequent_indent="      ")
    return [piece for line in lines for piece in textwrap.wrap(line, 100, subsequent_indent="      ")]


def _batch_key(config: StackConfig, result) -> tuple[str, float]:
    """The key that set the batch of a compiled step and its value: perDeviceBatchSize for the train step, for
    MaxText's eval step (aot/eval_compile.py) the config build's rule (plan_rules.eval_batch_key)."""
    from aot.runner import loaded_eval_batch
    from core.compile_verdicts import STEP_EVAL

    planned = config.workload.plan
    if result.step != STEP_EVAL:
        return plan_rules.TRAIN_BATCH_KEY, planned.per_device_batch_size
    # The config build knows the eval batch it compiled; a result (compiled now or read back from
    # compile-verdicts.json) carries only its argv, whose eval batch workloads/compile_check.py eval_target set to it.
    return plan_rules.eval_batch_key(planned, loaded_eval_batch(result.keys))


def batch_to_try(config: StackConfig, compiled) -> float | None:
    """When XLA ran out of HBM on a step the planner accepted: the per-device batch to compile next."""
    if (compiled.compiled or compiled.required_bytes is None
            or _batch_key(config, compiled)[0] != plan_rules.TRAIN_BATCH_KEY):
        return None
    from core.advice import next_smaller_batch
    return next_smaller_batch(config.workload.plan)


def slices_to_compile(config: StackConfig, asked: bool) -> list[int]:
    """The slice counts whose step this preview compiles (core/compile_verdicts.py slices_to_compile: with
    --compile or compileCheck=always every distinct shape the run takes, with auto those near the limit)."""
    from core.compile_verdicts import slices_to_compile as counts
    if not config.stack.has_run:        # a shared cluster runs nothing: its runs' stacks compile their steps
        return []
    return counts(config.workload.plan, config.workload.compile_check, asked)


def compile_stack(config: StackConfig, plan: Plan, root: Path, timeout: float, counts: list[int],
                  full: bool = False):
    """preview/compile/ on the stack's own argv and its TPU pods' LIBTPU_INIT_ARGS (from the manifests), at each
    of `counts` slices in slices_to_compile's order, stopping at a refusal (the run's verdict). A step whose
    verdict is kept under its complete key in compile-verdicts.json (core/compile_verdicts.py) is not compiled
    again, nor one kept as undecided (unless compile_verdicts.RETRY_ENV); a new verdict is added to it.
    `full`: the full compile, else the kernels alone + memory-only (aot/kernel_check.py run_verdict).
    Returns the results and the compiler (its keys find the nearest batch XLA compiled)."""
    from core import compile_verdicts
    from aot.kernel_check import mode_of
    from aot.runner import compile_key, expected_time, kept, verdict_of
    from preview.compile import CompileSetupError, failed_setup, run_verdict, stack_target
    from workloads.compile_check import ProgramCompiler

    planned = config.workload.plan
    cache = compile_verdicts.verdicts_path(root)
    compiler = ProgramCompiler(launch=lambda c: stack_target(c, [entry.obj for entry in plan.manifests], root),
                               full=full)
    results = []
    try:
        verdicts, note = compile_verdicts.read(cache)
        if note:
            print(fit(f"compile: {note}"), file=sys.stderr)
        # At each count the train step, then each distinct eval step of a run with an eval split (Plan.eval_batches:
        # MaxText compiles it at start, aot/eval_compile.py), as the config build does (infra/config/compile_check.py).
        steps = [(count, batch) for count in counts for batch in (None, *planned.eval_batches)]
        for count, batch in steps:
            resized = planned.at_slices(count)
            target = compiler.target(config, count, eval_batch=batch)
            key = compile_key(target, mode_of(full))
            known = compile_verdicts.lookup(verdicts, key)
            if known is not None and known.undecided and compile_verdicts.retry_undecided():
                known = None
            if known is not None:
                results.append(from_verdict(known, resized, key.digest()))
            else:
                print(fit(f"compile: {target.plan}"), file=sys.stderr)
                how = expected_time(resized.model.name) if full else "the kernels alone, then memory-only"
                print(fit(f"compile: {how}; skip: --set compileCheck=off"), file=sys.stderr)
                result = run_verdict(target, full=full, timeout=timeout, progress=sys.stderr)
                results.append(result)
                if kept(result):
                    # XLA's own verdict, or "undecided after N s": kept for the next preview.
                    compile_verdicts.record(cache, key, verdict_of(result, resized, batch))
            if not results[-1].compiled:
                break            # a refusal (or no verdict) at the riskiest count is the run's verdict
    except CompileSetupError as error:
        results.append(failed_setup(config, str(error)))
    except compile_verdicts.NotDecided as error:
        results.append(failed_setup(config, str(error)))
    return results, compiler


def from_verdict(verdict, resized: Plan, digest: str):
    """A kept verdict as the report of a compile (nothing runs)."""
    from preview.compile import CompileResult
    return CompileResult(
        compiled=verdict.compiled, peak_bytes_per_device=verdict.peak_bytes, hbm_bytes=verdict.hbm_bytes,
        topology=f"{resized.shape.pod_type}", num_slices=verdict.slices, seconds=0.0, reason=verdict.reason,
        required_bytes=verdict.required_bytes, source=f"compile-verdicts.json {digest} ({verdict.date})",
        plan=resized.describe(), estimate_bytes=resized.memory.total, libtpu=verdict.libtpu, cached=True,
        timed_out_after_s=verdict.undecided_after_s, step=verdict.step, argv=tuple((verdict.key or {}).get("argv", ())))


if __name__ == "__main__":
    sys.exit(main())

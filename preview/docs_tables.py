"""Tables the docs quote whose numbers and names the code computes, so a doc cannot drift from the code.

Each table sits in a Markdown file under a marker line `<!-- table:NAME ... -->` and ends at the next blank line.
`python -m preview.docs_tables` prints them; `--write` rewrites them in place; tests/docs/test_docs_tables.py
fails when a file's table differs from what the code computes now (prices, `pulumi up` durations, the APIs the
stack enables, the roles a deployer needs, the TPU quotas each stack spends).
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from preview import interruption_table

REPO = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"^<!-- table:(?P<name>[a-z-]+)\b.*-->$", re.MULTILINE)


@dataclass(frozen=True)
class StackFacts:
    stack: str
    slices: int
    generation: str
    topology: str
    machine_type: str
    hosts: int
    chips: int
    capacity: str
    on_demand_usd: float | None
    spot_usd: float | None
    deploy_s: float
    destroy_s: float
    deploy_sum_s: float
    training_usd: float | None     # everything the plan prices, while a job runs (TPU, system pool, GKE fee)
    idle_usd: float | None         # the same with no job (warm slices only)


def committed_stacks(repo: Path = REPO) -> list[str]:
    """The committed single stacks (a cluster with its run), which the tables compare; the shared cluster and the
    runs on it (stackRole, clusterStack) are priced in docs/shared-cluster.md."""
    from preview.stack_files import is_single_stack
    return sorted(name for p in repo.glob("Pulumi.*.yaml")
                  if is_single_stack(name := p.name[len("Pulumi."):-len(".yaml")], repo))


@functools.lru_cache(maxsize=None)
def stack_facts(stack: str, repo: Path = REPO) -> StackFacts:
    """The offline plan's figures for one committed stack (the program run under mocks)."""
    from infra.config import build
    from preview.harness import run_program
    from preview.model import build_plan
    from preview.stack_files import load_stack_config

    raw = load_stack_config(stack, repo)
    plan = build_plan(run_program(raw, stack=stack, program=repo / "__main__.py"), build(raw), stack, None)
    tpu = plan.tpu
    return StackFacts(stack, tpu.slices, tpu.generation, tpu.topology, tpu.machine_type, tpu.hosts, tpu.chips,
                      tpu.capacity, tpu.estimate.on_demand_usd_per_hour, tpu.estimate.spot_usd_per_hour,
                      plan.deploy.longest_s, plan.destroy.longest_s, plan.deploy.sum_of_all_steps_s,
                      plan.cost.training_usd_per_hour, plan.cost.idle_usd_per_hour)


def _usd(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "unknown"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def costs_at_a_glance(repo: Path = REPO) -> str:
    rows = ["| stack | TPUs | capacity | USD per hour while training | USD per hour idle |",
            "| --- | --- | --- | --- | --- |"]
    for stack in committed_stacks(repo):
        f = stack_facts(stack, repo)
        rows.append(f"| `{stack}` | {f.chips} × {f.generation} | {f.capacity} | {_usd(f.training_usd)} | "
                    f"{_usd(f.idle_usd)} |")
    return "\n".join(rows)


def costs_per_stack(repo: Path = REPO) -> str:
    rows = ["| stack | TPU VMs | chips | capacity | TPUs per hour (on-demand / spot) | training, all in | idle |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for stack in committed_stacks(repo):
        f = stack_facts(stack, repo)
        rows.append(f"| `{stack}` | {f.slices} × {f.generation} {f.topology}, {f.hosts} × {f.machine_type} | "
                    f"{f.chips} | {f.capacity} | {_usd(f.on_demand_usd)} / {_usd(f.spot_usd)} | "
                    f"{_usd(f.training_usd)} | {_usd(f.idle_usd)} |")
    return "\n".join(rows)


def deploy_durations(repo: Path = REPO) -> str:
    rows = ["| stack | `pulumi up` (critical path) | every step one after another | `pulumi destroy` |",
            "| --- | --- | --- | --- |"]
    for stack in committed_stacks(repo):
        f = stack_facts(stack, repo)
        rows.append(f"| `{stack}` | {_minutes(f.deploy_s)} | {_minutes(f.deploy_sum_s)} | "
                    f"{_minutes(f.destroy_s)} |")
    return "\n".join(rows)


def lookup_apis(repo: Path = REPO) -> str:
    from infra.preflight import enable_command
    return f"```bash\n{enable_command('MY_PROJECT')}\n```"


def required_apis(repo: Path = REPO) -> str:
    from infra.services import CLOUD_BUILD_APIS, IMAGE_APIS, required_apis as apis
    lines = [f"- `{api}`" for api in apis(None)]
    lines += [f"- `{api}` (with `workerEnvironment: image`, the default on Ray and JobSet)" for api in IMAGE_APIS]
    lines += [f"- `{api}` (with `workerEnvironment: image` and `imageBuilder: cloud-build`, the defaults)"
              for api in CLOUD_BUILD_APIS]
    return "\n".join(lines)


def tpu_quotas(repo: Path = REPO) -> str:
    """Per committed stack: the Compute Engine TPU quota its slices spend, by the names Cloud Quotas lists
    (infra/tpu_quota.py; every id an assumption there), and how many chips to ask for."""
    from infra.tpu_quota import quota_need
    from infra.config import build
    from preview.stack_files import load_stack_config
    rows = ["| stack | region | TPU chips | kind of quota | quota to request (Cloud Quotas id) | published name |",
            "| --- | --- | --- | --- | --- | --- |"]
    for stack in committed_stacks(repo):
        config = build(load_stack_config(stack, repo))
        f = stack_facts(stack, repo)
        need = quota_need(f.generation, config.gcp.region, f.chips, config.tpu.capacity.value)
        published = ", ".join(q.published for q in need.quotas if q.published) or "none found"
        quotas = " or ".join(f"`{q.describe()}`" for q in need.quotas) or "–"
        rows.append(f"| `{stack}` | {need.region} | {f.chips} {f.generation} ({f.slices} × {f.topology}) | "
                    f"{need.kind} | {quotas} | {published} |")
    return "\n".join(rows)


def deployer_roles(repo: Path = REPO) -> str:
    from preview.deployer_roles import markdown_table
    return markdown_table()


def startup_per_host(repo: Path = REPO) -> str:
    """Per TPU host: what each workerEnvironment fetches and how long it takes, and the first step with the
    compilation cache missed and hit (benchmarks/startup_bench.py's figures, benchmarks/startup/results.json)."""
    from preview.startup import host_table, load_results
    return host_table(load_results())


def startup_budget(repo: Path = REPO) -> str:
    """Per committed stack: the environment per host, what a start fetches, cold node to first compile."""
    from infra.config import build
    from preview.startup import budget_table
    from preview.stack_files import load_stack_config
    return budget_table([(stack, build(load_stack_config(stack, repo))) for stack in committed_stacks(repo)])


TABLES: dict[str, tuple[str, Callable[[Path], str]]] = {
    "costs-at-a-glance": ("README.md", costs_at_a_glance),
    "costs-per-stack": ("docs/costs.md", costs_per_stack),
    "deploy-durations": ("docs/deploying.md", deploy_durations),
    "lookup-apis": ("docs/deploying.md", lookup_apis),
    "required-apis": ("docs/deploying.md", required_apis),
    "deployer-roles": ("docs/deploying.md", deployer_roles),
    "tpu-quotas": ("docs/deploying.md", tpu_quotas),
    "interruption-costs": ("docs/costs.md", interruption_table.table),
    "startup-per-host": ("README.md", startup_per_host),
    "startup-budget": ("README.md", startup_budget),
}


def _span(text: str, name: str) -> tuple[int, int] | None:
    """Where NAME's table sits in `text`: from the line after its marker to the next blank line, or to the end of
    a file whose last table it is (its final newline stays outside)."""
    for match in _MARKER.finditer(text):
        if match.group("name") == name:
            start = match.end() + 1
            end = text.find("\n\n", start - 1)
            return start, max(start, end if end != -1 else len(text.rstrip("\n")))
    return None


def table_in_file(name: str, repo: Path = REPO) -> str | None:
    """The table under NAME's marker in its file, or None when the file has no such marker."""
    text = (repo / TABLES[name][0]).read_text()
    span = _span(text, name)
    return None if span is None else text[span[0]:span[1]]


def write(repo: Path = REPO) -> list[str]:
    changed = []
    for name, (file, builder) in TABLES.items():
        path = repo / file
        text = path.read_text()
        span = _span(text, name)
        fresh = builder(repo)
        if span is None or text[span[0]:span[1]] == fresh:
            continue
        empty = span[0] == span[1]    # a new marker: the table still needs its closing blank line
        path.write_text(text[:span[0]] + fresh + ("\n" if empty else "") + text[span[1]:])
        changed.append(f"{file}: {name}")
    return changed


if __name__ == "__main__":
    from core.cli_errors import OneLineParser
    parser = OneLineParser(prog="python -m preview.docs_tables", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in place")
    if parser.parse_args().write:
        print("\n".join(write()) or "every table is current")
    else:
        for table, (file, builder) in TABLES.items():
            sys.stdout.write(f"<!-- table:{table} ({file}) -->\n{builder(REPO)}\n\n")

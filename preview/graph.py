"""The deployment's dependency graph: who waits for whom, critical paths, and a Graphviz picture.

Built from the registrations recorded under mocks (infra/mocks.py). A resource waits for:
its `dependencies` and `property_dependencies` (what Pulumi orders operations by), its provider (a
Kubernetes object cannot be created before the provider that talks to its cluster), and its parent
(children register after their component). Destroy runs the same graph backwards.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from preview import timings
from preview.harness import Registration


@dataclass
class Node:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str | None
    timing: timings.Timing
    protect: bool = False
    retain_on_delete: bool = False
    deleted_with: str | None = None
    deletion_protection: bool = False


@dataclass
class Step:
    urn: str
    name: str
    type: str
    seconds: float
    basis: str


@dataclass
class CriticalPath:
    direction: str                 # "deploy" or "destroy"
    steps: list[Step]
    longest_s: float               # wall time with unlimited parallelism
    sum_of_all_steps_s: float      # every operation one after another (running commands by hand)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"direction": self.direction, "longest_s": self.longest_s,
                "sum_of_all_steps_s": self.sum_of_all_steps_s, "notes": list(self.notes),
                "steps": [{"name": s.name, "type": s.type, "seconds": s.seconds, "basis": s.basis}
                          for s in self.steps]}


def provider_urn(reference: str) -> str:
    """A provider reference is '<provider urn>::<provider id>'."""
    return reference.rsplit("::", 1)[0] if reference else ""


class DependencyGraph:
    def __init__(self, nodes: list[Node], waits_for: dict[str, set[str]]):
        self.nodes = {node.urn: node for node in nodes}
        self.waits_for = waits_for                  # urn → urns it waits for (deploy order)

    @classmethod
    def from_registrations(cls, registrations: Iterable[Registration]) -> "DependencyGraph":
        registrations = list(registrations)
        known = {r.urn for r in registrations}
        nodes, waits_for = [], {}
        for r in registrations:
            nodes.append(Node(
                urn=r.urn, type=r.type, name=r.name, custom=r.custom,
                parent=r.parent if r.parent in known else None,
                timing=timings.timing_for(r.type, r.inputs, r.custom),
                protect=r.protect, retain_on_delete=r.retain_on_delete,
                deleted_with=r.deleted_with or None,
                deletion_protection=bool(r.inputs.get("deletionProtection")) if r.custom else False))
            before = set(r.dependencies) | {u for urns in r.property_dependencies.values() for u in urns}
            before.add(provider_urn(r.provider))
            before.add(r.parent)
            waits_for[r.urn] = {u for u in before if u in known and u != r.urn}
        return cls(nodes, waits_for)

    def edges(self) -> set[tuple[str, str]]:
        """(first, then) pairs: `then` waits for `first`."""
        return {(first, then) for then, firsts in self.waits_for.items() for first in firsts}

    def _topological(self, before: dict[str, set[str]]) -> list[str]:
        remaining = {urn: set(firsts) for urn, firsts in before.items()}
        ready = sorted(urn for urn, firsts in remaining.items() if not firsts)
        order = []
        dependents: dict[str, set[str]] = {}
        for urn, firsts in before.items():
            for first in firsts:
                dependents.setdefault(first, set()).add(urn)
        while ready:
            urn = ready.pop()
            order.append(urn)
            for dependent in sorted(dependents.get(urn, ())):
                remaining[dependent].discard(urn)
                if not remaining[dependent]:
                    ready.append(dependent)
        if len(order) != len(before):
            raise ValueError("dependency cycle among: " + ", ".join(sorted(set(before) - set(order))))
        return order

    def _longest(self, before: dict[str, set[str]], seconds: dict[str, float], direction: str,
                 notes: list[str]) -> CriticalPath:
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for urn in self._topological(before):
            # sorted(): equal finish times tie-break by URN, so the reported path is the same every run.
            previous = max(sorted(before[urn]), key=lambda u: finish[u], default=None)
            finish[urn] = (finish[previous] if previous else 0.0) + seconds[urn]
            via[urn] = previous
        end = max(finish, key=finish.get, default=None)
        steps: list[Step] = []
        while end is not None:
            node = self.nodes[end]
            if seconds[end] > 0:
                steps.append(Step(end, node.name, node.type, seconds[end], node.timing.basis))
            end = via[end]
        steps.reverse()
        return CriticalPath(direction=direction, steps=steps, longest_s=max(finish.values(), default=0.0),
                            sum_of_all_steps_s=sum(seconds.values()), notes=notes)

    def deploy_path(self) -> CriticalPath:
        seconds = {urn: node.timing.create_s for urn, node in self.nodes.items()}
        return self._longest(self.waits_for, seconds, "deploy", [])

    def destroy_path(self) -> CriticalPath:
        """Deletion runs backwards: a resource goes after everything that waited for it. Resources kept
        on destroy (retain_on_delete) or deleted with another resource (deleted_with) cost nothing."""
        before: dict[str, set[str]] = {urn: set() for urn in self.nodes}
        for first, then in self.edges():
            before[first].add(then)
        seconds, notes = {}, []
        for urn, node in self.nodes.items():
            free = node.retain_on_delete or (node.deleted_with in self.nodes)
            seconds[urn] = 0.0 if free else node.timing.delete_s
            if node.retain_on_delete:
                notes.append(f"{node.name} ({node.type}) is kept: retain_on_delete")
            if node.protect:
                notes.append(f"{node.name} ({node.type}) is protected: `pulumi destroy` stops until it is unprotected")
            if node.deletion_protection:
                notes.append(f"{node.name} ({node.type}) has deletionProtection: set it false and `pulumi up` "
                             "before destroying")
        deleted_with = sum(1 for n in self.nodes.values() if n.deleted_with in self.nodes)
        if deleted_with:
            notes.append(f"{deleted_with} resource(s) go away with their deleted_with target (no own delete call)")
        return self._longest(before, seconds, "destroy", notes)

    # ------------------------------------------------------------------------------------------------
    # Picture

    def _reduced_edges(self) -> set[tuple[str, str]]:
        """Transitive reduction between custom resources: an edge implied by a longer path is left out
        of the picture (the 7 API services would otherwise point at almost everything)."""
        custom = {u for u, n in self.nodes.items() if n.custom}
        before = {u: {f for f in self.waits_for[u] if f in custom} for u in custom}
        ancestors: dict[str, set[str]] = {}
        for urn in self._topological(before):
            ancestors[urn] = set().union(*(ancestors[f] | {f} for f in before[urn])) if before[urn] else set()
        reduced = set()
        for then, firsts in before.items():
            implied = set().union(*(ancestors[f] for f in firsts)) if firsts else set()
            reduced |= {(first, then) for first in firsts - implied}
        return reduced

    def to_dot(self, highlight: CriticalPath | None = None) -> str:
        critical = {step.urn for step in highlight.steps} if highlight else set()

        def is_critical(urn: str) -> bool:
            return urn in critical

        children: dict[str | None, list[Node]] = {}
        for node in self.nodes.values():
            children.setdefault(node.parent, []).append(node)
        lines = ["digraph deployment {", "  rankdir=LR; compound=true; newrank=true;",
                 '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=10];',
                 '  edge [color="#777777"];']

        def emit(parent: str | None, indent: str) -> None:
            for node in sorted(children.get(parent, []), key=lambda n: n.name):
                if not node.custom:
                    lines.append(f"{indent}subgraph {_quote('cluster_' + node.urn)} {{")
                    lines.append(f"{indent}  label={_quote(node.name + ' (' + node.type.split(':')[-1] + ')')};"
                                 ' style="rounded"; color="#999999"; fontname="Helvetica";')
                    emit(node.urn, indent + "  ")
                    lines.append(f"{indent}}}")
                    continue
                seconds = node.timing.create_s
                duration = f"~{seconds / 60:.1f} min" if seconds >= 60 else f"~{seconds:.0f} s"
                label = f"{node.name}\\n{node.type.split(':')[-1]}" + (f"\\n{duration}" if seconds else "")
                shape = ', shape="ellipse"' if node.type.startswith("pulumi:providers:") else ""
                fill = ', fillcolor="#ffe0e0", color="#c00000"' if is_critical(node.urn) else ""
                lines.append(f"{indent}{_quote(node.urn)} [label={_quote(label)}{shape}{fill}];")

        emit(None, "  ")
        for first, then in sorted(self._reduced_edges()):
            style = ' [color="#c00000", penwidth=2]' if is_critical(first) and is_critical(then) else ""
            lines.append(f"  {_quote(first)} -> {_quote(then)}{style};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    """A DOT quoted string; label line breaks are passed in already escaped as \\n."""
    return '"' + text.replace('"', '\\"') + '"'


RENDERED_FORMATS = ("svg", "png", "pdf")


def write_graph(dot_text: str, target: Path) -> tuple[Path, str]:
    """Write the picture. SVG/PNG/PDF are rendered with Graphviz `dot` when it is installed; otherwise
    (or for .dot/.gv) the DOT source is written. Returns (file written, what happened)."""
    fmt = target.suffix.lstrip(".").lower()
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt in RENDERED_FORMATS:
        dot = shutil.which("dot")
        if dot is not None:
            subprocess.run([dot, f"-T{fmt}", "-o", str(target)], input=dot_text, text=True, check=True, timeout=120)
            return target, f"rendered {fmt.upper()} with Graphviz"
        target = target.with_suffix(".dot")
        target.write_text(dot_text)
        return target, "Graphviz `dot` not found: wrote the DOT source instead (render it with `dot -Tsvg`)"
    target.write_text(dot_text)
    return target, "wrote DOT source"

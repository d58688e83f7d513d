"""`--out DIR`: the plan's objects as files.

DIR/kubernetes/NNN-kind-namespace-name.yaml one object per file, numbered in apply order, ready for
                                            `kubectl apply --dry-run=server -f DIR/kubernetes`
DIR/gcp/NNN-type-name.json                  each Google Cloud resource: type, logical name, parent, inputs
Secret values are written as "[secret]", as everywhere in the plan's output.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from preview.k8s import manifests as k8s_manifests
from preview.model import Plan

_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def _slug(text: str) -> str:
    return _UNSAFE.sub("-", text.lower()).strip("-")


def write_plan_files(plan: Plan, out_dir: Path) -> list[Path]:
    written: list[Path] = []
    kubernetes_dir, gcp_dir = out_dir / "kubernetes", out_dir / "gcp"
    for directory in (kubernetes_dir, gcp_dir):
        # Files from an earlier plan of a bigger stack must not linger and be applied.
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
    for index, entry in enumerate(plan.manifests):
        path = kubernetes_dir / _slug(k8s_manifests.file_name(index, entry.obj))
        path.write_text(yaml.safe_dump(entry.obj, sort_keys=False, default_flow_style=False))
        written.append(path)
    for index, resource in enumerate(plan.gcp_resources):
        type_name = resource.type.split(":")[-1]
        path = gcp_dir / f"{index:03d}-{_slug(type_name)}-{_slug(resource.name)}.json"
        document = {"type": resource.type, "name": resource.name, "urn": resource.urn, "parent": resource.parent,
                    "depends_on": resource.depends_on, "inputs": resource.inputs}
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def load_kubernetes_files(out_dir: Path) -> list[dict]:
    """The objects back from DIR/kubernetes (for round-trip checks)."""
    return [yaml.safe_load(path.read_text()) for path in sorted((out_dir / "kubernetes").glob("*.yaml"))]

"""Read a stack's config the way the Pulumi CLI would hand it to the program, without the CLI."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.config.schema import NAMESPACE


class StackFileError(ValueError):
    pass


def is_single_stack(stack: str, root: Path) -> bool:
    """Whether a committed stack is a cluster with its one run (neither a shared cluster nor a run on one)."""
    raw = load_stack_config(stack, root)
    return "clusterStack" not in raw and raw.get("stackRole", "cluster-and-run") == "cluster-and-run"


def load_stack_config(stack: str, root: Path) -> dict[str, Any]:
    """Pulumi.<stack>.yaml → {key without namespace: value}. Keys of other namespaces are ignored."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise StackFileError(f"no stack {stack!r}: {path.name} not found; stacks here: {', '.join(known)}")
    document = yaml.safe_load(path.read_text()) or {}
    config = document.get("config") or {}
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}


def runs_referencing(cluster: str, root: Path) -> list[str]:
    """The run stacks in `root` whose clusterStack names the stack `cluster` of this project, each by the fully
    qualified name the cluster's runStacks lists it under (its reference's organization and project)."""
    found = []
    for path in sorted(root.glob("Pulumi.*.yaml")):
        stack = path.name[len("Pulumi."):-len(".yaml")]
        reference = load_stack_config(stack, root).get("clusterStack")
        if isinstance(reference, str) and reference.endswith(f"/{NAMESPACE}/{cluster}"):
            found.append(f"{reference.rsplit('/', 1)[0]}/{stack}")
    return found

"""Dependency graph and critical paths (infra/graph.py), on the real program and on hand-made graphs."""
from __future__ import annotations

import functools

import pytest

from preview.overrides import apply_overrides
from preview.graph import DependencyGraph
from preview.harness import Registration, run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO, committed_stack_run


@functools.lru_cache(maxsize=None)
def prod_graph(slices: int) -> DependencyGraph:
    run = (committed_stack_run("prod") if slices == 2 else
           run_program(apply_overrides(load_stack_config("prod", REPO), [f"slices={slices}"]), stack="prod"))
    return DependencyGraph.from_registrations(run.resources)


def test_deploy_critical_path_does_not_grow_with_slices():
    two, many = prod_graph(2).deploy_path(), prod_graph(32).deploy_path()
    # Slice pools wait for the cluster, never for each other (docs/platform-notes.md §4): 32 slices within 5 % of 2.
    assert many.longest_s <= two.longest_s * 1.05
    # ...while doing everything one step at a time grows with every pool.
    assert many.sum_of_all_steps_s > two.sum_of_all_steps_s + 29 * 60


def test_deploy_critical_path_runs_through_the_image_build_or_the_cluster_then_a_slice_pool():
    """Slice pools wait for the cluster and, with the default worker image, for its build (preview/timings.py: a
    build is guessed longer than a cluster), so the longest path is the build's; without the image, the cluster's."""
    path = prod_graph(2).deploy_path()
    types = [step.type for step in path.steps]
    assert types.index("command:local:Command") < types.index("gcp:container/nodePool:NodePool")
    assert path.longest_s == sum(step.seconds for step in path.steps)
    raw = {**load_stack_config("prod", REPO), "workerEnvironment": "runtime"}
    runtime = DependencyGraph.from_registrations(run_program(raw, stack="prod").resources).deploy_path()
    types = [step.type for step in runtime.steps]
    assert types.index("gcp:container/cluster:Cluster") < types.index("gcp:container/nodePool:NodePool")
    assert runtime.longest_s < path.longest_s


def test_destroy_removes_dependents_first_and_keeps_retained_resources():
    path = prod_graph(2).destroy_path()
    types = [step.type for step in path.steps]
    assert types.index("gcp:container/nodePool:NodePool") < types.index("gcp:container/cluster:Cluster")
    assert "gcp:storage/bucket:Bucket" not in types          # prod keeps checkpoints (retain_on_delete)
    assert any("deletionProtection" in note for note in path.notes)


def reg(name: str, type_: str, depends: tuple[str, ...] = (), parent: str = "", deleted_with: str = "",
        retain: bool = False, custom: bool = True) -> Registration:
    return Registration(urn=f"urn:{name}", type=type_, name=name, custom=custom, parent=parent, inputs={},
                        dependencies=[f"urn:{d}" for d in depends], property_dependencies={}, provider="",
                        protect=False, retain_on_delete=retain, deleted_with=deleted_with, ignore_changes=[])


def test_longest_path_on_a_hand_made_graph():
    cluster, network = "gcp:container/cluster:Cluster", "gcp:compute/network:Network"
    graph = DependencyGraph.from_registrations([
        reg("net", network), reg("cluster", cluster, ("net",)),
        reg("ns", "kubernetes:core/v1:Namespace", ("cluster",), deleted_with="urn:cluster"),
        reg("bucket", "gcp:storage/bucket:Bucket", retain=True),
    ])
    deploy = graph.deploy_path()
    assert [s.name for s in deploy.steps] == ["net", "cluster", "ns"]
    destroy = graph.destroy_path()
    # The namespace goes with the cluster and the bucket is kept: neither costs time on destroy.
    assert [s.name for s in destroy.steps] == ["cluster", "net"]
    assert destroy.sum_of_all_steps_s == sum(s.seconds for s in destroy.steps)


def test_a_cycle_is_reported():
    graph = DependencyGraph.from_registrations([
        reg("a", "gcp:compute/network:Network", ("b",)), reg("b", "gcp:compute/network:Network", ("a",))])
    with pytest.raises(ValueError, match="cycle"):
        graph.deploy_path()


def test_dot_draws_components_as_clusters_and_highlights_the_critical_path():
    graph = prod_graph(2)
    dot = graph.to_dot(graph.deploy_path())
    assert dot.startswith("digraph")
    for component in ("tpu-slices (TpuSlicePools)", "gke (GkeCluster)", "network (ClusterNetwork)"):
        assert f'label="{component}"' in dot
    assert dot.count("subgraph") == sum(1 for n in graph.nodes.values() if not n.custom)
    assert 'penwidth=2' in dot

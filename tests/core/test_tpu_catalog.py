"""Property-style checks over every row and topology of the TPU catalog."""
import pytest

from core.tpu_catalog import CATALOG, CatalogError, chips_in, slice_shape

ALL_SHAPES = [
    (gen.name, topology, machine.name)
    for gen in CATALOG.values()
    for machine in gen.machine_types
    for topology in machine.single_host_topologies + (gen.multi_host_topologies if machine.multi_host else ())
]


@pytest.mark.parametrize("generation,topology,machine", ALL_SHAPES)
def test_every_shape_divides_into_whole_hosts(generation, topology, machine):
    shape = slice_shape(generation, topology, machine)
    assert shape.hosts * shape.chips_per_host == shape.chips == chips_in(topology)
    assert shape.hosts >= 1
    # Single-host topologies fit on one VM; multi-host ones need more than one.
    single = topology in shape.machine.single_host_topologies
    assert shape.multi_host is not single
    assert len(topology.split("x")) == shape.generation.dimensions


@pytest.mark.parametrize("generation", sorted(CATALOG))
def test_default_machine_for_multi_host_topologies_is_the_multi_host_type(generation):
    gen = CATALOG[generation]
    assert sum(m.multi_host for m in gen.machine_types) == 1
    for topology in gen.multi_host_topologies:
        assert slice_shape(generation, topology).machine is gen.multi_host_machine


def test_seed_slice_v6e_4x4_is_four_hosts_of_four_chips():
    shape = slice_shape("v6e", "4x4")
    assert (shape.machine.name, shape.hosts, shape.chips_per_host, shape.chips) == ("ct6e-standard-4t", 4, 4, 16)
    assert shape.pod_type == "v6e-16"
    assert shape.generation.accelerator_label == "tpu-v6e-slice"
    assert shape.hbm_gib == 16 * 32


def test_v6e_2x4_is_two_hosts_by_default_and_one_on_the_8_chip_machine():
    assert slice_shape("v6e", "2x4").hosts == 2
    assert slice_shape("v6e", "2x4", "ct6e-standard-8t").hosts == 1


@pytest.mark.parametrize("generation,topology,machine,key", [
    ("v7", "4x4", None, "tpuGeneration"),
    ("v6e", "4x5", None, "tpuTopology"),
    ("v6e", "2x2x2", None, "tpuTopology"),
    ("v5p", "4x4", None, "tpuTopology"),
    ("v6e", "4x4", "ct6e-standard-8t", "tpuTopology"),
    ("v6e", "4x4", "ct5lp-hightpu-4t", "tpuMachineType"),
])
def test_invalid_shapes_name_the_key(generation, topology, machine, key):
    with pytest.raises(CatalogError) as error:
        slice_shape(generation, topology, machine)
    assert error.value.key == key and error.value.allowed


def test_chips_in_rejects_non_topologies():
    for bad in ("4", "4x", "x4", "0x4", "4x4x4x4", "axb"):
        with pytest.raises(ValueError):
            chips_in(bad)


@pytest.mark.parametrize("generation,topology,machine", ALL_SHAPES)
def test_pod_type_and_accelerator_type_are_the_ones_ray_uses(generation, topology, machine):
    """Ray places multislice workers by `ray.io/tpu-pod-type` and `TPU-<pod type>-head`: names must agree."""
    from ray._private.accelerators.tpu import infer_tpu_pod_type_from_topology
    from ray.util import accelerators

    shape = slice_shape(generation, topology, machine)
    ray_type = shape.generation.ray_accelerator_type
    assert ray_type in vars(accelerators).values()
    assert shape.pod_type == infer_tpu_pod_type_from_topology(topology, ray_type)


@pytest.mark.parametrize("generation, devices_per_chip", [
    ("v4", 1), ("v5e", 1), ("v5p", 1), ("v6e", 1), ("tpu7x", 2)])
def test_jax_devices_per_chip_follow_maxtext(generation, devices_per_chip):
    """JAX devices per chip as MaxText's src/maxtext/utils/accelerator_to_spec_map.py (AI-Hypercomputer/maxtext
    @e591f30c) records them: "tpu7x: two cores per chip" (tpu7x-8 = 2x2x1, 4 chips, 8 devices_per_slice), while
    v4-16 and v5p-16 (2x2x2, 8 chips, "megacore") have 8 devices: one per chip."""
    gen = CATALOG[generation]
    assert gen.devices_per_chip == devices_per_chip
    shape = slice_shape(generation, gen.multi_host_topologies[0])
    assert shape.devices == shape.chips * devices_per_chip
    assert shape.devices_per_host == shape.chips_per_host * devices_per_chip


def test_tpu7x_2x2x1_is_maxtexts_tpu7x_8():
    """MaxText accelerator_to_spec_map.py @e591f30c: "tpu7x-8": topology tpu7x:2x2x1, devices_per_slice 8."""
    assert slice_shape("tpu7x", "2x2x1").devices == 8

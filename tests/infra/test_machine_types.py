"""systemPoolMachineType must name a whole Compute Engine machine type.

Sources: Compute Engine "Machine families resource and comparison guide"
(https://cloud.google.com/compute/docs/machine-resource: a predefined type is SERIES-TYPE-VCPUS, e.g. c3-standard-8),
general-purpose shared-core types (https://cloud.google.com/compute/docs/general-purpose-machines: e2-micro, e2-small,
e2-medium), custom types (https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type:
SERIES-custom-VCPUS-MEMORY, N1 as custom-VCPUS-MEMORY).
"""
from __future__ import annotations

import pytest

from infra.config import ConfigError, build
from tests.conftest import MINIMAL


@pytest.mark.parametrize("machine", ["e2-standard", "n2-highmem", "e2", "e2-standard-x", "n2-standard-8-",
                                     "ct6e-standard-4t", "n2-custom-8"])
def test_a_family_without_a_size_is_refused_in_one_line(machine):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, "systemPoolMachineType": machine})
    [problem] = error.value.problems
    assert problem.startswith(f"tpu-multislice:systemPoolMachineType={machine!r} is not valid;")
    assert "SERIES-TYPE-VCPUS" in problem


@pytest.mark.parametrize("machine", ["e2-standard-16", "n2-standard-64", "n2d-highmem-96", "c3-standard-8-lssd",
                                     "c3-highcpu-192-metal", "e2-medium", "n2-custom-8-16384", "custom-4-16384",
                                     "n2-custom-8-16384-ext", "c4a-standard-72"])
def test_real_machine_types_are_accepted(machine):
    assert build({**MINIMAL, "systemPoolMachineType": machine}).cluster.system_pool_machine_type == machine

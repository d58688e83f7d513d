"""`ray start` that keeps a node on 127.0.0.1 (used by trainer.local.cluster for every fake TPU host).

Ray replaces an explicit `--node-ip-address=127.0.0.1` with the machine's routable address (by design, so
real clusters are reachable). The local cluster must stay on loopback: nothing but this machine may talk to
it. Ray reads its own IP through `ray._private.services.get_node_ip_address`; pinning that one function for
the `ray start` process is enough, because the raylet, agents and workers it launches receive the node IP as
an argument. Drivers get the same effect from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (Ray's single-machine mode).

Usage: python -m trainer.local.ray_loopback start --block ...   (same arguments as `ray start`)
"""
import sys

import ray._private.services as services

LOOPBACK = "127.0.0.1"


def _loopback_ip(address=None):
    return LOOPBACK


if __name__ == "__main__":
    services.get_node_ip_address = _loopback_ip
    from ray.scripts.scripts import main

    sys.argv[0] = "ray"
    sys.exit(main())

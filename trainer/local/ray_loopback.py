"""`ray start` that keeps a node on 127.0.0.1 (used by trainer.local.cluster for every fake TPU host).

Ray replaces an explicit `--node-ip-address=127.0.0.1` with the machine's routable address (by design, so
real clusters are reachable). The local cluster must stay on loopback: nothing but this machine may talk to
it. Ray reads its own IP through `ray._private.services.get_node_ip_address`; pinning that one function for
the `ray start` process is enough, because the raylet, agents and workers it launches receive the node IP as
an argument. Drivers get the same effect from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (Ray's single-machine mode).

The node's log monitor is trainer.local.paced_log_monitor (Ray's, with its idle passes paced for five nodes on
one machine): `ray start` builds the log monitor's command in `services.start_log_monitor` and hands it to
`services.start_ray_process`; for that one call the script is swapped for the module (`paced_log_monitor_command`).

Usage: python -m trainer.local.ray_loopback start --block ...   (same arguments as `ray start`)
"""
import sys

import ray._private.services as services

LOOPBACK = "127.0.0.1"
PACED_LOG_MONITOR = "trainer.local.paced_log_monitor"


def _loopback_ip(address=None):
    return LOOPBACK


def paced_log_monitor_command(command: list[str]) -> list[str]:
    """Ray's log monitor command (`python -u .../ray/_private/log_monitor.py ARGS`) with the paced module in place
    of the script; any other command unchanged."""
    if len(command) > 2 and command[1] == "-u" and command[2].endswith("/log_monitor.py"):
        return [command[0], "-u", "-m", PACED_LOG_MONITOR, *command[3:]]
    return command


def _start_paced_log_monitor(start_log_monitor):
    def start(*args, **kwargs):
        launch = services.start_ray_process

        def launch_paced(command, *launch_args, **launch_kwargs):
            return launch(paced_log_monitor_command(command), *launch_args, **launch_kwargs)

        services.start_ray_process = launch_paced
        try:
            return start_log_monitor(*args, **kwargs)
        finally:
            services.start_ray_process = launch

    return start


if __name__ == "__main__":
    services.get_node_ip_address = _loopback_ip
    services.start_log_monitor = _start_paced_log_monitor(services.start_log_monitor)
    from ray.scripts.scripts import main

    sys.argv[0] = "ray"
    sys.exit(main())

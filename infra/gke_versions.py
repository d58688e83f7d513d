"""What GKE offers in the cluster's location, checked against the stack's version floors before anything is
created.

The provider creates a cluster at exactly `min_master_version` (terraform-provider-google
`resource_container_cluster.go`: `InitialClusterVersion: d.Get("min_master_version")`), and GKE refuses a version
it no longer offers ("Master version must be one of ... supported versions",
terraform-google-kubernetes-engine#2177). So the stack leaves the version to the release channel, whose default
GKE picks for an empty initial version, and checks here that this default, or the user's gkeVersion, is offered
and meets every floor. Field meanings: terraform-provider-google
`data_source_google_container_engine_versions.go` (release_channel_default_version is per channel and not
filtered by a prefix; valid_master_versions lists what the location offers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from infra import versions
from infra.config import NAMESPACE, ClusterSettings

# A cluster without a release channel is created at the location's default version.
NO_CHANNEL = "UNSPECIFIED"


@dataclass(frozen=True)
class OfferedVersions:
    """The part of `gcp.container.get_engine_versions` the check needs."""
    default_cluster_version: str
    channel_defaults: Mapping[str, str]
    valid_master_versions: Sequence[str]
    # The newest version each release channel offers (the provider's release_channel_latest_version: the first of
    # the channel's validVersions). A channel offers nothing newer; its oldest offered version is not exposed.
    channel_latest: Mapping[str, str] = field(default_factory=dict)

    def creation_version(self, channel: str) -> str:
        """What GKE creates a cluster at when no version is asked for."""
        if channel == NO_CHANNEL:
            return self.default_cluster_version
        return self.channel_defaults.get(channel, self.default_cluster_version)


def fetch_offered(project: str, location: str) -> OfferedVersions:
    """One invoke at program start, before any resource is registered (blocking on purpose)."""
    import pulumi_gcp as gcp

    result = gcp.container.get_engine_versions(project=project, location=location)
    return OfferedVersions(default_cluster_version=result.default_cluster_version,
                           channel_defaults=dict(result.release_channel_default_version or {}),
                           valid_master_versions=list(result.valid_master_versions or []),
                           channel_latest=dict(result.release_channel_latest_version or {}))


def _matches(requested: str, offered: str) -> bool:
    """A full version must be offered as is; a prefix like 1.35 matches any offered 1.35.x."""
    if requested == offered:
        return True
    given, candidate = versions.parse(requested), versions.parse(offered)
    return len(given) < 4 and candidate[:len(given)] == given


def check_offered(cluster: ClusterSettings, location: str, offered: OfferedVersions) -> list[str]:
    """One line per problem, naming the key the user set (or the channel whose default is too old)."""
    floors = dict(cluster.version_floors)
    if cluster.gke_version is not None:
        # A cluster in a release channel is created only at a version that channel offers (GKE "About release
        # channels": "you can only select versions available in the channel"), not at any version of the location.
        channel = cluster.release_channel
        latest = offered.channel_latest.get(channel) if channel != NO_CHANNEL else None
        candidates = [v for v in offered.valid_master_versions
                      if latest is None or versions.parse(v) <= versions.parse(latest)]
        if not any(_matches(cluster.gke_version, version) for version in candidates):
            where = f"the {channel} channel in {location}" if latest else location
            newest = ", ".join(candidates[:5]) or "nothing"
            return [f"{NAMESPACE}:gkeVersion={cluster.gke_version!r} is not offered in {where}; it offers "
                    f"{newest}{', ...' if len(candidates) > 5 else ''} (or unset gkeVersion to use the {channel} "
                    "channel's default, or choose the releaseChannel that offers it)"]
        return []
    created = offered.creation_version(cluster.release_channel)
    below = {reason: floor for reason, floor in floors.items() if not versions.satisfies(created, floor)}
    if not below:
        return []
    needed = versions.highest(list(below.values()))
    fits = [v for v in offered.valid_master_versions if versions.satisfies(v, needed)]
    channels = sorted(channel for channel, default in offered.channel_defaults.items()
                      if versions.satisfies(default, needed))
    reasons = ", ".join(f"{reason} needs {floor}" for reason, floor in below.items())
    hint = (f"use releaseChannel {' or '.join(channels)}" if channels else "") + (
        f"{' or ' if channels else ''}set gkeVersion to an offered version such as {fits[0]}" if fits else "")
    return [f"{NAMESPACE}:releaseChannel={cluster.release_channel!r} creates clusters at {created} in {location}, "
            f"below what the stack needs ({reasons}); {hint or 'no offered version is recent enough'}"]

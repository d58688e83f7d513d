"""Checks of one key's value on its own. Each returns None when the value is fine, else what is allowed.

The schema attaches them beside each key; rules that relate two or more keys live in rules.py.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from core.maxtext_facts import MIN_MAXTEXT, release_tuple
from infra import naming
from infra.config import tpu_zones

Check = Callable[[Any], "str | None"]


def at_least(minimum: int, allowed: str | None = None) -> Check:
    def check(value: int) -> str | None:
        return None if value >= minimum else (allowed or f"at least {minimum}")
    return check


def within(minimum: int, maximum: int, allowed: str) -> Check:
    def check(value: int) -> str | None:
        return None if minimum <= value <= maximum else allowed
    return check


def matches(pattern: re.Pattern, allowed: str) -> Check:
    def check(value: str) -> str | None:
        return None if pattern.match(value) else allowed
    return check


def dns1035(limit: int) -> Check:
    def check(value: str) -> str | None:
        if naming.DNS1035_LABEL.match(value) and len(value) <= limit:
            return None
        return (f"a DNS-1035 label of at most {limit} characters (lowercase letters, digits, '-', starting with a "
                "letter)")
    return check


def pinned_image(example: str) -> Check:
    """Images must be pinned: a release tag or a digest, never latest/nightly."""
    def check(value: str) -> str | None:
        tag = naming.image_tag(value)
        if "@sha256:" in value or (tag and tag != "latest" and "nightly" not in tag):
            return None
        return f"a pinned tag or digest (not latest or nightly), e.g. {example}"
    return check


def maxtext_release(value: str) -> str | None:
    version = release_tuple(value)
    if version is not None and version >= MIN_MAXTEXT:
        return None
    return "a release X.Y.Z of at least 0.2.2 (older releases silently train the wrong model)"


def positive_number(value: str) -> str | None:
    try:
        return None if float(value) > 0 else "a positive number"
    except ValueError:
        return "a positive number"


def soft_delete_days(value: int) -> str | None:
    return None if value == 0 or 7 <= value <= 90 else "0 (off) or 7-90 days"


def mtu(value: int) -> str | None:
    return None if 1300 <= value <= 8896 else "a VPC MTU is 1300-8896"


def bucket_name(value: str) -> str | None:
    return naming.bucket_problem(value)


def reservation_name(value: str) -> str | None:
    """Empty (no reservation) or a reservation GKE can consume (naming.RESERVATION)."""
    if value == "" or naming.RESERVATION.match(value):
        return None
    return ("a reservation name (RFC 1035: 1-63 lowercase letters, digits or '-', starting with a letter), "
            "projects/PROJECT/reservations/NAME for a shared reservation, or NAME/reservationBlocks/BLOCK")


def machine_type(example: str) -> Check:
    def check(value: str) -> str | None:
        if naming.MACHINE_TYPE.match(value):
            return None
        return f"a Compute Engine machine type name: lowercase letters, digits and '-', e.g. {example}"
    return check


def cpu_machine_type(value: str) -> str | None:
    """A whole Compute Engine CPU machine type (naming.CPU_MACHINE_TYPE), not just its family and type."""
    if naming.CPU_MACHINE_TYPE.match(value):
        return None
    return ("a Compute Engine CPU machine type SERIES-TYPE-VCPUS, e.g. e2-standard-16 or n2-highmem-8 (also e2-medium, "
            "n2-custom-8-16384)")


def bucket_location(value: str) -> str | None:
    """A Cloud Storage location (tpu_zones.py): a region, a predefined dual-region or a multi-region; never a zone."""
    if tpu_zones.is_gcs_location(value):
        return None
    if naming.ZONE.match(value.lower()):
        return (f"a bucket location is a region (here {naming.region_of(value.lower())}), a dual-region (e.g. NAM4) "
                "or a multi-region (US, EU, ASIA), not a zone (Cloud Storage locations)")
    return ("a Cloud Storage location: a region such as us-east5, a dual-region (ASIA1, EUR4, EUR5, EUR7, EUR8, "
            "NAM4) or a multi-region (US, EU, ASIA)")

"""Checks of one key's value on its own. Each returns None when the value is fine, else what is allowed.

The schema attaches them beside each key; rules that relate two or more keys live in rules.py.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from core.maxtext_facts import MIN_MAXTEXT, release_tuple
from infra import naming

Check = Callable[[Any], "str | None"]


def at_least(minimum: int, allowed: str | None = None) -> Check:
    def check(value: int) -> str | None:
        return None if value >= minimum else (allowed or f"at least {minimum}")
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

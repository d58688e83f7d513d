"""Checks of one key's value on its own. Each returns None when the value is fine, else what is allowed.

The schema attaches them beside each key; rules that relate two or more keys live in rules.py and the
*_rules.py modules beside it.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from core.data import format_named_by
from core.maxtext_facts import MIN_MAXTEXT, release_tuple
from infra import naming
from infra.config import tpu_zones
from infra.config.data_globs import glob_problem

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


# ---- training data and weights (gs:// paths) -------------------------------------------------------------

def split_gs_path(value: str) -> tuple[str, str] | None:
    """(bucket, object path) of gs://BUCKET/PATH, or None when the value is not one."""
    if not value.startswith("gs://"):
        return None
    bucket, _, path = value[len("gs://"):].partition("/")
    return bucket, path


# Cloud Storage bucket names ("Bucket naming"): lowercase letters, digits, '-', '_' and '.', starting and ending
# with a letter or digit, 3-63 characters (up to 222 with dots). Buckets the run only reads may have dots; the
# stack's own bucket may not (naming.bucket_problem).
_READ_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def _gs_problem(value: str, what: str, example: str) -> str | None:
    """What is wrong with a gs:// path the pods read, or None. Local and other schemes are refused: the TPU VMs
    see neither the deployer's disk nor another cloud, and the pods read Cloud Storage only."""
    parts = split_gs_path(value)
    if parts is None:
        where = ("a local path names a file on this machine, which the TPU VMs never see"
                 if "://" not in value else f"{value.split('://', 1)[0]}:// is not read by the pods")
        return f"{what} as gs://BUCKET/PATH ({where}; copy it to Cloud Storage), e.g. {example}"
    bucket, path = parts
    if not _READ_BUCKET.match(bucket) or ".." in bucket:
        return (f"{what} as gs://BUCKET/PATH, and {bucket!r} is not a bucket name (3-63 lowercase letters, digits, "
                f"'-', '_' or '.', starting and ending with a letter or digit); e.g. {example}")
    if not path.strip("/"):
        return f"{what} as gs://BUCKET/PATH with a path inside the bucket, e.g. {example}"
    return None


# File name parts that say the format MaxText's Grain pipeline reads (core/data.py DATASET_FORMATS).
_DATA_EXAMPLE = "gs://my-data/c4/train-*.array_record or gs://my-data/text/*.parquet"


def data_pattern(value: str) -> str | None:
    """A gs:// glob of ArrayRecord or Parquet files, one pattern (MaxText's ';' mixtures are not offered)."""
    if value == "":
        return None
    problem = _gs_problem(value, "a Cloud Storage glob of ArrayRecord or Parquet files", _DATA_EXAMPLE)
    if problem is not None:
        return problem
    if ";" in value or "," in value:
        return f"one file pattern (MaxText's weighted mixtures 'a,0.3;b,0.7' are not offered), e.g. {_DATA_EXAMPLE}"
    if value.endswith("/"):
        return f"a pattern of files, not a folder: add the file names, e.g. {_DATA_EXAMPLE}"
    if format_named_by(value) is None:
        return ("file names that say their format: *.array_record or *.arrayrecord (ArrayRecord, also with "
                "shard suffixes such as .array_record-00000-of-00064) or *.parquet, e.g. " + _DATA_EXAMPLE)
    glob = glob_problem(split_gs_path(value)[1])
    if glob is not None:
        # The look-up before `pulumi up` and MaxText on the cluster must read the same files (data_globs.py).
        return f"a glob the look-up and MaxText read alike, not one with {glob}"
    return None


def checkpoint_path(value: str) -> str | None:
    """A gs:// Orbax checkpoint directory (no glob): MaxText load_parameters_path."""
    if value == "":
        return None
    example = "gs://my-weights/llama3-8b/0/items"
    problem = _gs_problem(value, "an Orbax checkpoint directory", example)
    if problem is not None:
        return problem
    if any(char in value for char in "*?["):
        return f"one checkpoint directory, not a pattern, e.g. {example}"
    return None


def run_name(limit: int) -> Check:
    """A run's name: a directory under the bucket's maxtext/ and a Kubernetes name, so DNS-1035 (dns1035's rule,
    with a message that says what the name is for)."""
    label = dns1035(limit)

    def check(value: str) -> str | None:
        if label(value) is None:
            return None
        return (f"a run name of at most {limit} characters: lowercase letters, digits and '-', starting with a "
                "letter (it names the run's folder in the bucket and its job), e.g. llama3-8b-c4-v1")
    return check

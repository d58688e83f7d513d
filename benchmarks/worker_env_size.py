"""How many bytes a cluster worker downloads to install worker_env/requirements.lock.

For each pin in the lock, reads the package's file list from the index's Simple API in its JSON form
(PEP 691; PEP 700 adds each file's size) and picks, among that version's files, the wheel an installer
would take on the cluster: CPython 3.12 on
manylinux_2_31 x86_64 (rayproject/ray:2.60.0-py312 on TPU VMs), best-ranked compatible tag first, the
way pip and uv rank them. Prints the 15 largest packages, the total, and the download time per host at
a few link speeds. The chosen file's sha256 is checked against the lock's hashes, so a mismatch between
what this script measures and what the lock installs shows up.

    python benchmarks/worker_env_size.py [--lock worker_env/requirements.lock] [--jobs 8] [--json out.json]
                                         [--index-url URL]  (default: $UV_INDEX_URL, $PIP_INDEX_URL, PyPI)

The Simple API is what pip and uv read themselves. (PyPI's per-release JSON API,
/pypi/<name>/<version>/json, would do as well, but is not reachable from every network that reaches the
index: from our dev machines it answers 404.) Needs network access to the index; ~250 requests.

Download time is bytes / link rate: it ignores per-request latency and the index's own throughput, so it
is a floor for a cold install (an image with the lock baked in downloads nothing at pod start).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from packaging import tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _pip_default_index() -> str:
    from pip._internal.models.index import PyPI
    return PyPI.simple_url.rstrip("/")

# pip's own default index (the one uv and pip resolve against unless configured otherwise).
DEFAULT_INDEX = _pip_default_index()
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PYTHON = (3, 12)
GLIBC_MINOR = 31  # manylinux_2_31: what libtpu requires and what uv was told (--python-platform)
LINK_RATES = (  # label, bytes per second
    ("100 MB/s", 100e6),
    ("1 Gb/s", 125e6),
    ("10 Gb/s", 1250e6),
)

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def cluster_platforms() -> list[str]:
    """manylinux platform tags a glibc-2.31 x86_64 host accepts, most specific first.

    Legacy aliases sit where their glibc is: manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5.
    Plain linux_x86_64 is not installable from an index, so it is not listed.
    """
    aliases = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    platforms = []
    for minor in range(GLIBC_MINOR, 4, -1):
        platforms.append(f"manylinux_2_{minor}_x86_64")
        if minor in aliases:
            platforms.append(aliases[minor])
    return platforms


def supported_tags() -> dict[tags.Tag, int]:
    """Tag -> rank (0 is best) for CPython 3.12 on the cluster platform, in installer preference order."""
    platforms = cluster_platforms()
    ordered = list(tags.cpython_tags(PYTHON, abis=["cp312"], platforms=platforms))
    ordered += list(tags.compatible_tags(PYTHON, "cp312", platforms))
    return {tag: rank for rank, tag in reversed(list(enumerate(ordered)))}


def read_lock(path: Path) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, sha256 hashes) from a `uv pip compile --generate-hashes` file."""
    pins: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = match.group(1)
            pins[current] = (match.group(2), set())
        elif current and "--hash=" in line:
            pins[current][1].update(_HASH.findall(line))
    return pins


def fetch_files(index: str, name: str, version: str, attempts: int = 3) -> list[dict]:
    """The index's files of `name` at exactly `version` (Simple API JSON; `size` needs API version >= 1.1)."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    request = urllib.request.Request(url, headers={"Accept": SIMPLE_JSON})
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                page = json.load(response)
            break
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == attempts:  # 404 and friends will not get better
                raise RuntimeError(f"{url}: {exc}") from exc
        except (urllib.error.URLError, TimeoutError) as exc:
            if attempt == attempts:
                raise RuntimeError(f"{url}: {exc}") from exc
        time.sleep(2 * attempt)
    wanted = Version(version)
    files = []
    for info in page.get("files", []):
        filename = info["filename"]
        try:
            if filename.endswith(".whl"):
                file_version = parse_wheel_filename(filename)[1]
            else:
                file_version = parse_sdist_filename(filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue  # eggs, .exe installers and other legacy uploads
        if file_version == wanted:
            files.append(info)
    if files and "size" not in files[0]:
        raise RuntimeError(f"{url}: the index gives no file sizes (Simple API 1.1 / PEP 700 needed)")
    return files


def choose_file(files: list[dict], ranks: dict[tags.Tag, int]) -> tuple[dict | None, str]:
    """(file, kind): the best-ranked compatible wheel; else the sdist (the worker would build it)."""
    best, best_rank = None, None
    for info in files:
        if info.get("yanked") or not info["filename"].endswith(".whl"):
            continue
        _, _, _, wheel_tags = parse_wheel_filename(info["filename"])
        rank = min((ranks[t] for t in wheel_tags if t in ranks), default=None)
        if rank is not None and (best_rank is None or rank < best_rank):
            best, best_rank = info, rank
    if best is not None:
        return best, "wheel"
    sdists = [f for f in files if not f["filename"].endswith(".whl") and not f.get("yanked")]
    return (sdists[0], "sdist") if sdists else (None, "none")


def measure(index: str, name: str, version: str, hashes: set[str], ranks: dict[tags.Tag, int]) -> dict:
    chosen, kind = choose_file(fetch_files(index, name, version), ranks)
    row = {"name": name, "version": version, "kind": kind, "bytes": 0, "filename": None, "hash_in_lock": None}
    if chosen is not None:
        row.update(bytes=int(chosen["size"]), filename=chosen["filename"])
        if hashes:
            row["hash_in_lock"] = chosen["hashes"].get("sha256") in hashes
    return row


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=REPO / "worker_env" / "requirements.lock")
    parser.add_argument("--jobs", type=int, default=8, help="concurrent index requests")
    parser.add_argument("--json", type=Path, help="also write every row and the totals here")
    parser.add_argument(
        "--index-url",
        default=os.environ.get("UV_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX,
        help="Simple API root of the index the lock was resolved against",
    )
    args = parser.parse_args(argv)

    pins = read_lock(args.lock)
    ranks = supported_tags()
    print(f"{len(pins)} pins in {args.lock}; querying {args.index_url} with {args.jobs} threads ...", flush=True)
    start = time.monotonic()
    rows = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(measure, args.index_url, n, v, h, ranks): n for n, (v, h) in pins.items()}
        for done, future in enumerate(as_completed(futures), 1):
            rows.append(future.result())
            if done % 25 == 0 or done == len(futures):
                print(f"  {done}/{len(futures)} queried ({time.monotonic() - start:.1f} s)", flush=True)

    rows.sort(key=lambda r: r["bytes"], reverse=True)
    total = sum(r["bytes"] for r in rows)
    print(f"\nTop 15 of {len(rows)} packages by download size (CPython 3.12, manylinux_2_31 x86_64):")
    print(f"{'package':<28} {'version':<14} {'size':>11} {'share':>6}  file")
    for r in rows[:15]:
        print(f"{r['name']:<28} {r['version']:<14} {human(r['bytes']):>11} {r['bytes'] / total:>6.1%}  {r['filename']}")
    print(f"{'total':<28} {'':<14} {human(total):>11} ({total:,} bytes)")
    for label, rate in LINK_RATES:
        print(f"  download per host at {label:<8}: {total / rate:6.1f} s")

    sdists = [r["name"] for r in rows if r["kind"] == "sdist"]
    missing = [r["name"] for r in rows if r["kind"] == "none"]
    mismatched = [r["name"] for r in rows if r["hash_in_lock"] is False]
    print(f"\nbuilt from sdist on the worker (no compatible wheel): {sdists or 'none'}")
    if missing:
        print(f"NO installable file: {missing}")
    print(f"chosen file's sha256 not among the lock's hashes: {mismatched or 'none'}")

    if args.json:
        args.json.write_text(json.dumps({"total_bytes": total, "packages": len(rows), "rows": rows}, indent=1))
    return 1 if missing or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())

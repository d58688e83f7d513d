#!/usr/bin/env bash
# Regenerate (or, with --check, verify) worker_env/requirements.lock, the locked Python environment of the
# cluster's Ray workers: CPython 3.12 on linux x86_64 (rayproject/ray:2.60.0-py312 on TPU VMs).
#
#   scripts/lock_worker_env.sh           re-resolve worker_env/requirements.in and rewrite the lock
#   scripts/lock_worker_env.sh --check   re-resolve into a temp file; exit 1 if the committed lock differs
#   scripts/lock_worker_env.sh --upgrade re-resolve ignoring the current pins (take newest allowed versions)
#
# The resolver is uv, pinned in requirements.txt; set UV=/path/to/uv to use another binary.
# Needs network access to the package index.
#
# Stable by design: the existing lock's pins are handed to uv as the output file, and uv keeps them as
# preferences. So a plain run or --check changes nothing unless requirements.in changed, a pin
# stopped resolving (e.g. yanked), or the pinned uv changed its output. New upstream releases alone do not
# make the lock stale; take them deliberately with --upgrade.
set -euo pipefail

cd "$(dirname "$0")/.."
UV="${UV:-.venv/bin/uv}"
IN=worker_env/requirements.in
LOCK=worker_env/requirements.lock

mode="write"
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  --upgrade) mode=upgrade ;;
  *) echo "usage: $0 [--check|--upgrade]" >&2; exit 2 ;;
esac

if ! [ -x "$UV" ] && ! command -v "$UV" >/dev/null 2>&1; then
  echo "uv not found at '$UV': pip install -r requirements.txt (it pins uv), or set UV=/path/to/uv" >&2
  exit 2
fi
uv_version="$("$UV" --version | awk '{print $2}')"

# The cluster's interpreter and platform, not this machine's: maxtext 0.2.5 and jax>=0.11.1 need
# Python >= 3.12, and libtpu publishes manylinux_2_31 x86_64 wheels only (2_28 does not resolve).
# --generate-hashes: the Dockerfile installs with hash checking, so a re-uploaded or tampered file fails.
# No --index-strategy (one index) and no --prerelease: uv's default already accepts a pre-release
# where a package has nothing else (opentelemetry-exporter-prometheus 0.x "b" versions, via ray[default]).
flags=(--python-version 3.12 --python-platform x86_64-manylinux_2_31 --generate-hashes --no-header)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
out="$tmp/requirements.lock"
if [ "$mode" != upgrade ] && [ -f "$LOCK" ]; then
  # Seed uv's preferences with the committed pins, versions only: uv reuses hashes it finds in an existing
  # output file, so copying the lock whole would let a hand-edited pin or hash pass --check unverified.
  grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*==' "$LOCK" | sed -E 's/[[:space:]]*\\$//' >"$out" || true
fi

echo "[lock_worker_env] resolving $IN with uv $uv_version for CPython 3.12 / manylinux_2_31 x86_64 ..." >&2
start=$SECONDS
if ! "$UV" pip compile "$IN" "${flags[@]}" --quiet -o "$out"; then
  echo "[lock_worker_env] resolution FAILED: $IN does not resolve for the cluster platform" >&2
  exit 2
fi
echo "[lock_worker_env] resolved in $((SECONDS - start)) s: $(grep -cE '^[A-Za-z0-9]' "$out") packages" >&2

# Our header instead of uv's (uv's names the temp output path). Part of the file, so a lock made by a
# different uv than the pinned one shows up as a difference under --check.
{
  echo "# Locked Python environment of the cluster's Ray workers (CPython 3.12, linux x86_64, TPU hosts)."
  echo "# Generated from $IN by uv $uv_version: do not edit; run scripts/lock_worker_env.sh to regenerate"
  echo "# (scripts/lock_worker_env.sh --check tells whether it is stale)."
  echo "#   uv pip compile $IN ${flags[*]}"
  echo "# Install with hashes and without re-resolving: see worker_env/Dockerfile."
  cat "$out"
} >"$tmp/with-header"

if [ "$mode" = check ]; then
  if [ ! -f "$LOCK" ]; then
    echo "[lock_worker_env] $LOCK is missing: run scripts/lock_worker_env.sh" >&2
    exit 1
  fi
  if diff -u "$LOCK" "$tmp/with-header" >"$tmp/diff"; then
    echo "[lock_worker_env] $LOCK is up to date" >&2
    exit 0
  fi
  echo "[lock_worker_env] $LOCK is STALE; run scripts/lock_worker_env.sh and commit the result. Diff (first 80 lines):" >&2
  head -n 80 "$tmp/diff" >&2
  exit 1
fi

mv "$tmp/with-header" "$LOCK"
echo "[lock_worker_env] wrote $LOCK" >&2

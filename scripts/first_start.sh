#!/usr/bin/env bash
# How long a newcomer waits: a fresh clone's `make run`, until the broker accepts connections.
#
#   scripts/first_start.sh [PORT]      (default 19092; REV=... clones another commit;
#                                       PIP_NO_CACHE_DIR=1 for a cold pip cache)
#
# Clones the checkout's HEAD (or REV) into a temporary directory, starts `make run
# LISTEN=127.0.0.1:PORT` there, polls a TCP connect every 0.1 s and prints the seconds from
# the start of make to the first connection; then stops the broker (SIGTERM to make's
# process group) and removes the clone. docs/BENCHMARKS.md, "First start", has the figures.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PORT=${1:-19092}
WORK=$(mktemp -d /tmp/minibroker-first-start.XXXXXX)
MAKE_PID=

cleanup() {
    if [ -n "$MAKE_PID" ] && kill -0 "$MAKE_PID" 2>/dev/null; then
        kill -TERM -- "-$MAKE_PID" 2>/dev/null || true
        wait "$MAKE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

git clone -q "$REPO" "$WORK/clone"
cd "$WORK/clone"
if [ -n "${REV:-}" ]; then git checkout -q "$REV"; fi

start=$(date +%s.%N)
# its own process group, so that stopping make stops the broker it started
setsid make run LISTEN="127.0.0.1:$PORT" >"$WORK/make.log" 2>&1 &
MAKE_PID=$!
until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
    if ! kill -0 "$MAKE_PID" 2>/dev/null; then
        echo "first_start: make run exited before listening; its log:" >&2
        tail -20 "$WORK/make.log" >&2
        exit 1
    fi
    sleep 0.1
done
end=$(date +%s.%N)
printf 'make run on a fresh clone: listening after %.1f s (%s)\n' \
    "$(echo "$end - $start" | bc)" "$(git log -1 --format=%h)"

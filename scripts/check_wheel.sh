#!/usr/bin/env bash
# Does the wheel work outside the checkout?
#
#   scripts/check_wheel.sh            (PYTHON=... picks an interpreter that has `build`;
#                                      KEEP=1 keeps the work directory)
#
# Builds the sdist and, from it, the wheel (`python -m build`) from a copy of the checkout's
# tracked files, installs the wheel into a fresh venv in a temporary directory, and then,
# with the working directory there and no PYTHONPATH, so that nothing can be read relative
# to the repository:
#   1. checks that every package is imported from the venv, package data included;
#   2. `minibroker analyze` without the spark extra: one line naming it, exit status 2;
#   3. `minibroker serve`: a broker that answers `minibroker topics create/list`,
#      `minibroker produce` and `minibroker consume`, and stops cleanly on SIGTERM;
#   4. installs the spark extra and runs `minibroker analyze` over that broker's data
#      directory: exit status 0 and a report.html.
# Dependencies come from PyPI (or pip's cache). Needs Java for step 4, as analyze does.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/minibroker-wheel.XXXXXX)
BROKER_PID=

cleanup() {
    if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { echo "check_wheel: FAILED: $*" >&2; exit 1; }

step "build (sdist, then the wheel from it) from the tracked files"
mkdir "$WORK/src"
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 tar -cf - --) | tar -xf - -C "$WORK/src"
"$PYTHON" -m build --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 \
    || { tail -20 "$WORK/build.log"; fail "python -m build"; }
WHEEL=$(ls "$WORK"/dist/*.whl)
echo "$(basename "$WHEEL")"

step "install into a fresh venv (no extras)"
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$WORK/venv/bin/pip" install -q "$WHEEL"
cd "$WORK"
unset PYTHONPATH

step "every package comes from the venv, with its package data"
"$VPY" - "$WORK/venv" <<'EOF'
import importlib, pathlib, sys
venv = pathlib.Path(sys.argv[1]).resolve()
for name in ["protocol", "broker", "client", "tools", "bench", "spark_jobs", "cli", "harness", "sim"]:
    path = pathlib.Path(importlib.import_module(name).__file__).resolve()
    assert venv in path.parents, f"{name} imported from {path}, not from the venv"
import spark_jobs
assert (pathlib.Path(spark_jobs.__file__).parent / "log4j2.properties").is_file()
print("ok")
EOF

step "analyze without the spark extra: one line, exit 2"
set +e
OUT=$("$WORK/venv/bin/minibroker" analyze --data-dir "$WORK" --out "$WORK/none" 2>&1)
RC=$?
set -e
echo "$OUT"
[ "$RC" -eq 2 ] || fail "analyze without extras exited $RC, expected 2"
[ "$(printf '%s\n' "$OUT" | wc -l)" -eq 1 ] || fail "analyze without extras printed more than one line"
case "$OUT" in *"pip install 'minibroker[spark]'"*) ;; *) fail "the line does not name the spark extra";; esac

step "serve, and talk to it with the tools"
PORT=$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
B="--bootstrap-server 127.0.0.1:$PORT"
"$WORK/venv/bin/minibroker" serve --broker-id 0 --listen "127.0.0.1:$PORT" \
    --data-dir "$WORK/data" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 200); do
    if "$VPY" -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null; then
        break
    fi
    kill -0 "$BROKER_PID" 2>/dev/null || { cat "$WORK/broker.log"; fail "the broker exited"; }
    sleep 0.1
done
MB="$WORK/venv/bin/minibroker"
$MB topics create wheel-check --partitions 2 --config retention.ms=3600000 $B
$MB topics list $B | grep -qx wheel-check || fail "topics list does not show wheel-check"
printf 'k1:one\nk2:two\nk3:three\n' | $MB produce wheel-check $B --key-separator :
GOT=$($MB consume wheel-check $B --from-beginning --max-messages 3 --timeout-ms 10000 \
      --group wheel-group 2>/dev/null | sort | tr '\n' ' ')
[ "$GOT" = "one three two " ] || fail "consume read '$GOT'"
echo "produced and consumed 3 records"
kill -TERM "$BROKER_PID"
wait "$BROKER_PID" || fail "the broker did not stop cleanly on SIGTERM (see $WORK/broker.log)"
BROKER_PID=

step "install the spark extra, analyze the broker's data directory"
"$WORK/venv/bin/pip" install -q "${WHEEL}[spark]"
"$MB" analyze --data-dir "$WORK/data" --out "$WORK/analysis"
[ -s "$WORK/analysis/report.html" ] || fail "analyze wrote no report.html"

step "ok: the wheel works from $WORK, outside the checkout"

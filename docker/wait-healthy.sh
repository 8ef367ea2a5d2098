#!/usr/bin/env bash
# Wait until every service's container of the compose project is healthy (registered and unfenced:
# docker/healthcheck.py), or fail after a deadline showing each one's state and last logs.
# docker-compose 1.29 has no `up --wait`, so this is the one way for both it and v2.
#
#   docker/wait-healthy.sh TIMEOUT_S SERVICE...     (COMPOSE="docker compose" for v2)
set -euo pipefail

compose=${COMPOSE:-docker-compose}
# containers are found by the labels compose puts on them: docker ps answers in a few
# milliseconds, docker-compose 1.29 (Python) takes about a second per call
project=${COMPOSE_PROJECT_NAME:-$(sed -n 's/^COMPOSE_PROJECT_NAME=//p' .env 2>/dev/null)}
project=${project:-$(basename "$PWD")}
timeout_s=$1
shift
deadline=$((SECONDS + timeout_s))

status() {  # SERVICE -> health status of its container (or "absent")
    local id
    id=$(docker ps -aq --filter "label=com.docker.compose.project=$project" \
        --filter "label=com.docker.compose.service=$1")
    if [ -z "$id" ]; then
        echo absent
        return
    fi
    docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id"
}

while true; do
    waiting=()
    for service in "$@"; do
        state=$(status "$service")
        [ "$state" = healthy ] || waiting+=("$service:$state")
    done
    if [ ${#waiting[@]} -eq 0 ]; then
        echo "healthy: $*"
        exit 0
    fi
    if [ $SECONDS -ge $deadline ]; then
        echo "not healthy after ${timeout_s}s: ${waiting[*]}" >&2
        for service in "$@"; do
            $compose logs --tail=20 "$service" >&2 || true
        done
        exit 1
    fi
    sleep 1
done

#!/usr/bin/env bash
# Copy each broker's data directory out of the compose cluster, for `minibroker analyze`
# (`make cluster-data`, `make cluster-analyze`). From the service's container when there is
# one, running or stopped; after `make cluster-down` (which keeps the volumes) from the
# service's named volume, through a container created on it and never started. A copy of a
# running broker's directory is what a kill -9 would leave: the analysis reads it as the
# broker's own recovery would (a torn last batch is ignored).
#
#   docker/copy-data.sh DEST SERVICE...        -> DEST/SERVICE/ for each
set -euo pipefail

project=${COMPOSE_PROJECT_NAME:-$(sed -n 's/^COMPOSE_PROJECT_NAME=//p' .env 2>/dev/null)}
project=${project:-$(basename "$PWD")}
image=${MINIBROKER_IMAGE:-minibroker:latest}
data=/var/lib/minibroker/data
dest=$1
shift

mkdir -p "$dest"
for service in "$@"; do
    rm -rf "${dest:?}/$service"
    id=$(docker ps -aq --filter "label=com.docker.compose.project=$project" \
        --filter "label=com.docker.compose.service=$service" | head -n 1)
    scratch=
    if [ -z "$id" ]; then
        volume="${project}_${service}-data"
        if ! docker volume inspect "$volume" >/dev/null 2>&1; then
            echo "copy-data: no container and no volume $volume for $service" \
                "(run \`make cluster\` first)" >&2
            exit 1
        fi
        scratch=$(docker create -v "$volume:$data" "$image")
        id=$scratch
    fi
    docker cp "$id:$data" "$dest/$service"
    if [ -n "$scratch" ]; then
        docker rm "$scratch" >/dev/null
    fi
    echo "copy-data: $service -> $dest/$service ($(du -sh "$dest/$service" | cut -f1))"
done

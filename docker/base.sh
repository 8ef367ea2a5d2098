#!/usr/bin/env bash
# Build the base image without a registry: mmdebstrap writes a minimal Debian bookworm root
# file system with python3 and python3-venv, and `docker import` makes it an image.
#
#   docker/base.sh [IMAGE]        (default minibroker-base:bookworm; MIRROR=... to change)
#
# Documentation, man pages and locales are left out: the image only runs Python.
set -euo pipefail

image=${1:-minibroker-base:bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}

if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "docker/base.sh: mmdebstrap is missing (make sysdeps installs it)" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mmdebstrap --variant=minbase --include=python3,python3-venv \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --format=tar bookworm "$tmp/rootfs.tar" "$mirror"

docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    --message "minibroker base: Debian bookworm minbase with python3 and python3-venv (mmdebstrap)" \
    "$tmp/rootfs.tar" "$image"

#!/usr/bin/env python3
"""Fetch Compose v2 (`docker compose`) from Debian's archive, for checking docker-compose.yml
with both compose tools where only docker-compose 1.29 is installed (bookworm's):

    docker/compose-v2.py DOCKER_CONFIG_DIR      (`make compose-v2`)

Debian trixie packages Compose v2 as `docker-compose`; its .deb holds the docker CLI plugin.
This reads trixie's package index for the current file name, downloads that .deb over the
archive's own HTTP mirror (the Debian registry, reachable here) and extracts the plugin to
DOCKER_CONFIG_DIR/cli-plugins/docker-compose. `DOCKER_CONFIG=DOCKER_CONFIG_DIR docker compose`
then runs it, for that one command, without installing anything on the machine. A second run
with the plugin present does nothing.
"""

from __future__ import annotations

import lzma
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
INDEX = f"{MIRROR}/dists/trixie/main/binary-amd64/Packages.xz"
PLUGIN = "usr/libexec/docker/cli-plugins/docker-compose"


def package_file(index: bytes, package: str) -> str:
    """The archive path (`Filename:`) of `package` in a Packages index."""
    for stanza in lzma.decompress(index).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if fields.get("Package") == package:
            return fields["Filename"]
    raise SystemExit(f"compose-v2: no {package} package in {INDEX}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    target = Path(argv[0]) / "cli-plugins" / "docker-compose"
    if target.exists():
        return 0
    with urllib.request.urlopen(INDEX, timeout=60) as answer:
        filename = package_file(answer.read(), "docker-compose")
    with tempfile.TemporaryDirectory() as tmp:
        deb = Path(tmp) / "compose.deb"
        with urllib.request.urlopen(f"{MIRROR}/{filename}", timeout=120) as answer:
            deb.write_bytes(answer.read())
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / PLUGIN).rename(target)
    target.chmod(0o755)
    print(f"compose-v2: {filename} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Installs the Debian packages of deps.txt (uses sudo when not root).
set -euo pipefail
cd "$(dirname "$0")"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get install -y --no-install-recommends $(grep -v '^#' deps.txt)

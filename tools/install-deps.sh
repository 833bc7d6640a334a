#!/usr/bin/env bash
# Installs Strata's build and test dependencies from Debian 12 packages (idempotent).
# Runs apt-get through sudo when not root.
set -euo pipefail
packages=(
  build-essential cmake ninja-build meson pkg-config python3
  libeigen3-dev libvulkan-dev glslang-dev glslang-tools spirv-tools mesa-vulkan-drivers
  libsimdjson-dev libboost1.81-dev libboost-json1.81-dev doctest-dev libcli11-dev
  libpcre2-dev liburing-dev
  clang-14 libclang-rt-14-dev
  doxygen help2man  # API reference (Doxyfile, CI) and the apps' man pages (cmake/strata_man.cmake)
  nodejs npm curl  # strata-serve conformance scripts (tests/clients) and the CI smoke test
)
missing=()
for p in "${packages[@]}"; do
  # NodeSource's nodejs package bundles npm and conflicts with Debian's: take the command.
  [[ $p == npm ]] && command -v npm >/dev/null && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

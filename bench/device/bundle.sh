#!/usr/bin/env bash
# Here (the build machine): put what the H100 runs into .devbin/ (git-ignored through
# .git/info/exclude), so one device call carries it: the release binaries, every shared library
# they load that a bare Ubuntu host lacks, and a trimmed llama.cpp source for the side-by-side
# build there. The device's time is scarce (30 minutes a session): everything that can be done
# here is done here. Usage, from the repository root, after `cmake --build --preset release`:
#   bench/device/bundle.sh [LLAMA_CPP_GIT_DIR]
# LLAMA_CPP_GIT_DIR: a clone (or the search tool's mirror) of unslothai/llama.cpp; without it the
# bundle has no llama.cpp and device.sh skips the side-by-side half.
# Then see bench/device/README.md for the calls.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
for p in /.devbin/ /.gl/; do grep -qx "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
[ -d .gl ] || { echo "bundle: no .gl/ (run ../shared/tools/device-vulkan-prep.sh once)" >&2; exit 1; }
rm -rf .devbin && mkdir -p .devbin/bin .devbin/lib
# The binaries link glslang statically (~10 MB each): they travel as one xz archive (the carry
# limit counts bytes as they travel) and device.sh unpacks them into /tmp/strata-bin.
# BUNDLE_BINS (space-separated, e.g. "apps/strata-run bench/strata-bench") carries fewer: with
# llama.cpp's source beside the tracked tree (~56 MB) all eight exceed the 64 MiB carry limit.
default_bins="apps/strata-run apps/strata-mkmodel bench/strata-bench bench/batched_bench
      bench/vk_matvec_bench bench/vk_kv_attention_bench tests/vulkan_tests tests/runtime_tests"
read -r -a bins <<< "$(echo ${BUNDLE_BINS:-$default_bins})"
for b in "${bins[@]}"; do
  f=build/release/$b
  [ -x "$f" ] || { echo "bundle: $f missing (build the release preset first)" >&2; exit 1; }
  strip -o ".devbin/bin/$(basename "$b")" "$f"
done
# Libraries: everything ldd resolves except the C runtime (the host's newer glibc serves) and
# the Vulkan loader (.gl/ brings the one the driver pairs with).
for f in .devbin/bin/*; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libvulkan.so*) ;;
    *) cp -L "$lib" .devbin/lib/ ;;
  esac
done
# One xz stream (-T1) with a dictionary larger than a binary: the statically linked glslang
# (most of each binary) is stored once for all of them (5 binaries: 5.7 MB, against 14 MB at -T2 -6).
tar -C .devbin -cf - bin lib | xz -T1 -9e > .devbin/strata-bin.tar.xz
rm -rf .devbin/bin .devbin/lib
# Fixture models the device tests read (small) travel with the tree already (tests/fixtures).
if [ $# -ge 1 ]; then
  src=$1
  # ggml without the other backends, src, include, common, vendor, cmake, the two benches.
  tmp=$(mktemp -d)
  git -C "$src" archive HEAD CMakeLists.txt cmake ggml/CMakeLists.txt ggml/cmake ggml/include \
      ggml/src/CMakeLists.txt ggml/src/ggml-cpu ggml/src/ggml-cuda ggml/src/*.c ggml/src/*.cpp ggml/src/*.h \
      src include common vendor tools/llama-bench tools/batched-bench licenses | tar -x -C "$tmp"
  printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(batched-bench)\nadd_subdirectory(llama-bench)\n' \
      > "$tmp/tools/CMakeLists.txt"
  rm -rf "$tmp/vendor/miniaudio" "$tmp/vendor/stb"
  tar -C "$tmp" -cJf .devbin/llama.cpp.tar.xz .
  rm -rf "$tmp"
  git -C "$src" log -1 --format='llama.cpp %h %s' > .devbin/llama.cpp.version
fi
git log -1 --format='strata %h %s' > .devbin/strata.version
du -sh .devbin .gl
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
carried=$(( tracked + $(du -sb .devbin | cut -f1) + $(du -sb .gl | cut -f1) ))
echo "carried with the tracked tree: $(( carried / 1048576 )) MiB of 64"
[ "$carried" -le $(( 64 * 1048576 )) ] || echo "bundle: over the carry limit: set BUNDLE_BINS to fewer binaries" >&2
echo "carry: [\".gl\", \".devbin\"]  (64 MiB in all)"

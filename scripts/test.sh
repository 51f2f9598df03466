#!/usr/bin/env bash
# The test command: installs dependencies (apt-get, as root), builds, runs the
# whole ctest suite, fuzzes the image decoder for a bounded time
# (HGRN_FUZZ_SECONDS, default 60), then rebuilds with AddressSanitizer + UBSan
# and runs the suite again. HGRN_FUZZ_SECONDS=0 / HGRN_SKIP_SANITIZE=1 skip
# those passes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)
fuzz=${HGRN_FUZZ_SECONDS:-60}
if [ "$fuzz" != 0 ]; then
  echo "== libFuzzer over the decode path, ${fuzz} s =="
  OUT=build/fuzz bash scripts/fuzz.sh "$fuzz"
fi
if [ "${HGRN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== sanitizer build (address,undefined) =="
  BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DHGRN_SANITIZE=address,undefined -DHGRN_CUDA=OFF
  # the accuracy run (label slow) is covered by the first pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 --timeout 1500 -LE slow)
fi

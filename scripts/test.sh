#!/usr/bin/env bash
# The test command: installs dependencies (apt-get, as root), builds, runs the
# whole ctest suite, then rebuilds with AddressSanitizer + UBSan and runs the
# unit tests again. HGRN_SKIP_SANITIZE=1 skips the second pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)
if [ "${HGRN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== sanitizer build (address,undefined) =="
  BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DHGRN_SANITIZE=address,undefined -DHGRN_CUDA=OFF
  # the slow end-to-end tests are covered by the first pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 --timeout 1500 -LE slow)
fi

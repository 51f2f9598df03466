#!/usr/bin/env bash
# The test command: installs dependencies (apt-get, as root), builds, runs the
# whole ctest suite, fuzzes every parser for a bounded time each
# (HGRN_FUZZ_SECONDS per target, default 60, as many targets at once as there
# are cores: 3 minutes for the 6 targets on 2 cores; scripts/fuzz.sh), then rebuilds
# with AddressSanitizer + UBSan and runs the suite again. Ends with one line
# per fuzz target: runs, seconds, crashes. HGRN_FUZZ_SECONDS=0 /
# HGRN_SKIP_SANITIZE=1 skip those passes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)
fuzz=${HGRN_FUZZ_SECONDS:-60}
fuzz_rc=0
if [ "$fuzz" != 0 ]; then
  echo "== libFuzzer over every parser, ${fuzz} s each =="
  OUT=build/fuzz bash scripts/fuzz.sh "$fuzz" || fuzz_rc=$?
fi
if [ "${HGRN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== sanitizer build (address,undefined) =="
  BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DHGRN_SANITIZE=address,undefined -DHGRN_CUDA=OFF
  # the accuracy run (label slow) is covered by the first pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 --timeout 1500 -LE slow)
fi
if [ "$fuzz" != 0 ]; then
  echo "== fuzzing (${fuzz} s per target) =="
  cat build/fuzz/summary.txt
fi
exit $fuzz_rc

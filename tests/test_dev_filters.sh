#!/usr/bin/env bash
# The GPU check scripts under dev/ (run by hand on a GPU machine, never by
# ctest) pick CUDA tests by name: HGRN_TEST_FILTER=test_a,test_b runs the
# tests whose name is contained in the list, so a name that no longer exists
# selects nothing and says nothing. Here each name of each filter must be a
# cmocka_unit_test of the test binary the same command runs (named in the
# command, continued lines included, or in the variable it runs), and each
# test binary a dev script runs (build-gpu/test_X, $B/test_X) must have its
# tests/test_X.c.
# usage: test_dev_filters.sh HGRN_BINARY SOURCE_DIR
set -u
src=$2
fails=0; n=0

# command_at SCRIPT LINE: that line and the lines it continues onto (a
# trailing backslash)
command_at() {
  awk -v from="$2" 'NR >= from { print; if ($0 !~ /\\$/) exit }' "$1"
}
shopt -s nullglob
for script in "$src"/dev/*.sh; do
  base=${script#"$src"/}
  # every test binary run from a build directory
  for bin in $(grep -oE '(build-[A-Za-z0-9_-]+|\$B|\$\{B\})/test_[a-z0-9_]+' "$script" | sed 's|.*/||' | sort -u); do
    n=$((n + 1))
    if [ ! -f "$src/tests/$bin.c" ]; then echo "FAIL $base runs $bin: no tests/$bin.c"; fails=$((fails + 1)); fi
  done
  # every HGRN_TEST_FILTER=... with its binary
  while IFS=: read -r line list; do
    cmd=$(command_at "$script" "$line")
    bin=$(echo "$cmd" | grep -oE '/test_[a-z0-9_]+' | head -n 1 | tr -d /)
    if [ -z "$bin" ]; then # run through a variable: its assignment names the binary
      for var in $(echo "$cmd" | grep -oE '\$\{?[A-Za-z_][A-Za-z0-9_]*' | tr -d '${'); do
        bin=$(grep -E "^[[:space:]]*$var=" "$script" | grep -oE '/test_[a-z0-9_]+' | tail -n 1 | tr -d /)
        [ -n "$bin" ] && break
      done
    fi
    n=$((n + 1))
    if [ -z "$bin" ]; then echo "FAIL $base:$line: HGRN_TEST_FILTER with no test binary in its command"; fails=$((fails + 1)); continue; fi
    for name in ${list//,/ }; do
      n=$((n + 1))
      if grep -qE "cmocka_unit_test\($name\)" "$src/tests/$bin.c" 2>/dev/null; then
        echo "ok   $base:$line: $name in $bin"
      else
        echo "FAIL $base:$line: HGRN_TEST_FILTER names $name, which $bin (tests/$bin.c) does not have"; fails=$((fails + 1))
      fi
    done
  done < <(grep -noE '^[^#]*HGRN_TEST_FILTER=[a-z0-9_,]+' "$script" | sed -E 's/^([0-9]+):.*HGRN_TEST_FILTER=/\1:/')
done
[ "$n" -gt 0 ] || { echo "FAIL no dev script runs a test binary"; exit 1; }
echo "$((n - fails)) of $n checks passed"
[ $fails -eq 0 ]

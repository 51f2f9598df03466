#!/usr/bin/env bash
# bench_ab.sh BASE_TREE [ROUNDS] - `hgrn bench` of two source trees side by
# side on this machine's GPU: BASE_TREE (e.g. an exported earlier commit) and
# this checkout, built the same way, then for each ImageNet config the two
# binaries run in alternating order, ROUNDS times (default 2), batch 256, 20
# timed steps. Prints training and eval img/s of every run and the median
# ratio this/base per config. Logs in ${OUT:-/tmp/bench_ab}.
#   CONFIGS="hgrn1_deit_tiny ..."  the configs (default: the four ImageNet ones)
set -uo pipefail
base=$(cd "${1:?usage: dev/bench_ab.sh BASE_TREE [ROUNDS]}" && pwd)
rounds=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/bench_ab}
mkdir -p "$out"
configs=${CONFIGS:-"hgrn1_deit_tiny hgrn1_deit_small hgrn2_deit_tiny hgrn2_deit_small"}
build() {   # tree builddir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$2.cmake.log" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target hgrn >"$2.build.log" 2>&1 || { tail -20 "$2.build.log"; exit 1; }
}
build "$base" "$out/build-base" & build "$here" "$out/build-this" & wait
for b in base this; do [ -x "$out/build-$b/hgrn" ] || { echo "build-$b failed"; exit 1; }; done
printf '%-18s %-5s %5s %12s %12s\n' config tree round "train img/s" "eval img/s"
for c in $configs; do
  for r in $(seq 1 "$rounds"); do
    order="base this"; [ $((r % 2)) = 0 ] && order="this base"
    for t in $order; do
      tree=$base; [ $t = this ] && tree=$here
      log="$out/$c.$t.$r.txt"
      timeout 120 "$out/build-$t/hgrn" bench --config "$tree/configs/$c.cfg" --device cuda --batch 256 --steps 20 >"$log" 2>&1
      tr=$(awk '/^train /{print $2; exit}' "$log"); ev=$(awk '/^eval /{print $2; exit}' "$log")
      printf '%-18s %-5s %5d %12s %12s\n' "$c" "$t" "$r" "${tr:-FAIL}" "${ev:-FAIL}"
      echo "$c $t ${tr:-0} ${ev:-0}" >>"$out/results.txt"
    done
  done
done
echo
echo "median this/base (train, eval):"
for c in $configs; do
  awk -v c="$c" '$1 == c { if ($2 == "base") { bt[++nb] = $3; be[nb] = $4 } else { tt[++nt] = $3; te[nt] = $4 } }
    function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] < a[j-1]; j--) { x = a[j]; a[j] = a[j-1]; a[j-1] = x }
      return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
    END { printf "%-18s train %.4f  eval %.4f\n", c, med(tt, nt) / med(bt, nb), med(te, nt) / med(be, nb) }' "$out/results.txt"
done

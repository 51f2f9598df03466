#!/usr/bin/env bash
# The C and CUDA sources of the product and its tests (src, cuda, data_loader,
# models, tests) are formatted as .clang-format says: clang-format --dry-run
# -Werror over every file, each offending file named. Skipped (77) without
# clang-format 14, the version scripts/deps.sh installs on Debian 12 and the
# tree was formatted with: other versions break some lines differently.
# dev/ (the sandboxes) keeps its own layout. Fix: clang-format -i FILE.
# usage: test_format.sh HGRN_BINARY SOURCE_DIR
set -u
src=$2
command -v clang-format >/dev/null || { echo "clang-format not installed: skipped"; exit 77; }
ver=$(clang-format --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+$')
[ "$ver" = 14 ] || { echo "clang-format $ver, not 14: skipped"; exit 77; }
cd "$src" || exit 1
[ -f .clang-format ] || { echo "$src/.clang-format: missing"; exit 1; }
mapfile -t files < <(find src cuda data_loader models tests -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) | sort)
[ ${#files[@]} -gt 100 ] || { echo "only ${#files[@]} source files found under $src"; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "${#bad[@]} of ${#files[@]} files differ from .clang-format (clang-format -i to fix): ${bad[*]}"
  exit 1
fi
echo "${#files[@]} files formatted as .clang-format says"

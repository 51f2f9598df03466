#!/usr/bin/env bash
# docs/CLI.md is what scripts/cli_md.sh generates from this binary: every
# command's --help verbatim (and the prose around it), so the reference
# cannot drift from the code. On a difference: the diff and the command
# that regenerates the file.
# usage: test_cli_md.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$(realpath "$1"); src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! bash "$src/scripts/cli_md.sh" "$hgrn" >"$tmp/CLI.md" 2>"$tmp/err"; then
  echo "FAIL scripts/cli_md.sh $hgrn: $(head -3 "$tmp/err")"; exit 1
fi
# the generated file must hold every listed command's section
for cmd in $("$hgrn" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}'); do
  grep -qx "## hgrn $cmd" "$tmp/CLI.md" || { echo "FAIL generated CLI.md has no section for $cmd"; exit 1; }
done
if ! diff -u "$src/docs/CLI.md" "$tmp/CLI.md" >"$tmp/diff"; then
  head -80 "$tmp/diff"
  echo "FAIL docs/CLI.md differs from the binary's --help; regenerate it: scripts/cli_md.sh BUILD/hgrn > docs/CLI.md"
  exit 1
fi
echo "ok   docs/CLI.md matches scripts/cli_md.sh $hgrn ($(grep -c '^## hgrn ' "$tmp/CLI.md") command sections)"

#!/usr/bin/env bash
# cli_md.sh HGRN_BINARY > docs/CLI.md: the command-line reference, one
# section per command that `hgrn --help` lists, each the prose of
# scripts/cli_md/CMD.md (where there is one) and the command's --help
# verbatim, between scripts/cli_md/header.md and footer.md. Generated so the
# reference cannot drift from the binary: tests/test_cli_md.sh compares.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/cli_md.sh HGRN_BINARY > docs/CLI.md" >&2; exit 2; }
hgrn=$(realpath "$1")
[ -x "$hgrn" ] || { echo "cli_md.sh: $1: not an executable" >&2; exit 2; }
prose=$(cd "$(dirname "$0")" && pwd)/cli_md
# help texts in the C locale from an empty directory: nothing of the caller's
# environment may reach the file
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
help() { (cd "$work" && LC_ALL=C "$hgrn" "$@"); }

cat "$prose/header.md"
printf '\n## hgrn\n\n```\n'
help --help
printf '```\n'
commands=$(help --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
[ -n "$commands" ] || { echo "cli_md.sh: $1 --help lists no commands" >&2; exit 1; }
for cmd in $commands; do
  printf '\n## hgrn %s\n\n' "$cmd"
  if [ -f "$prose/$cmd.md" ]; then cat "$prose/$cmd.md"; echo; fi
  # shellcheck disable=SC2016 # the backquotes are Markdown's
  printf '`hgrn %s --help`:\n\n```\n' "$cmd"
  help "$cmd" --help
  printf '```\n'
done
echo
cat "$prose/footer.md"

#!/usr/bin/env bash
# Runs README.md's "Quick start" as a newcomer would: every ```sh block of
# that section in order (set -e: a failing command fails the run), then its
# ```python block in the project venv. Prints what each printed. Needs the
# bootstrap's build (scripts/test.sh runs it after the other suites).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The section's fenced blocks, by language.
awk -v sh="$work/quickstart.sh" -v py="$work/quickstart.py" '
    /^## / { in_section = ($0 == "## Quick start") }
    in_section && /^```(sh|python)$/ { lang = substr($0, 4); inside = 1; next }
    inside && /^```$/ { inside = 0; next }
    inside && lang == "sh" { print > sh }
    inside && lang == "python" { print > py }
' README.md
[ -s "$work/quickstart.sh" ] || { echo "[quickstart] README.md has no sh block under ## Quick start"; exit 1; }
rm -rf out/qs
echo "[quickstart] $(grep -c . "$work/quickstart.sh") shell lines"
bash -euo pipefail "$work/quickstart.sh"
if [ -s "$work/quickstart.py" ]; then
    echo "[quickstart] python: $(grep -c . "$work/quickstart.py") lines"
    "$root/.venv/bin/python" "$work/quickstart.py"
fi
echo "[quickstart] passed"

#!/usr/bin/env bash
# Runs the plugin's lit tests.
#
#   llvm-tests/run.sh [--build] [--release] [PLUGIN_OR_DIR] [-- LIT_ARGS...]
#
# PLUGIN_OR_DIR: the plugin (.so), a cargo profile directory holding it
# (target/debug), or a cargo target directory (then debug/, or release/ with
# --release). Default: cargo's target directory for this workspace.
# --build runs `cargo build -p programl-passes --bin programl` first.
# Writes llvm-tests/lit.site.cfg.py (git-ignored), then runs `lit -v llvm-tests`
# (LIT_ARGS replace -v). lit: $LIT, else the project venv, else PATH.
# LLVM: PROGRAML_LLVM_MAJOR (default 16), found via LLVM_SYS_<NN>0_PREFIX,
# llvm-config-NN or /usr/lib/llvm-NN.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
major="${PROGRAML_LLVM_MAJOR:-16}"
profile=debug
build=0
where=""
lit_args=(-v)

while (($#)); do
    case "$1" in
        --build) build=1 ;;
        --release) profile=release ;;
        --) shift; lit_args=("$@"); break ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) where="$1" ;;
    esac
    shift
done

prefix_var="LLVM_SYS_${major}0_PREFIX"
if [[ -n "${!prefix_var:-}" ]]; then
    llvm_bindir="${!prefix_var}/bin"
elif command -v "llvm-config-$major" >/dev/null; then
    llvm_bindir="$("llvm-config-$major" --bindir)"
else
    llvm_bindir="/usr/lib/llvm-$major/bin"
fi
[[ -x "$llvm_bindir/FileCheck" ]] || { echo "run.sh: FileCheck not in $llvm_bindir (install llvm-$major-tools)" >&2; exit 2; }

if ((build)); then
    cargo_profile=()
    [[ $profile == release ]] && cargo_profile=(--release)
    (cd "$root" && export "$prefix_var=${!prefix_var:-$(dirname "$llvm_bindir")}" &&
        cargo build "${cargo_profile[@]}" -p programl-passes &&
        cargo build "${cargo_profile[@]}" --bin programl) ||
        echo "run.sh: cargo build failed; testing whatever is built" >&2
fi

plugin_name=libprograml_passes.so
[[ "$(uname)" == Darwin ]] && plugin_name=libprograml_passes.dylib
if [[ -z "$where" ]]; then
    where="$(cd "$root" && cargo metadata --format-version 1 --no-deps 2>/dev/null |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    where="${where:-$root/target}"
fi
if [[ ! -e "$where" ]]; then
    echo "run.sh: $where does not exist (expected the plugin or a cargo target directory)" >&2
    exit 2
elif [[ -f "$where" ]]; then
    plugin="$(cd "$(dirname "$where")" && pwd)/$(basename "$where")"
elif [[ -f "$where/$plugin_name" ]]; then
    plugin="$(cd "$where" && pwd)/$plugin_name"
else
    plugin="$(cd "$where" && pwd)/$profile/$plugin_name"
fi
[[ -f "$plugin" ]] || { echo "run.sh: no plugin at $plugin: cargo build -p programl-passes (or pass --build)" >&2; exit 2; }
profile_dir="$(dirname "$plugin")"
cli="$profile_dir/programl"
[[ -x "$cli" ]] || cli=""

sed -e "s|@SRC_ROOT@|$root|" -e "s|@PLUGIN@|$plugin|" -e "s|@CLI@|$cli|" \
    -e "s|@EXEC_ROOT@|$profile_dir/llvm-tests|" -e "s|@LLVM_BINDIR@|$llvm_bindir|" \
    -e "s|@LLVM_MAJOR@|$major|" "$here/lit.site.cfg.py.in" >"$here/lit.site.cfg.py"

lit="${LIT:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs/venv/bin/lit}"
[[ -x "$lit" ]] || lit="$(command -v lit || command -v lit.py || true)"
[[ -n "$lit" ]] || { echo "run.sh: lit not found (pip install lit, or set LIT)" >&2; exit 2; }
exec "$lit" "${lit_args[@]}" "$here"

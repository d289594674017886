#!/usr/bin/env bash
# Builds the Python package (programl_rs) as one self-contained wheel:
#
#   bash scripts/wheel.sh [OUT]      # default OUT: dist/; prints the wheel's path
#
# `pip install OUT/programl_rs-*.whl` then works on x86-64 Linux with glibc
# 2.36 or later (Debian 12, Ubuntu 23.04 and later) and CPython 3.9 or
# later, with no LLVM, Rust or checkout: the wheel carries libLLVM-16 and
# the libraries it links, renamed by hash in programl_rs.libs/, so a
# system LLVM is never picked up. Only from_clang needs a clang on the
# PATH (clang-16, or PROGRAML_CLANG).
#
# maturin builds the plain wheel (`--auditwheel skip`) and PyPA's auditwheel
# grafts the libraries into it. Not maturin's own repair: maturin 1.16
# patches the cargo artifact in place (it is hard-linked into the target
# directory), so the next `maturin develop` installed an extension that
# needs the renamed libLLVM (fixed upstream in maturin's PR #3159).
# auditwheel also gives Debian's libLLVM, whose RUNPATH is
# $ORIGIN/../lib, the RPATH $ORIGIN of its neighbours.
# Written to a temporary directory, then moved: OUT never holds half a
# wheel. scripts/test.sh's step "wheel" installs it into a fresh venv and
# runs it with the system's libLLVM and clang hidden.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/dist}"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "[wheel] maturin build --release (the plain wheel)" >&2
(cd "$root/crates/python" && "$VIRTUAL_ENV/bin/maturin" build --release --auditwheel skip --quiet -o "$tmp/built" </dev/null) >&2
built=("$tmp"/built/programl_rs-*.whl)
[ -f "${built[0]}" ] || { echo "[wheel] maturin wrote no wheel" >&2; exit 1; }
# The platform tag is the build machine's glibc (auditwheel refuses a tag
# older than the symbols the libraries use).
glibc="$(getconf GNU_LIBC_VERSION | awk '{ print $2 }' | tr . _)"
echo "[wheel] auditwheel repair --plat manylinux_${glibc}_x86_64 (libLLVM and its libraries into the wheel)" >&2
PATH="$VIRTUAL_ENV/bin:$PATH" "$VIRTUAL_ENV/bin/auditwheel" repair --plat "manylinux_${glibc}_x86_64" -w "$tmp/repaired" "${built[0]}" </dev/null 2>&1 | grep -v "^INFO" >&2 || true
repaired=("$tmp"/repaired/*.whl)
[ -f "${repaired[0]}" ] || { echo "[wheel] auditwheel wrote no wheel" >&2; exit 1; }
name="$(basename "${repaired[0]}")"
mkdir -p "$out"
mv "${repaired[0]}" "$out/$name.tmp"
mv "$out/$name.tmp" "$out/$name"
echo "$out/$name"

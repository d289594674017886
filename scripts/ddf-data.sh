#!/usr/bin/env bash
# Builds the DeepDataFlow data of C and C++ that the models are trained and
# checked on (issue 30), from nothing, resumably:
#
#   bash scripts/ddf-data.sh [STEP...]
#
# Steps (default: all, in this order, so that the store is there as soon
# as its two sets are; each is idempotent, so a killed run continues where
# it stopped):
#   c           the C corpus: 17 projects and a POJ-104 sample, -O0 to -O3,
#               opaque pointers   ($PROGRAML_CACHE/corpus-opaque-O0-O1-O2-O3)
#   cxx         16 C++ projects, -O0 to -O3 ($PROGRAML_CACHE/cxx-opaque-O0-O1-O2-O3)
#   store       the C and C++ store: the projects of `c`'s and `cxx`'s corpus
#               manifests hard-linked under $PROGRAML_CACHE/ddf-cxx-ir/{c,cxx}/
#               (the dataset build does not follow symbolic links), with the
#               manifests, then `programl dataset build` into
#               $PROGRAML_CACHE/ddf-cxx, which records the manifests' ids
#               (a store begun from another corpus is refused: build it
#               into a new directory); `dataset stats` prints them
#   unseen      5 C projects neither set holds (unseen-opaque-O0-O1-O2-O3)
#   unseen-cxx  5 C++ projects neither set holds (unseen-cxx-opaque-O0-O1-O2-O3)
#
# The unseen sets are read as IR directories by `programl-train eval --data`
# and scripts/errors.py; no store is built from them. JOBS (default: all
# cores) is passed to scripts/corpus.sh and to the dataset build. On 2
# cores with nothing cached, `c` takes about 25 minutes and `cxx` about an
# hour (docs/user/datasets.md has what each set holds).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
levels="O0 O1 O2 O3"
suffix="opaque-${levels// /-}"
jobs="${JOBS:-$(nproc)}"
programl="${PROGRAML_BIN:-$root/target/release/programl}"
steps=("$@")
((${#steps[@]})) || steps=(c cxx store unseen unseen-cxx)

say() { printf '[ddf-data] %s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

link_set() {
    # Hard-links the projects that the corpus manifest of set directory $1
    # lists under $2, with the manifest (the store records its id): a
    # project no longer listed, or rebuilt since from another source
    # (its .source record is not the linked one), is linked anew or removed.
    local from="$1" to="$2" p name projects
    [ -f "$from/corpus-manifest.json" ] || { say "no corpus manifest in $from: run its step (c or cxx) first"; exit 1; }
    projects="$(python3 -c 'import json, sys; print("\n".join(p["project"] for p in json.load(open(sys.argv[1]))["projects"]))' "$from/corpus-manifest.json")"
    mkdir -p "$to"
    for p in "$to"/*/; do
        [ -d "$p" ] || continue
        name="$(basename "$p")"
        if ! grep -qxF -- "$name" <<<"$projects" || ! [ "$from/$name/.source" -ef "$to/$name/.source" ]; then
            rm -rf "${to:?}/$name"
        fi
    done
    for name in $projects; do
        [ -e "$to/$name" ] && continue
        cp -al "$from/$name" "$to/$name.tmp"
        mv "$to/$name.tmp" "$to/$name"
    done
    cp "$from/corpus-manifest.json" "$to/.corpus-manifest.json.tmp"
    mv "$to/.corpus-manifest.json.tmp" "$to/corpus-manifest.json"
}

for step in "${steps[@]}"; do
    say "$step"
    case "$step" in
        c) JOBS="$jobs" bash "$root/scripts/corpus.sh" --opaque --levels "$levels" ;;
        cxx) JOBS="$jobs" bash "$root/scripts/corpus.sh" --opaque --cxx --levels "$levels" ;;
        unseen) JOBS="$jobs" bash "$root/scripts/corpus.sh" --opaque --unseen --levels "$levels" ;;
        unseen-cxx) JOBS="$jobs" bash "$root/scripts/corpus.sh" --opaque --unseen-cxx --levels "$levels" ;;
        store)
            ir="$PROGRAML_CACHE/ddf-cxx-ir"
            link_set "$PROGRAML_CACHE/corpus-$suffix" "$ir/c"
            link_set "$PROGRAML_CACHE/cxx-$suffix" "$ir/cxx"
            "$programl" dataset build --ir "$ir" --out "$PROGRAML_CACHE/ddf-cxx" -j "$jobs"
            "$programl" dataset stats "$PROGRAML_CACHE/ddf-cxx"
            ;;
        *) echo "ddf-data.sh: unknown step '$step' (c cxx unseen unseen-cxx store)" >&2; exit 2 ;;
    esac
done
say "done"

#!/usr/bin/env bash
# Builds real-code LLVM IR corpora: the typed-pointer -O0/-O2 one that
# tests/conformance.rs and benches/construction.rs use (the default), and the
# opaque-pointer -O0..-O3 one that DeepDataFlow datasets are built from.
#
#   bash scripts/corpus.sh [--opaque] [--levels "O0 O1 O2 O3"] [OUT]
#
#   default:  typed pointers, -O0 -O2, OUT = $PROGRAML_CACHE/corpus
#   --opaque: opaque pointers (LLVM 16's default), OUT defaults to
#             $PROGRAML_CACHE/corpus-opaque-<levels>
#   --unseen: instead of the corpus's projects, five that it does not
#             contain (cJSON, LMDB, http-parser, xxHash, libtommath;
#             no POJ-104), to test models on code they never saw; OUT
#             defaults to $PROGRAML_CACHE/unseen-<pointers>-<levels>
#   --cxx:    C++ projects for the DeepDataFlow corpus (leveldb,
#             double-conversion, jsoncpp, muparser, snappy, tinyobjloader,
#             abseil, ninja, box2d, libebml, taglib, hunspell, graphite2,
#             uchardet, cppunit, flatbuffers: ~660 units of classes, virtual
#             calls, templates, exceptions, the STL), none of them in (or
#             bundling) the unseen C++ set; OUT defaults to
#             $PROGRAML_CACHE/cxx-<pointers>-<levels>
#   --unseen-cxx: five C++ projects the corpus does not contain (tinyxml2,
#             yaml-cpp, fmtlib, re2, pugixml: classes, virtual calls,
#             templates, exceptions, the STL), compiled as C++17; OUT
#             defaults to $PROGRAML_CACHE/unseen-cxx-<pointers>-<levels>
#
# Sources: Debian bookworm source packages of small-to-medium C and C++
# projects, plus a fixed sample of POJ-104 programs from
# shared/datasets/poj104, each at the version and sha256 that
# scripts/corpus.lock names (`apt-get source --only-source PKG=VERSION`,
# after adding a deb-src entry for the mirror already configured). Where the
# mirror lacks the locked version, the other versions `apt-cache showsrc`
# lists are tried, newest first; the one used is said in one line naming
# both versions and recorded in the manifest (a warning, also under CI:
# Debian point releases replace versions). A .dsc whose sha256 is not the
# lock's, at the locked version, is refused.
#
# What a set holds is written beside it: OUT/SUMMARY.tsv (every project of
# the lock's set: its version, units, files and failures, or `missing` and
# why) and OUT/corpus-manifest.json (projects, versions, sha256, files per
# project and -O level, the compiler, the missing projects, and an `id`
# that names this exact corpus: `programl dataset build` records it, and
# the bundles trained on the store carry it). A project the lock expects
# and the set lacks is a warning, and an error (exit 1) under CI=true.
#
#   --only "P1 P2": only these projects of the set (the others are listed
#             as not built in this run); CORPUS_LOCK: another lock file;
#   --print-lock: the lock as the mirror would write it now (the newest
#             version of each locked project), for a reviewed update.
#
# Every translation unit is compiled with
#   clang-16 [-Xclang -no-opaque-pointers] -S -emit-llvm (no -g) -O<level>
# into OUT/<project>/<level>/*.ll (typed pointers as LLVM 16 prints them:
# tests rewrite them for LLVM 10 with programl_testkit::rewrite_for_llvm10).
#
# Projects that compile translation unit by translation unit are given -I/-D
# flags (zlib, bzip2, lua5.4, lz4, zstd, mbedtls, libwebp, brotli, libdeflate,
# pcre2, libyaml, giflib, libuv1); those that need configuring (gzip,
# xz-utils, bc: ./configure; expat: cmake) are built with `make -k
# CC=<wrapper>`, the wrapper emitting the IR of each compiled file beside the
# real compile. POJ-104 programs are compiled as C++98 with forced includes
# (and `using namespace std;`), falling back to C89 with C headers.
#
# Bounded and idempotent: a project with OUT/<project>/.done built from the
# source the lock (or its fallback) names is skipped; each
# project compiles at most $CORPUS_MAX_TUS (200) units; POJ-104 takes
# $POJ104_PER_CLASS (3) programs of each of its 104 classes. Per project,
# failures are listed in OUT/<project>/failures.txt; OUT/SUMMARY.tsv has the
# counts. Runtime on 2 cores with nothing cached: ~10-15 minutes.
set -euo pipefail

export PROGRAML_CACHE="${PROGRAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs}"
pointers=typed
set=corpus
export CORPUS_LEVELS="O0 O2"
out_arg=""
only=""
print_lock=0
while (($#)); do
    case "$1" in
        --opaque) pointers=opaque ;;
        --typed) pointers=typed ;;
        --unseen) set=unseen ;;
        --unseen-cxx) set=unseen-cxx ;;
        --cxx) set=cxx ;;
        --levels) CORPUS_LEVELS="$2"; shift ;;
        --only) only="$2"; shift ;;
        --print-lock) print_lock=1 ;;
        -h|--help) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d'; exit 0 ;;
        -*) echo "corpus.sh: unknown option $1" >&2; exit 2 ;;
        *) out_arg="$1" ;;
    esac
    shift
done
for l in $CORPUS_LEVELS; do
    case "$l" in O0|O1|O2|O3|Os|Oz) ;; *) echo "corpus.sh: bad level '$l' (O0 O1 O2 O3 Os Oz)" >&2; exit 2 ;; esac
done
if [ "$pointers" = typed ]; then
    export CORPUS_POINTER_FLAGS="-Xclang -no-opaque-pointers"
    default_out="$PROGRAML_CACHE/corpus"
    [ "$CORPUS_LEVELS" = "O0 O2" ] || default_out="$PROGRAML_CACHE/corpus-typed-${CORPUS_LEVELS// /-}"
else
    export CORPUS_POINTER_FLAGS=""
    default_out="$PROGRAML_CACHE/corpus-opaque-${CORPUS_LEVELS// /-}"
fi
[ "$set" = corpus ] || default_out="$PROGRAML_CACHE/$set-$pointers-${CORPUS_LEVELS// /-}"
# (--print-lock writes nothing: no OUT.)
if [ "$print_lock" = 1 ]; then OUT=/nonexistent; else OUT="$(mkdir -p "${out_arg:-$default_out}" && cd "${out_arg:-$default_out}" && pwd)"; fi
SRC="$PROGRAML_CACHE/corpus-src"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POJ_TAR="${POJ104_TAR:-$ROOT/../shared/datasets/poj104/poj104.tar.xz}"
JOBS="${JOBS:-$(nproc)}"
MAX_TUS="${CORPUS_MAX_TUS:-200}"
POJ_PER_CLASS="${POJ104_PER_CLASS:-3}"
export CLANG="${CLANG:-clang-16}"
[ "$print_lock" = 1 ] || mkdir -p "$SRC"

say() { printf '[corpus] %s\n' "$*" >&2; }

# Root for apt (the packages and the deb-src entry): sudo -n where the
# caller is not root, as scripts/bootstrap.sh does, failing rather than
# prompting.
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo -n)

# --- tools ---------------------------------------------------------------
need=()
command -v "$CLANG" >/dev/null || need+=(clang-16)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v make >/dev/null || need+=(make)
if ((${#need[@]})); then
    say "apt-get install ${need[*]}"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null
fi

# --- deb-src entry, same mirror as the configured Debian source -------------
DEBSRC=/etc/apt/sources.list.d/programl-deb-src.sources
srcs_ready=0
ensure_deb_src() {
    [ "$srcs_ready" = 1 ] && return 0
    if [ ! -f "$DEBSRC" ]; then
        local uri
        uri="$(grep -h -m1 -E '^URIs:.*debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}' || true)"
        uri="${uri:-http://deb.debian.org/debian}"
        say "adding deb-src entry ($uri bookworm) to $DEBSRC"
        "${as_root[@]}" tee "$DEBSRC" >/dev/null <<EOF
# Added by programl-rs scripts/corpus.sh: Debian sources for the IR corpus.
Types: deb-src
URIs: $uri
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        "${as_root[@]}" apt-get update -qq </dev/null
    elif ! apt-cache showsrc zlib 2>/dev/null | grep -q '^Package:'; then
        "${as_root[@]}" apt-get update -qq </dev/null
    fi
    srcs_ready=1
}

# --- the lock -------------------------------------------------------------------
# scripts/corpus.lock: set, project, source, version, sha256 (tab-separated).
LOCK="${CORPUS_LOCK:-$ROOT/scripts/corpus.lock}"
[ -f "$LOCK" ] || { echo "corpus.sh: no lock file at $LOCK" >&2; exit 2; }
declare -A lock_source=() lock_version=() lock_sha=()
expected=()
while IFS= read -r l_line; do
    case "$l_line" in "" | \#*) continue ;; esac
    IFS=$'\t' read -r l_set l_project l_source l_version l_sha l_extra <<<"$l_line"
    if [ -z "$l_sha" ] || [ -n "$l_extra" ] || [[ "$l_line" == *$'\t\t'* ]]; then
        echo "corpus.sh: $LOCK: malformed line for '$l_project' (set, project, source, version, sha256, tab-separated)" >&2
        exit 2
    fi
    [ "$l_set" = "$set" ] || continue
    lock_source[$l_project]="$l_source" lock_version[$l_project]="$l_version" lock_sha[$l_project]="$l_sha"
    expected+=("$l_project")
done <"$LOCK"
((${#expected[@]})) || { echo "corpus.sh: $LOCK has no project of the set '$set'" >&2; exit 2; }
for p in $only; do
    [ -n "${lock_source[$p]:-}" ] || { echo "corpus.sh: --only $p: not a project of the set '$set' in $LOCK" >&2; exit 2; }
done
# in_run PROJECT: built by this run (every project, or those of --only).
in_run() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }

# A project of the lock that this run could not build is recorded with its
# reason in OUT/.missing.tsv (made anew each run), for the summary.
[ "$print_lock" = 1 ] || : >"$OUT/.missing.tsv"
missing() { # PROJECT REASON
    printf '%s\t%s\n' "$1" "$2" >>"$OUT/.missing.tsv"
    say "$1: not built: $2"
}

# dsc_field DSC FIELD: a field of a .dsc (Version, Source).
dsc_field() { sed -n "s/^$2: *//p" "$1" | head -n1; }

# source_versions PKG: the versions of source package PKG the mirror lists,
# newest first (Debian's ordering).
source_versions() {
    apt-cache showsrc --only-source "$1" 2>/dev/null | awk -v p="$1" '/^Package: /{ cur = $2 } /^Version: / && cur == p { print $2 }' |
        sort -u | python3 -c '
import functools, subprocess, sys
def cmp(a, b):
    if a == b: return 0
    return -1 if subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0 else 1
print("\n".join(sorted(sys.stdin.read().split(), key=functools.cmp_to_key(cmp), reverse=True)))'
}

if [ "$print_lock" = 1 ]; then
    # Every line of the lock, each Debian source at the newest version the
    # mirror lists now, with its .dsc's sha256; comments kept.
    ensure_deb_src
    while IFS= read -r line; do
        case "$line" in "" | \#*) printf '%s\n' "$line"; continue ;; esac
        IFS=$'\t' read -r l_set l_project l_source l_version l_sha <<<"$line"
        case "$l_source" in
            debian:*)
                pkg="${l_source#debian:}"
                v="$(source_versions "$pkg" | head -n1 || true)"
                sha="$(apt-get source --only-source --print-uris -qq "$pkg=$v" </dev/null 2>/dev/null | grep -F ".dsc' " | grep -o 'SHA256:[0-9a-f]*' | cut -d: -f2 || true)"
                [ -n "$v" ] && [ -n "$sha" ] || { echo "corpus.sh: the mirror lists no source of $pkg" >&2; exit 1; }
                printf '%s\t%s\t%s\t%s\t%s\n' "$l_set" "$l_project" "$l_source" "$v" "$sha"
                ;;
            shared:*) printf '%s\t%s\t%s\t-\t%s\n' "$l_set" "$l_project" "$l_source" "$(sha256sum "$ROOT/../shared/${l_source#shared:}" | cut -d' ' -f1)" ;;
            *) printf '%s\n' "$line" ;;
        esac
    done <"$LOCK"
    exit 0
fi

# download PKG VERSION DIR: apt-get source of exactly that version into the
# empty DIR, unpacked (dpkg-source checks the tarballs against the .dsc).
download() {
    (cd "$3" && apt-get source --only-source -qq "$1=$2" </dev/null >>"$3.log" 2>&1)
}

# fetch PROJECT: sets `fetched` (the unpacked source dir) and writes
# OUT/PROJECT.source (source, version, sha256, locked version). The source
# cache $SRC/PKG holds one version, its .dsc beside its directory; a cache
# of another version than the lock's is replaced when the lock's can be had.
fetch() {
    local project="$1" source="${lock_source[$1]}" want="${lock_version[$1]}" sha="${lock_sha[$1]}"
    local pkg="${source#debian:}" cache dsc have="" have_sha="" v tmp tried=() got="" why=""
    fetched="" fetched_record="" fetch_downloaded=0
    case "$source" in
        debian:*) ;;
        shared:*)
            # A file of ../shared (POJ104_TAR stands in for poj104's).
            fetched="$ROOT/../shared/${source#shared:}"
            [ "$project" = poj104 ] && fetched="$POJ_TAR"
            [ -f "$fetched" ] || { missing "$project" "$fetched not found (the shared datasets: ../shared/datasets/README.md)"; return 1; }
            have_sha="$(sha256sum "$fetched" | cut -d' ' -f1)"
            [ "$have_sha" = "$sha" ] ||
                say "$project: $fetched has sha256 $have_sha, the lock says $sha: using it (recorded in the manifest)"
            fetched_record="source=$source version=$want sha256=$have_sha locked=$want"
            return 0
            ;;
        *) missing "$project" "source '$source' in $LOCK is neither debian:PKG nor shared:PATH"; return 1 ;;
    esac
    cache="$SRC/$pkg"
    dsc="$(ls "$cache"/*.dsc 2>/dev/null | head -n1 || true)"
    if [ -n "$dsc" ] && [ -n "$(find "$cache" -mindepth 1 -maxdepth 1 -type d | head -n1)" ]; then
        have="$(dsc_field "$dsc" Version)" have_sha="$(sha256sum "$dsc" | cut -d' ' -f1)"
    fi
    if [ "$have" = "$want" ] && [ "$have_sha" != "$sha" ]; then
        # The locked version cached with other content: never used.
        rm -rf "$cache"
        have="" have_sha=""
    fi
    if [ "$have_sha" != "$sha" ]; then
        ensure_deb_src
        tmp="$SRC/.$pkg.new"
        local refused="" new_dsc new_sha
        # The locked version first, then every other the mirror lists,
        # newest first; the cached one, if it comes up, is not fetched again.
        for v in "$want" $(source_versions "$pkg" | grep -vxF -- "$want"); do
            tried+=("$v")
            if [ "$v" != "$want" ] && [ "$v" = "$have" ]; then
                got="$v"
                break
            fi
            rm -rf "$tmp" "$tmp.log"
            mkdir -p "$tmp"
            if ! download "$pkg" "$v" "$tmp"; then
                why="$(grep -m1 -E '^E: ' "$tmp.log" || tail -n1 "$tmp.log")"
                continue
            fi
            new_dsc="$(ls "$tmp"/*.dsc | head -n1)"
            new_sha="$(sha256sum "$new_dsc" | cut -d' ' -f1)"
            if [ "$v" = "$want" ] && [ "$new_sha" != "$sha" ]; then
                # The locked version with other content: refused, and no
                # other version stands in for it (the lock is wrong, or
                # the mirror is).
                say "$project: $pkg $v from the mirror has a .dsc of sha256 $new_sha, the lock says $sha: refused"
                refused="the mirror's $pkg $v is not the locked one (sha256 $new_sha, locked $sha)"
                break
            fi
            got="$v"
            fetch_downloaded=1
            break
        done
        if [ -n "$refused" ]; then
            rm -rf "$tmp"
            [ -f "$tmp.log" ] && mv "$tmp.log" "$SRC/$pkg.log"
            missing "$project" "$refused"
            return 1
        elif [ "$fetch_downloaded" = 1 ]; then
            rm -rf "$cache"
            mv "$tmp" "$cache"
            mv "$tmp.log" "$SRC/$pkg.log"
            # Written by this fetch: a cache so stamped was never the one
            # that a project built before sources were recorded used.
            printf '%s\n' "$got" >"$cache/.programl-fetched"
            have="$got" have_sha="$new_sha"
        else
            rm -rf "$tmp"
            [ -f "$tmp.log" ] && mv "$tmp.log" "$SRC/$pkg.log"
            if [ -z "$have" ]; then
                missing "$project" "apt-get source --only-source $pkg failed for every version tried (${tried[*]}): $why (log: $SRC/$pkg.log)"
                return 1
            fi
            # Kept: the version cached earlier (the newest the mirror
            # gives, or none the mirror gives now).
        fi
    fi
    if [ "$have" != "$want" ]; then
        say "$project: $pkg $want (locked) is not on the mirror: using $have (recorded in the manifest)"
    fi
    fetched="$(find "$cache" -mindepth 1 -maxdepth 1 -type d | head -n1)"
    fetched_record="source=$source version=$have sha256=$have_sha locked=$want"
}

# record_field RECORD KEY: one key=value of a source record (values have no
# spaces: Debian versions and hex digests).
record_field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# project_start PROJECT: whether this run builds PROJECT (status 0, with
# `fetched` set and OUT/PROJECT ready) or not (1: not in --only, cached, or
# missing). OUT/PROJECT/.source records the source its files come from: a
# finished project (.done) built from the source the lock (or its fallback)
# now gives is cached, and the files of any other source are removed first.
project_start() {
    local project="$1" out="$OUT/$1" record=""
    in_run "$project" || return 1
    [ -n "${lock_source[$project]:-}" ] || { say "$project: not in $LOCK: not built"; return 1; }
    [ -f "$out/.source" ] && record="$(cat "$out/.source")"
    if [ -f "$out/.done" ] && [ "$(record_field "$record" sha256)" = "${lock_sha[$project]}" ]; then
        say "$project: cached ($(cat "$out/.done"))"
        return 1
    fi
    fetch "$project" || return 1
    if [ -z "$record" ] && [ -f "$out/.done" ] && [ "$fetch_downloaded" = 0 ] &&
        [ ! -e "$fetched/../.programl-fetched" ]; then
        # Built before sources were recorded, from the source still cached.
        printf '%s\n' "$fetched_record" >"$out/.source"
        record="$fetched_record"
    fi
    if [ -f "$out/.done" ] && [ "$record" = "$fetched_record" ]; then
        say "$project: cached ($(cat "$out/.done"))"
        return 1
    fi
    if [ -e "$out" ] && [ "$record" != "$fetched_record" ]; then
        [ -n "$record" ] && say "$project: built before from $(record_field "$record" version), now $(record_field "$fetched_record" version): rebuilt"
        rm -rf "$out"
    fi
    mkdir -p "$out"
    printf '%s\n' "$fetched_record" >"$out/.source"
    return 0
}

# levels_done OUTDIR NAME: the unit's IR exists at every level.
levels_done() {
    local l
    for l in $CORPUS_LEVELS; do [ -s "$1/$l/$2" ] || return 1; done
}
export -f levels_done

# --- compiling one unit ----------------------------------------------------
# compile_one PROJECT_OUT SRCDIR RELPATH LANGFLAGS... : writes IR per level,
# appends "RELPATH: first error line" to failures.txt on failure.
compile_one() {
    local out="$1" srcdir="$2" rel="$3"
    shift 3
    local name="${rel//\//__}"
    name="${name%.*}.ll"
    levels_done "$out" "$name" && return 0
    local err
    for opt in $CORPUS_LEVELS; do
        if ! err="$(cd "$srcdir" && "$CLANG" $CORPUS_POINTER_FLAGS -S -emit-llvm "-$opt" -w "$@" "$rel" -o "$out/$opt/$name.tmp" 2>&1)"; then
            rm -f "$out/$opt/$name.tmp"
            printf '%s [%s]: %s\n' "$rel" "$opt" "$(printf '%s' "$err" | grep -m1 'error' || printf '%s' "$err" | head -n1)" >>"$out/failures.txt"
            return 0
        fi
        mv "$out/$opt/$name.tmp" "$out/$opt/$name"
    done
}
export -f compile_one

# run_units PROJECT SRCDIR FLAGS -- FILES... : compiles the first $MAX_TUS
# files (sorted) with FLAGS, in parallel.
run_units() {
    local project="$1" srcdir="$2"
    shift 2
    local flags=()
    while [ "$1" != -- ]; do flags+=("$1"); shift; done
    shift
    local out="$OUT/$project"
    for l in $CORPUS_LEVELS; do mkdir -p "$out/$l"; done
    : >"$out/failures.txt"
    printf '%s\n' "$@" | sort | awk -v n="$MAX_TUS" 'NR <= n' >"$out/units.txt"
    local n
    n="$(wc -l <"$out/units.txt")"
    say "$project: compiling $n units ($CORPUS_LEVELS)"
    tr '\n' '\0' <"$out/units.txt" |
        xargs -0 -P "$JOBS" -I{} bash -c 'compile_one "$@"' _ "$out" "$srcdir" {} "${flags[@]}"
    finish "$project"
}

finish() {
    local project="$1" out="$OUT/$1"
    local units failed files l per=""
    units="$(wc -l <"$out/units.txt")"
    files="$(find "$out" -name '*.ll' | wc -l)"
    for l in $CORPUS_LEVELS; do per="$per $l=$(find "$out/$l" -name '*.ll' | wc -l)"; done
    failed="$(cut -d' ' -f1 "$out/failures.txt" | sort -u | wc -l)"
    printf 'units=%s files=%s failed=%s\n' "$units" "$files" "$failed" >"$out/.done"
    say "$project: $units units, $files IR files ($per ), $failed failed"
}


# --- projects compiled unit by unit --------------------------------------------
# tu_project NAME SETUP GLOBS EXCLUDE FLAGS... : NAME is the lock's project
# (its source comes from there), GLOBS a space-separated
# list of bash globs (globstar on) relative to the source dir, EXCLUDE an
# extended regex of paths to leave out ('' for none), SETUP a command run in
# the source dir first.
tu_project() {
    local name="$1" setup="$2" globs="$3" exclude="$4"
    shift 4
    local sources="${TU_SOURCES:-\.c$}"
    project_start "$name" || return 0
    local dir="$fetched"
    (cd "$dir" && eval "$setup")
    local files=()
    mapfile -t files < <(cd "$dir" && shopt -s globstar nullglob && for g in $globs; do printf '%s\n' $g; done |
        grep -E "$sources" | grep -v -E "${exclude:-^$}" | sort -u)
    run_units "$name" "$dir" "$@" -- "${files[@]}"
}

if [ "$set" = cxx ]; then
    export TU_SOURCES='\.(cc|cpp|cxx)$'
    tu_project leveldb : 'db/*.cc table/*.cc util/*.cc helpers/memenv/*.cc' '_test|_bench|testutil|env_windows|windows_logger|db_bench' \
        -std=c++17 -I. -Iinclude -DLEVELDB_PLATFORM_POSIX=1 -DLEVELDB_IS_BIG_ENDIAN=0
    tu_project double-conversion : 'double-conversion/*.cc' '' -std=c++17 -I.
    tu_project jsoncpp : 'src/lib_json/*.cpp src/test_lib_json/*.cpp src/jsontestrunner/*.cpp' '' -std=c++17 -Iinclude -Isrc/lib_json
    tu_project muparser : 'src/*.cpp samples/example1/*.cpp' '' -std=c++17 -Iinclude
    tu_project snappy \
        '[ -f snappy-stubs-public.h ] || sed -e "s/\${HAVE_SYS_UIO_H_01}/1/; s/\${PROJECT_VERSION_MAJOR}/1/; s/\${PROJECT_VERSION_MINOR}/1/; s/\${PROJECT_VERSION_PATCH}/9/" snappy-stubs-public.h.in >snappy-stubs-public.h' \
        'snappy.cc snappy-c.cc snappy-sinksource.cc snappy-stubs-internal.cc' '' -std=c++17 -I. -DHAVE_SYS_UIO_H=1 -DHAVE_BUILTIN_EXPECT=1 -DHAVE_BUILTIN_CTZ=1
    tu_project tinyobjloader : 'tiny_obj_loader.cc loader_example.cc' '' -std=c++17 -I.
    # Enough C++ for a third of the DeepDataFlow corpus (~600 units beside
    # ~1,200 C ones). Tests and examples are kept where they need nothing but
    # the project itself: they are C++ as its users write it.
    tu_project abseil : 'absl/**/*.cc' 'test|benchmark|mock' -std=c++17 -I.
    # No -Isrc: src/getopt.h (for Windows) would hide glibc's <getopt.h>.
    tu_project ninja : 'src/*.cc' 'win32|browse|\.in\.cc|includes_normalize_test|perftest|_bench' -std=c++17
    # Debian patches the unit tests to the system's <doctest/doctest.h>: point
    # that at the bundled doctest.h (whose signal handler wants a constant
    # SIGSTKSZ, which glibc 2.34+ no longer has).
    tu_project box2d \
        '[ -f unit-test/doctest/doctest.h ] || { mkdir -p unit-test/doctest && echo "#include \"../doctest.h\"" >unit-test/doctest/doctest.h; }' \
        'src/**/*.cpp unit-test/*.cpp' '' -std=c++17 -Iinclude -Isrc -Iunit-test -DDOCTEST_CONFIG_NO_POSIX_SIGNALS
    # ebml_export.h is cmake's generate_export_header output: a static build.
    tu_project libebml '[ -f ebml/ebml_export.h ] || echo "#define EBML_DLL_API" >ebml/ebml_export.h' \
        'src/*.cpp' '' -std=c++17 -I.
    # config.h and taglib_config.h are cmake's; Debian patches in the system
    # utf8cpp (<utf8/checked.h>), which the bundled copy stands in for. No zlib.
    tu_project taglib \
        '[ -f config.h ] || sed -E "s/#cmakedefine +(HAVE_GCC_BYTESWAP|HAVE_GCC_ATOMIC|HAVE_VSNPRINTF) 1/#define \1 1/; /#cmakedefine/d" config.h.cmake >config.h; [ -f taglib_config.h ] || cp taglib/taglib_config.h.cmake taglib_config.h; [ -d 3rdparty/utf8 ] || cp -r 3rdparty/utf8-cpp 3rdparty/utf8' \
        'taglib/**/*.cpp bindings/c/*.cpp examples/*.cpp' '' -std=c++17 -I. -I3rdparty -Itaglib \
        -Itaglib/{toolkit,asf,mpeg,mpeg/id3v1,mpeg/id3v2,mpeg/id3v2/frames,ogg,ogg/flac,ogg/vorbis,ogg/speex,ogg/opus,flac,mpc,mp4,ape,wavpack,trueaudio,riff,riff/aiff,riff/wav,mod,s3m,it,xm}
    # config.h (configure's) only for the command-line tools.
    tu_project hunspell \
        '[ -f config.h ] || printf "#define VERSION \"1.7.1\"\n#define HAVE_ICONV 1\n#define ICONV_CONST\n#define HAVE_LOCALE_H 1\n#define HAVE_LANGINFO_H 1\n" >config.h' \
        'src/hunspell/*.cxx src/parsers/*.cxx src/tools/*.cxx' '' -std=c++17 -I. -Isrc/hunspell -Isrc/parsers
    # intervalsettest.cpp uses std::reverse_iterator without <iterator>.
    tu_project graphite2 : 'src/*.cpp tests/**/*.cpp gr2fonttest/*.cpp' 'intervalsettest' -std=c++17 -Iinclude -Isrc
    # src/LangModels/*.cpp are tables of numbers only.
    tu_project uchardet : 'src/*.cpp src/tools/*.cpp' '' -std=c++17 -Isrc
    # config-auto.h is configure's (through AX_PREFIX_CONFIG_H); the plug-in
    # examples need the dlopen loader it selects.
    tu_project cppunit \
        '[ -f include/cppunit/config-auto.h ] || printf "#define CPPUNIT_HAVE_%s 1\n" NAMESPACES RTTI CPP_CAST CMATH SSTREAM DLFCN_H LIBDL GCC_ABI_DEMANGLE >include/cppunit/config-auto.h' \
        'src/**/*.cpp examples/**/*.cpp' 'DllMain|WinNtTimer' -std=c++17 -Iinclude
    # flatc, its code generators (grpc's among them) and the C++ tests, whose
    # generated headers are checked in.
    tu_project flatbuffers : 'src/*.cpp grpc/src/compiler/*.cc tests/*.cpp samples/*.cpp' '' \
        -std=c++17 -Iinclude -Igrpc -Itests -I.
elif [ "$set" = unseen-cxx ]; then
    # C++ as projects write it; none of it is in the corpus.
    export TU_SOURCES='\.(cc|cpp|cxx)$'
    tu_project tinyxml2 : 'tinyxml2.cpp xmltest.cpp' '' -std=c++17 -I.
    tu_project yaml-cpp : 'src/*.cpp util/*.cpp' '' -std=c++17 -Iinclude -Isrc
    tu_project fmtlib : 'src/format.cc src/os.cc' '' -std=c++17 -Iinclude
    tu_project re2 : 're2/*.cc util/*.cc' 'fuzz|benchmark|_test|tester' -std=c++17 -I.
    tu_project pugixml : 'src/*.cpp' '' -std=c++17 -Isrc
elif [ "$set" = unseen ]; then
    # Projects absent from the corpus (and from one another's code).
    tu_project cjson : 'cJSON.c cJSON_Utils.c' '' -I.
    tu_project lmdb : 'libraries/liblmdb/*.c' '' -Ilibraries/liblmdb -D_GNU_SOURCE
    tu_project http-parser : 'http_parser.c' '' -I.
    tu_project xxhash : 'xxhash.c cli/*.c' '' -I. -Icli
    tu_project libtommath : '*.c' '' -I.
else
tu_project zlib : '*.c test/*.c' '' -I. -D_LARGEFILE64_SOURCE=1 -DHAVE_UNISTD_H -DHAVE_STDARG_H
tu_project bzip2 : '*.c' '' -I. -D_FILE_OFFSET_BITS=64
tu_project lua '[ -f src/lua5.4-deb-multiarch.h ] || echo "#define DEB_HOST_MULTIARCH \"x86_64-linux-gnu\"" >src/lua5.4-deb-multiarch.h' 'src/*.c' '' -Isrc -DLUA_COMPAT_5_3 -DLUA_USE_LINUX
tu_project lz4 : 'lib/*.c programs/*.c tests/*.c' '' -Ilib -Iprograms
tu_project zstd : 'lib/**/*.c programs/*.c' '' \
    -Ilib -Ilib/common -Iprograms -DZSTD_MULTITHREAD -DZSTD_LEGACY_SUPPORT=0 -DZSTD_DISABLE_ASM
tu_project mbedtls : 'library/*.c programs/**/*.c' '/fuzz/|psa_constant_names_generated|ssl_test_common_source' \
    -Iinclude -Ilibrary -Itests/include
tu_project libwebp : 'src/**/*.c sharpyuv/*.c' '' -I. -Isrc -Isharpyuv
tu_project brotli : 'c/**/*.c' '' -Ic/include
tu_project libdeflate : 'lib/**/*.c programs/*.c' '' -I. -D_GNU_SOURCE
tu_project pcre2 'for f in config.h pcre2.h; do [ -f src/$f ] || cp src/$f.generic src/$f; done; [ -f src/pcre2_chartables.c ] || cp src/pcre2_chartables.c.dist src/pcre2_chartables.c' \
    'src/*.c' 'pcre2_(jit_match|jit_misc|jit_test|ucptables|fuzzsupport|printint)\.c' \
    -Isrc -DHAVE_CONFIG_H -DPCRE2_CODE_UNIT_WIDTH=8 -DSUPPORT_UNICODE -DSUPPORT_PCRE2_8
tu_project libyaml : 'src/*.c tests/*.c' '' \
    -Iinclude -DYAML_VERSION_MAJOR=0 -DYAML_VERSION_MINOR=2 -DYAML_VERSION_PATCH=5 '-DYAML_VERSION_STRING="0.2.5"'
tu_project giflib : '*.c' '' -I. -D_GNU_SOURCE
tu_project libuv : 'src/*.c src/unix/*.c test/*.c' \
    'test/runner-win|src/unix/(aix|bsd|cygwin|darwin|freebsd|fsevents|haiku|hurd|ibmi|kqueue|netbsd|no-|openbsd|os390|posix-poll|pthread-fixes|qnx|random-getentropy|sunos|sysinfo-memory|sysinfo-loadavg|random-sysctl)' \
    -Iinclude -Isrc -Itest -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64

# --- projects built with configure + make, IR emitted by a CC wrapper ------------
WRAP="$SRC/ircc"
cat >"$WRAP.tmp" <<'EOF'
#!/usr/bin/env bash
# CC wrapper: the real compile, then the same unit as LLVM IR at each level.
"$CLANG" "$@"
rc=$?
compile=0 src="" args=()
while (($#)); do
    case "$1" in
        -c) compile=1 ;;
        -o|-MF|-MT|-MQ) shift ;;
        -M|-MM|-MD|-MMD|-MP|-g*|-O*|-Werror*|-pipe) ;;
        *.c) src="$1"; args+=("$1") ;;
        *) args+=("$1") ;;
    esac
    shift
done
if [ -n "${IRCC_OUT:-}" ] && [ "$compile" = 1 ] && [ -n "$src" ] && [ "$rc" = 0 ]; then
    abs="$(realpath "$src")"
    rel="${abs#"$IRCC_ROOT"/}"
    name="${rel//\//__}"; name="${name%.c}.ll"
    for opt in $CORPUS_LEVELS; do
        if ! err="$("$CLANG" "${args[@]}" $CORPUS_POINTER_FLAGS -S -emit-llvm "-$opt" -w -o "$IRCC_OUT/$opt/$name" 2>&1)"; then
            printf '%s [%s]: %s\n' "$rel" "$opt" "$(printf '%s' "$err" | grep -m1 error)" >>"$IRCC_OUT/failures.txt"
            rm -f "$IRCC_OUT/$opt/$name"
            break
        fi
    done
    echo "$rel" >>"$IRCC_OUT/units.txt"
fi
exit $rc
EOF
chmod +x "$WRAP.tmp" && mv "$WRAP.tmp" "$WRAP"

# begin_project OUTDIR: level directories, empty failure and unit lists.
begin_project() {
    local l
    for l in $CORPUS_LEVELS; do mkdir -p "$1/$l"; done
    : >"$1/failures.txt"
    : >"$1/units.txt"
}

make_project() { # NAME CONFIGURE-ARGS...
    local name="$1"
    shift
    project_start "$name" || return 0
    local dir="$fetched" out="$OUT/$name"
    begin_project "$out"
    say "$name: configure"
    # Configure afresh (an interrupted earlier run may have left objects,
    # which make would not rebuild, so no IR would be emitted for them).
    (cd "$dir" && [ ! -f Makefile ] || make -k distclean </dev/null >/dev/null 2>&1) || true
    {
        # Debian's patches leave autotools inputs newer than their outputs,
        # and make would then want automake: order the timestamps instead.
        local now
        now="$(date +%s)"
        (cd "$dir" && find . -type f -exec touch -d "@$((now - 100))" {} + &&
            find . -name aclocal.m4 -exec touch -d "@$((now - 50))" {} + &&
            find . \( -name configure -o -name Makefile.in -o -name config.h.in -o -name '*.hin' \) -exec touch -d "@$((now - 10))" {} +)
        if ! (cd "$dir" && CC="$CLANG" ./configure -q "$@" </dev/null >"$out/configure.log" 2>&1); then
            say "$name: configure failed (see $out/configure.log)"
        fi
    }
    say "$name: make -k (IR via wrapper)"
    (cd "$dir" && IRCC_ROOT="$dir" IRCC_OUT="$out" make -k -j"$JOBS" CC="$WRAP" MAKEINFO=true </dev/null >"$out/make.log" 2>&1) || true
    sort -u -o "$out/units.txt" "$out/units.txt"
    finish "$name"
}

make_project gzip --disable-dependency-tracking
make_project xz --disable-dependency-tracking --disable-doc --disable-nls
make_project bc

# cmake_project NAME SUBDIR CMAKE-ARGS... : configured by cmake (in
# SUBDIR of the source), built with make -k through the wrapper.
cmake_project() {
    local name="$1" sub="$2"
    shift 2
    project_start "$name" || return 0
    command -v cmake >/dev/null || { missing "$name" "cmake is not installed (scripts/bootstrap.sh installs it)"; return 0; }
    local dir="$fetched" out="$OUT/$name"
    begin_project "$out"
    say "$name: cmake"
    rm -rf "$dir/programl-build"
    if ! cmake -S "$dir/$sub" -B "$dir/programl-build" -DCMAKE_C_COMPILER="$WRAP" -DCMAKE_BUILD_TYPE=None "$@" \
        </dev/null >"$out/configure.log" 2>&1; then
        say "$name: cmake failed (see $out/configure.log)"
    fi
    say "$name: make -k (IR via wrapper)"
    (IRCC_ROOT="$dir" IRCC_OUT="$out" make -k -j"$JOBS" -C "$dir/programl-build" </dev/null >"$out/make.log" 2>&1) || true
    sort -u -o "$out/units.txt" "$out/units.txt"
    finish "$name"
}

cmake_project expat expat -DEXPAT_BUILD_DOCS=OFF -DEXPAT_BUILD_FUZZERS=OFF

# --- POJ-104 sample (C++, forced includes; C fallback) --------------------------
poj_one() {
    local out="$1" srcdir="$2" rel="$3"
    local name="${rel//\//__}"
    name="${name%.*}.ll"
    levels_done "$out" "$name" && return 0
    local cxx=(-x c++ -std=gnu++98 -include cstdio -include cstdlib -include cstring -include cmath
        -include cctype -include climits -include iostream -include iomanip -include algorithm
        -include string -include vector)
    local c=(-x c -std=gnu89 -include stdio.h -include stdlib.h -include string.h -include math.h
        -include ctype.h -include limits.h)
    local err lang flags ok opt
    for lang in cxx-std cxx c; do
        case "$lang" in
            cxx-std) flags=("${cxx[@]}" -include "$PROGRAML_CACHE/poj104/using-std.h") ;;
            cxx) flags=("${cxx[@]}") ;;
            c) flags=("${c[@]}") ;;
        esac
        ok=1
        for opt in $CORPUS_LEVELS; do
            if ! err="$(cd "$srcdir" && "$CLANG" $CORPUS_POINTER_FLAGS -S -emit-llvm "-$opt" -w "${flags[@]}" "$rel" -o "$out/$opt/$name.tmp" 2>&1)"; then
                ok=0
                break
            fi
        done
        if [ "$ok" = 1 ]; then
            for opt in $CORPUS_LEVELS; do mv "$out/$opt/$name.tmp" "$out/$opt/$name"; done
            [ "$lang" = c ] && echo "$rel" >>"$out/as-c.txt"
            [ "$lang" = cxx ] && echo "$rel" >>"$out/without-using-std.txt"
            return 0
        fi
        for opt in $CORPUS_LEVELS; do rm -f "$out/$opt/$name.tmp"; done
    done
    printf '%s [%s]: %s\n' "$rel" "$opt" "$(printf '%s' "$err" | grep -m1 'error' || printf '%s' "$err" | head -n1)" >>"$out/failures.txt"
}
export -f poj_one

if project_start poj104; then
    if [ ! -d "$PROGRAML_CACHE/poj104/poj104" ] || [ "$(cat "$PROGRAML_CACHE/poj104/.sha256" 2>/dev/null)" != "$(record_field "$fetched_record" sha256)" ]; then
        say "poj104: unpacking $fetched"
        rm -rf "$PROGRAML_CACHE/poj104"
        mkdir -p "$PROGRAML_CACHE/poj104"
        tar -xJf "$fetched" -C "$PROGRAML_CACHE/poj104"
        record_field "$fetched_record" sha256 >"$PROGRAML_CACHE/poj104/.sha256"
    fi
    pdir="$PROGRAML_CACHE/poj104/poj104"
    # Many programs use cin/cout without `using namespace std`.
    printf 'using namespace std;\n' >"$PROGRAML_CACHE/poj104/using-std.h"
    out="$OUT/poj104"
    for l in $CORPUS_LEVELS; do mkdir -p "$out/$l"; done
    : >"$out/failures.txt"
    : >"$out/as-c.txt"
    (cd "$pdir" && for c in $(ls | sort -n); do ls "$c" | sort -n | awk -v n="$POJ_PER_CLASS" -v c="$c" 'NR <= n { print c "/" $0 }'; done) >"$out/units.txt"
    say "poj104: compiling $(wc -l <"$out/units.txt") programs ($CORPUS_LEVELS)"
    tr '\n' '\0' <"$out/units.txt" | xargs -0 -P "$JOBS" -I{} bash -c 'poj_one "$@"' _ "$out" "$pdir" {}
    finish poj104
    say "poj104: $(wc -l <"$out/as-c.txt") compiled as C after the C++ attempt failed"
fi

fi

# --- summary and manifest ----------------------------------------------------------
# Every project of the lock's set, built or not; the manifest of what was
# built, with the id that names this corpus. Both written atomically.
ci=0
case "${CI:-}" in "" | 0 | false | FALSE | False) ;; *) ci=1 ;; esac
compiler="$("$CLANG" --version | head -n1)"
OUT="$OUT" LOCK="$LOCK" SET="$set" POINTERS="$pointers" LEVELS="$CORPUS_LEVELS" ONLY="$only" COMPILER="$compiler" CI_STRICT="$ci" python3 - <<'PY'
import glob, hashlib, json, os, sys

out, lock, set_name, only = os.environ["OUT"], os.environ["LOCK"], os.environ["SET"], os.environ["ONLY"].split()
levels = os.environ["LEVELS"].split()
rows = []
with open(lock) as f:
    for line in f:
        if line.strip() and not line.startswith("#"):
            cols = line.rstrip("\n").split("\t")
            if cols[0] == set_name:
                rows.append(cols)
reasons = {}
with open(os.path.join(out, ".missing.tsv")) as f:
    for line in f:
        project, _, why = line.rstrip("\n").partition("\t")
        reasons.setdefault(project, why)

def record(path):
    with open(path) as f:
        return dict(kv.split("=", 1) for kv in f.read().split())

projects, missing, summary = [], [], []
for _, project, source, locked, locked_sha in rows:
    d = os.path.join(out, project)
    in_run = not only or project in only
    why = None
    if os.path.isfile(os.path.join(d, ".done")) and os.path.isfile(os.path.join(d, ".source")):
        src = record(os.path.join(d, ".source"))
        files = {lvl: len(glob.glob(os.path.join(d, lvl, "*.ll"))) for lvl in levels}
        units = sum(1 for _ in open(os.path.join(d, "units.txt"))) if os.path.isfile(os.path.join(d, "units.txt")) else 0
        failed = len({l.split(" ")[0] for l in open(os.path.join(d, "failures.txt"))}) if os.path.isfile(os.path.join(d, "failures.txt")) else 0
        if sum(files.values()) == 0:
            why = f"built no IR file (see {d}/failures.txt and any configure.log or make.log there)"
        else:
            projects.append({"project": project, "source": source, "version": src["version"], "sha256": src["sha256"],
                             "locked_version": locked, "locked_sha256": locked_sha, "units": units, "failed": failed, "files": files})
            note = "" if src["sha256"] == locked_sha else f"  (not the lock's: {locked})"
            summary.append((project, src["version"] + note, units, sum(files.values()), failed, "built"))
            continue
    elif project in reasons:
        why = reasons[project]
    elif os.path.isfile(os.path.join(d, ".done")):
        why = "built from an unrecorded source (run corpus.sh on it again)"
    elif not in_run:
        why = "not built: this run was given --only " + " ".join(only)
    else:
        why = "not built: corpus.sh has no recipe for it in this set"
    missing.append({"project": project, "reason": why, "in_run": in_run})
    summary.append((project, locked, "-", "-", "-", "missing: " + why))

extra = sorted(p for p in os.listdir(out) if os.path.isdir(os.path.join(out, p)) and p not in {r[1] for r in rows})
content = {"set": set_name, "pointers": os.environ["POINTERS"], "levels": levels, "compiler": os.environ["COMPILER"],
           "projects": [{k: p[k] for k in ("project", "source", "version", "sha256", "files")} for p in projects]}
ident = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
manifest = {"format": "programl-corpus-manifest", "version": 1, "id": ident, "set": set_name,
            "pointers": content["pointers"], "levels": levels, "compiler": content["compiler"], "projects": projects,
            "missing": [{"project": m["project"], "reason": m["reason"]} for m in missing],
            "not_in_lock": extra}

def write(name, text):
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out, name))

write("corpus-manifest.json", json.dumps(manifest, indent=1) + "\n")
write("SUMMARY.tsv", "project\tversion\tunits\tfiles\tfailed\tstatus\n" +
      "".join("\t".join(str(c) for c in row) + "\n" for row in summary))
width = max(len(r[0]) for r in summary)
for r in summary:
    print(f"{r[0]:<{width}}  {r[1]:<26} {r[2]:>5} {r[3]:>6} {r[4]:>4}  {r[5]}")
say = lambda m: print(f"[corpus] {m}", file=sys.stderr)
for p in extra:
    say(f"warning: {out}/{p} is not a project of the lock's set '{set_name}': left out of the manifest")
total = sum(sum(p["files"].values()) for p in projects)
say(f"total: {total} IR files of {len(projects)} of the lock's {len(rows)} projects in {out} (corpus {ident}: {out}/corpus-manifest.json)")
lacking = [m for m in missing if m["in_run"]]
if lacking:
    for m in lacking:
        say(f"MISSING {m['project']}: {m['reason']}")
    verdict = "an error under CI=true" if os.environ["CI_STRICT"] == "1" else "a warning (an error under CI=true)"
    say(f"{len(lacking)} project(s) of the lock missing from the set: {' '.join(m['project'] for m in lacking)}: {verdict}")
    sys.exit(1 if os.environ["CI_STRICT"] == "1" else 0)
PY

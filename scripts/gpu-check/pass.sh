#!/usr/bin/env bash
# Device check A: the learned pass with device=cuda against device=cpu (FP32).
# Env: D (dir with bin/ and lib/), TORCHLIB (libtorch's lib dir), OUTDIR.
# Prints one line per opt run (exit status, wall ms, annotated lines, the
# pass's stderr: verify's counts) and whether CPU FP32 and CUDA annotate alike.
set -u
OPT=$D/lib/opt-16
PLUGIN=$D/bin/libprograml_passes.so
export PROGRAML_RUNTIME=$D/bin/libprograml_runtime_cuda.so
export LD_LIBRARY_PATH=$D/lib:${TORCHLIB}
mkdir -p $OUTDIR/pass
echo "== host"; nproc; grep -m1 'model name' /proc/cpuinfo; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
ls -la /dev/nvidia0 2>&1
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
run() { # name file model device extra
  local name=$1 f=$2 model=$3 dev=$4 extra=${5:-}
  local t0=$(date +%s%N)
  $OPT -load-pass-plugin=$PLUGIN -passes="programl-infer<model=models/$model;device=$dev;$extra>" -S .dev/ir/$f.ll -o $OUTDIR/pass/$name.ll 2> $OUTDIR/pass/$name.err
  local rc=$? t=$(ms $t0)
  local n=$(grep -c '!programl' $OUTDIR/pass/$name.ll 2>/dev/null)
  echo "$name rc=$rc ms=$t annotated_lines=${n:-0} stderr=$(wc -l < $OUTDIR/pass/$name.err): $(head -c 300 $OUTDIR/pass/$name.err | tr '\n' ' ')"
}
if [ "${ONLY:-}" != auto ]; then
echo "== plain opt"
for i in 1 2 3; do t0=$(date +%s%N); $OPT -passes=instcombine -S .dev/ir/huffman.ll -o /dev/null; echo "plain opt ms=$(ms $t0)"; done
echo "== plugin loaded, no pass"
for i in 1 2 3; do t0=$(date +%s%N); $OPT -load-pass-plugin=$PLUGIN -passes=instcombine -S .dev/ir/huffman.ll -o /dev/null; echo "plugin-no-pass ms=$(ms $t0)"; done
echo "== reachability, sampled roots (huffman: every root), cpu f32 vs cuda"
for f in huffman blocksort compress tinyxml2; do
  r=""; [ $f = huffman ] && r="roots=all;"
  run $f.cpu $f reachability cpu "dtype=f32;${r}verify"
  run $f.cuda $f reachability cuda "${r}verify"
  run $f.cuda2 $f reachability cuda "${r}verify"
  a=$(grep '!programl' $OUTDIR/pass/$f.cpu.ll | md5sum); b=$(grep '!programl' $OUTDIR/pass/$f.cuda.ll | md5sum)
  echo "$f annotations cpu==cuda: $([ "$a" = "$b" ] && echo "same ($(grep -c '!programl' $OUTDIR/pass/$f.cpu.ll) lines)" || echo DIFFER $(diff <(grep '!programl' $OUTDIR/pass/$f.cpu.ll) <(grep '!programl' $OUTDIR/pass/$f.cuda.ll) | grep -c '^<'))"
done
echo "== other tasks on huffman and tinyxml2, sampled roots (the default)"
for m in dominance datadep liveness subexpressions; do for f in huffman tinyxml2; do
  run $f.$m.cpu $f $m cpu "dtype=f32;verify"
  run $f.$m.cuda $f $m cuda "verify"
  a=$(grep '!programl' $OUTDIR/pass/$f.$m.cpu.ll | md5sum); b=$(grep '!programl' $OUTDIR/pass/$f.$m.cuda.ll | md5sum)
  echo "$f $m cpu==cuda: $([ "$a" = "$b" ] && echo "same ($(grep -c '!programl' $OUTDIR/pass/$f.$m.cpu.ll) lines)" || echo DIFFER $(diff <(grep '!programl' $OUTDIR/pass/$f.$m.cpu.ll) <(grep '!programl' $OUTDIR/pass/$f.$m.cuda.ll) | grep -c '^<'))"
done; done
echo "== devmap, two kernels"
for m in devmap-amd devmap-nvidia; do
  run two.$m.cpu two_kernels $m cpu "dtype=f32;transfer=4096;wgsize=256"
  run two.$m.cuda two_kernels $m cuda "transfer=4096;wgsize=256"
  grep 'programl.device' $OUTDIR/pass/two.$m.cpu.ll | head -4; grep 'programl.device' $OUTDIR/pass/two.$m.cuda.ll | head -4
done
fi
echo "== device=auto on a GPU machine: the CPU for small work, CUDA for large (AUTO_CUDA_MIN_WORK)"
for r in sample all; do
  LD_DEBUG=files $OPT -load-pass-plugin=$PLUGIN -passes="programl-infer<model=models/reachability;roots=$r>" -S .dev/ir/huffman.ll -o $OUTDIR/pass/auto-$r.ll 2> $OUTDIR/pass/auto-$r.lddebug
  echo "auto roots=$r: runtime opened=$(grep -c 'file=.*libprograml_runtime_cuda.so .*dynamically loaded' $OUTDIR/pass/auto-$r.lddebug) libtorch_cuda initialised=$(grep -c 'calling init: .*libtorch_cuda.so' $OUTDIR/pass/auto-$r.lddebug) annotated_lines=$(grep -c '!programl' $OUTDIR/pass/auto-$r.ll)"
done
[ -f $OUTDIR/pass/huffman.cuda.ll ] || run huffman.cuda huffman reachability cuda "roots=all;verify"
echo "auto roots=all == cuda roots=all: $(cmp -s <(grep '!programl' $OUTDIR/pass/auto-all.ll) <(grep '!programl' $OUTDIR/pass/huffman.cuda.ll) && echo same || echo DIFFER)"
echo "== device=cpu maps no libtorch"
LD_DEBUG=files $OPT -load-pass-plugin=$PLUGIN -passes="programl-infer<model=models/reachability;device=cpu>" -S .dev/ir/huffman.ll -o /dev/null 2> $OUTDIR/pass/cpu.lddebug
echo "cpu: libtorch/c10 mapped=$(grep -c 'file=.*\(libtorch\|libc10\)' $OUTDIR/pass/cpu.lddebug)"
echo "== a bad runtime path is a warning, module unchanged"
PROGRAML_RUNTIME=/nonexistent.so $OPT -load-pass-plugin=$PLUGIN -passes="programl-infer<model=models/reachability;device=cuda>" -S .dev/ir/huffman.ll -o $OUTDIR/pass/bad.ll 2> $OUTDIR/pass/bad.err; echo "rc=$? $(head -c 300 $OUTDIR/pass/bad.err)"

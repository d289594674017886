#!/usr/bin/env bash
# Device check B: programl-train on CUDA (bench, eval against the CPU, a short training run).
set -u
B=$D/bin/programl-train
export LD_LIBRARY_PATH=${TORCHLIB}
mkdir -p $OUTDIR/train
t() { local name=$1; shift; local t0=$(date +%s%N); timeout 120 "$@" > $OUTDIR/train/$name.out 2> $OUTDIR/train/$name.err; local rc=$?
  echo "$name rc=$rc s=$(( ($(date +%s%N)-t0)/1000000 ))ms: $(tail -c 1500 $OUTDIR/train/$name.out | tr '\n' ' ')"; [ $rc = 0 ] || tail -5 $OUTDIR/train/$name.err; }
echo "== bench"
t bench-cuda $B bench --device cuda --json
t bench-cuda-autograd $B bench --device cuda --mode train --autograd --json
t bench-cuda-big $B bench --device cuda --mode infer --batch-nodes 100000 --json
t bench-cuda-big-train $B bench --device cuda --mode train --batch-nodes 100000 --json
t bench-cpu16 $B bench --device cpu --threads 16 --json
echo "== eval on the bzip2 store (train split), cuda against the torch-free CPU in f32"
for task in reachability dominance datadep liveness subexpressions; do
  t eval-$task-cuda $B eval --model models/$task --data .dev/store --split train --device cuda --json
  t eval-$task-cpu $B eval --model models/$task --data .dev/store --split train --device cpu --dtype f32 --threads 16 --json
done
t eval-reach-stop-cuda $B eval --model models/reachability --data .dev/store --split train --device cuda --stop 0.1 --steps 600 --limit 60 --json
t eval-reach-stop-cpu $B eval --model models/reachability --data .dev/store --split train --device cpu --dtype f32 --threads 16 --stop 0.1 --steps 600 --limit 60 --json
echo "== a short training run on CUDA, then its bundle on the CPU"
t train-cuda $B train --task reachability --data .dev/store --out /tmp/trun --device cuda --budget 45s --val-examples 20 --val-every 100
tail -3 /tmp/trun/log.csv
t train-cuda-eval-cpu $B eval --model /tmp/trun/model --data .dev/store --split test --device cpu --dtype f32 --json
t train-cuda-eval-cuda $B eval --model /tmp/trun/model --data .dev/store --split test --device cuda --json
cp /tmp/trun/log.csv $OUTDIR/train/train-cuda-log.csv 2>/dev/null

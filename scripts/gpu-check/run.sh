#!/usr/bin/env bash
# The GPU check, on the device machine (payload: bash scripts/gpu-check/pack.sh).
# Unpacks .dev/, then pass.sh (the learned pass, device=cuda against
# device=cpu) and train.sh (programl-train bench, eval and train on CUDA).
set -u
# ONLY=auto: only the device=auto checks (about a minute).
export D=/tmp/d OUTDIR=$OUT
mkdir -p $D && tar xJf .dev/llvm16.tar.xz -C $D && tar xJf .dev/bins.tar.xz -C $D || { echo unpack failed; exit 1; }
export TORCHLIB=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib
python3 -c 'import torch;print("torch", torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))'
timeout 200 bash .dev/pass.sh 2>&1 | tee $OUT/pass.log
[ "${ONLY:-}" = auto ] || timeout 240 bash .dev/train.sh 2>&1 | tee $OUT/train.log
cd $OUT && tar czf passout.tgz pass train 2>/dev/null; rm -rf pass train; ls -la $OUT

#!/usr/bin/env bash
# session 10, call 3: matmul_backward_dgelu 5 against 4 (check, timing, sanitizers), promoted; the trainer
# before and after against PyTorch at B=16 and B=32; attention 14 (forward) and 13/14 (backward) against cuDNN on the H100
set -u
o=$OUT/c3; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
export COLUMNS=150
for v in 4 5; do t timeout 200 $W run matmul_backward_dgelu $v --no-torch > $o/run-mbd$v.txt 2>&1; done
for v in 4 5 4 5; do t timeout 120 $W run matmul_backward_dgelu $v --no-test-sizes --sizes B=16,T=1024,C=3072,OC=768 --no-torch >> $o/run-mbd-b16.txt 2>&1; done
t timeout 200 $W sanitize matmul_backward_dgelu 5 --tool memcheck --tool racecheck > $o/sanitize-mbd5.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
tr torch_bf16_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
tr ours_bf16_b16_v4 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr ours_bf16_b32_v4 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
t timeout 300 $W promote matmul_backward_dgelu 5 > $o/promote-mbd5.txt 2>&1
tar czf $o/promoted.tgz train/kernels/matmul_backward_dgelu.bf16.cu train/kernels/manifest.json
tr ours_bf16_b16_v5 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr ours_bf16_b32_v5 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
tr torch_bf16_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
tr ours_bf16_b16_v5_2 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:28s} {d.get('median_ms'):8.2f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
if [ $SECONDS -lt 480 ]; then
for v in 9 14 9 14; do t timeout 100 $W run attention_forward $v $A >> $o/attn-fwd.txt 2>&1; done
for v in 9 13 14 9 13 14; do t timeout 100 $W run attention_backward $v $A >> $o/attn-bwd.txt 2>&1; done
fi
cd $OUT && tar czf c3.tgz c3 && rm -rf c3

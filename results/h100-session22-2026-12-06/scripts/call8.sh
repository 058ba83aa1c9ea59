#!/usr/bin/env bash
# session 22, call 8 (H100): matmul_forward_residual 2 and 3 promoted again (their headers' prose
# corrected: the unfused bytes, the trainer's measured gain); the fp32 + TF32 step at B=4 with and
# without the fusion (manifest without / with the two entries), interleaved, beside PyTorch; one bf16
# B=32 run on the new frozen copy; test_gpu_train.py's fused-residual cases on it.
set -u
o=$OUT/c8; mkdir -p $o/train; S_DIR=results/h100-session22-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit8) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; F=matmul_forward_residual
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 100 $W promote $F 2 > $o/promote-2.txt 2>&1
t timeout 100 $W promote $F 3 > $o/promote-3.txt 2>&1
tar czf $OUT/promoted.tgz train/kernels/manifest.json train/kernels/$F*.cu
M=train/kernels/manifest.json; cp $M /tmp/after.json
python3 -c "
import json; m = json.load(open('/tmp/after.json'))
for k in ('matmul_forward_residual', 'matmul_forward_residual.bf16'): m['kernels'].pop(k)
json.dump(m, open('/tmp/before.json', 'w'), indent=1)"
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision fp32 --steps 40 -v 0 -s 0 -b 4"
cp /tmp/before.json $M; tr fp32_warm_before $W train $S --steps 12
cp /tmp/after.json $M; tr fp32_warm_after $W train $S --steps 12
for i in 1 2; do
  cp /tmp/before.json $M; tr fp32_before_$i $W train $S
  cp /tmp/after.json $M; tr fp32_after_$i $W train $S
done
cp /tmp/after.json $M
tr torch_fp32_b4 python3 -m train.torch_baseline --precision fp32 -b 4 --steps 40
tr bf16_b32_after $W train --precision bf16 --steps 30 -v 0 -s 0 -b 32
t timeout 120 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 100 tests/test_gpu_train.py -k "residual or recompute" > $o/test_gpu_train.txt 2>&1
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; tail -n 2 $o/promote-*.txt; tail -n 1 $o/test_gpu_train.txt; cat $o/times.txt

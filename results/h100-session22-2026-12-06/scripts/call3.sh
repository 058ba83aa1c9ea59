#!/usr/bin/env bash
# session 22, call 3 (H100): matmul_forward_residual (new family: the projection GEMM adds the residual
# stream as its C operand) checked (test sizes, 3 seeds), sanitized, timed at B=32's two shapes;
# the trainer at bf16 B=32 (and B=16) beside PyTorch before its promotion, then versions 2 (fp32) and
# 3 (bf16) promoted, the trainer again. The promoted files come back in promoted.tgz.
set -u
o=$OUT/c3; mkdir -p $o/train; S_DIR=results/h100-session22-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
F=matmul_forward_residual
for v in 1 2 3; do t timeout 120 $W run $F $v --seeds 3 --budget 0.5 --json $o/run-$v.json > $o/run-$v.txt 2>&1; done
for s in B=32,T=1024,C=768,OC=768 B=32,T=1024,C=3072,OC=768; do
  t timeout 60 $W run $F 3 --sizes $s --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/run-3-$s.txt 2>&1
done
( t timeout 200 $W sanitize $F --json $o/sanitize.json > $o/sanitize.txt 2>&1 ) &
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0"
tr warm $W train $S -b 32 --steps 15
wait
tr torch_b32_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
tr before_b32_1 $W train $S -b 32
tr before_b32_2 $W train $S -b 32
t timeout 200 $W promote $F 2 > $o/promote-2.txt 2>&1
t timeout 200 $W promote $F 3 > $o/promote-3.txt 2>&1
tar czf $OUT/promoted.tgz train/kernels/manifest.json train/kernels/$F*.cu
tr warm2 $W train $S -b 32 --steps 15
for i in 1 2 3; do tr after_b32_$i $W train $S -b 32; done
tr torch_b32_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
tr after_b32_4 $W train $S -b 32
tr after_side_b32 $W train $S -b 32 --side-stream
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 50
tr after_b16 $W train $S -b 16
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:\|FAIL\|passed\|failed' $f | head -3 | cut -c1-150)"; done
tail -n 15 $o/sanitize.txt; tail -n 4 $o/promote-*.txt; grep -a "fused" $o/train-log.txt | sort | uniq | head
cat $o/times.txt

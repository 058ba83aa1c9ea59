#!/usr/bin/env bash
# session 23, call 2 (H100): qkv_bias_backward 3 checked, sanitized and timed at B=32 beside 2 and
# matmul_backward_bias 8 (the call it replaces); qkv_bias_backward 3 and matmul_backward_dgelu 11
# promoted (call 1's promote failed: promotion_sizes built a relu Program with the new family);
# then the trainer at bf16 B=32, interleaved: HEAD's manifest, with qkv_bias_backward, with both;
# PyTorch beside. The promoted files come back in promoted.tgz.
set -u
o=$OUT/c2; mkdir -p $o/train; S_DIR=results/h100-session23-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
Q=qkv_bias_backward; D=matmul_backward_dgelu
( t timeout 200 $W sanitize $Q 3 --json $o/sanitize-qkv3.json > $o/sanitize-qkv3.txt 2>&1 ) &
t timeout 120 $W run $Q 3 --seeds 3 --budget 0.5 --json $o/run-qkv-3.json > $o/run-qkv-3.txt 2>&1
wait
for v in 2 3; do t timeout 60 $W run $Q $v --sizes B=32,T=1024,C=768 --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/time-qkv$v-b32.txt 2>&1; done
t timeout 60 $W run matmul_backward_bias 8 --sizes B=32,T=1024,OC=2304 --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/time-mbb8-b32.txt 2>&1
M=train/kernels/manifest.json; cp $M /tmp/before.json
t timeout 200 $W promote $Q 3 > $o/promote-qkv.txt 2>&1
cp $M /tmp/qkv.json
t timeout 200 $W promote $D 11 > $o/promote-dgelu.txt 2>&1
cp $M /tmp/both.json
tar czf $OUT/promoted.tgz train/kernels/manifest.json train/kernels/$Q*.cu train/kernels/$D*.cu
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
cp /tmp/both.json $M; tr warm_both $W train $S --steps 12
cp /tmp/before.json $M; tr warm_before $W train $S --steps 12
left 330 && tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2 3 4; do
  left 530 || break
  cp /tmp/before.json $M; tr before_$i $W train $S
  cp /tmp/qkv.json $M; tr qkv_$i $W train $S
  cp /tmp/both.json $M; tr both_$i $W train $S
done
cp /tmp/both.json $M
left 550 && tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt
for f in $o/run-*.txt $o/time-*.txt; do echo "$(basename $f): $(grep -a -h 'passed\|FAIL\|failed' $f | head -2 | cut -c1-160)"; grep -a "│ *[0-9]" $f | head -3 | cut -c1-100; done
tail -n 3 $o/sanitize-*.txt; tail -n 3 $o/promote-*.txt; grep -a "fused\|fuse-gelu" $o/train-log.txt | sort | uniq | head
cat $o/times.txt
tar czf $OUT/c2.tgz -C $OUT c2

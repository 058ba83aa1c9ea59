#!/usr/bin/env bash
# session 23, call 1 (H100): qkv_bias_backward (new family) and matmul_backward_dgelu 11 checked
# (test sizes, 3 seeds), timed at the B=32 step's shapes beside what they replace, sanitized; both
# promoted (the files come back in promoted.tgz); then the trainer at bf16 B=32, interleaved: the
# manifest before (HEAD's), with qkv_bias_backward only, with both; PyTorch beside.
set -u
o=$OUT/c1; mkdir -p $o/train; S_DIR=results/h100-session23-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
Q=qkv_bias_backward; D=matmul_backward_dgelu
( t timeout 240 $W sanitize $Q --json $o/sanitize-qkv.json > $o/sanitize-qkv.txt 2>&1
  t timeout 240 $W sanitize $D 11 --json $o/sanitize-dgelu11.json > $o/sanitize-dgelu11.txt 2>&1 ) &
for v in 1 2; do t timeout 120 $W run $Q $v --seeds 3 --budget 0.5 --json $o/run-qkv-$v.json > $o/run-qkv-$v.txt 2>&1; done
t timeout 120 $W run $D 11 --seeds 3 --budget 0.5 --json $o/run-dgelu-11.json > $o/run-dgelu-11.txt 2>&1
t timeout 60 $W run $Q 2 --sizes B=32,T=1024,C=768 --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/time-qkv2-b32.txt 2>&1
t timeout 60 $W run matmul_backward_bias 8 --sizes B=32,T=1024,OC=2304 --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/time-mbb8-b32.txt 2>&1
for v in 10 11; do t timeout 90 $W run $D $v --sizes B=32,T=1024,C=3072,OC=768 --no-test-sizes --seeds 1 --no-torch --budget 1.0 > $o/time-dgelu$v-b32.txt 2>&1; done
wait
M=train/kernels/manifest.json; cp $M /tmp/before.json
t timeout 200 $W promote $Q 2 > $o/promote-qkv.txt 2>&1
cp $M /tmp/qkv.json
t timeout 200 $W promote $D 11 > $o/promote-dgelu.txt 2>&1
cp $M /tmp/both.json
tar czf $OUT/promoted.tgz train/kernels/manifest.json train/kernels/$Q*.cu train/kernels/$D*.cu
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
cp /tmp/before.json $M; tr warm_before $W train $S --steps 12
cp /tmp/both.json $M; tr warm_both $W train $S --steps 12
left 400 && tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2 3; do
  left 520 || break
  cp /tmp/before.json $M; tr before_$i $W train $S
  cp /tmp/qkv.json $M; tr qkv_$i $W train $S
  cp /tmp/both.json $M; tr both_$i $W train $S
done
cp /tmp/both.json $M
left 540 && tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt
for f in $o/run-*.txt $o/time-*.txt; do echo "$(basename $f): $(grep -a -h 'best:\|FAIL\|passed\|failed\|median' $f | head -3 | cut -c1-160)"; done
tail -n 12 $o/sanitize-*.txt; tail -n 3 $o/promote-*.txt; grep -a "fused\|fuse-gelu" $o/train-log.txt | sort | uniq | head
cat $o/times.txt
tar czf $OUT/c1.tgz -C $OUT c1

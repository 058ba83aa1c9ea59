#!/usr/bin/env bash
# session 21, call 2 (H100): call 1 left --side-stream within the noise (B=32: 54.28 / 54.44 ms
# against 55.07 / 54.20). More runs, interleaved, beside PyTorch: bf16 B=32 4 + 4 and B=16 2 + 2;
# first a warm-up run (the GEMM tuning of a fresh machine) and the B=32 step's per-kernel profile
# (session 20's prof_train.py) after it; matmul_forward_gelu 5 (cuBLASLt) against 14 at B=32; last,
# the side stream's GEMMs told to expect 100 and 116 of the 132 SMs (side_sms.py).
set -u
o=$OUT/c2; mkdir -p $o/train; S_DIR=results/h100-session21-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0"
tr warm $W train $S -b 32 --steps 15
t timeout 120 env PYTHONPATH="$PP" PROF_STEPS=40 python3 results/h100-session20-2026-12-06/scripts/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
for v in 5 14; do
  t timeout 90 $W run matmul_forward_gelu $v --sizes B=32,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-fg-$v-b32.json > $o/run-fg-$v-b32.txt 2>&1
done
tr torch_b32_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2; do tr one_b32_$i $W train $S -b 32 --one-stream; tr side_b32_$i $W train $S -b 32 --side-stream; done
tr torch_b32_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 3 4; do tr side_b32_$i $W train $S -b 32 --side-stream; tr one_b32_$i $W train $S -b 32 --one-stream; done
tr torch_b16_1 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 50
for i in 1 2; do tr one_b16_$i $W train $S -b 16 --one-stream; tr side_b16_$i $W train $S -b 16 --side-stream; done
for sms in 100 116; do
  tr sms${sms}_side_b32 env PYTHONPATH="$PP" SIDE_SMS=$sms python3 $S_DIR/side_sms.py $S -b 32 --side-stream
done
tr one_b32_5 $W train $S -b 32 --one-stream
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-100)"; done
grep -a " ms " $o/prof-bf16-b32.txt | head -60
cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2

#!/usr/bin/env bash
# session 19, call 1 (H100): where issue 27's bars stand on the H100 with the set promoted in
# session 18 (first H100 call since session 11). Attention 15 (ours) against 9 (cuDNN), forward
# and backward, at the trainer's shape, twice each interleaved, and profiled; the trainer against
# PyTorch at bf16 B=16 / 32 (default attention: cuDNN) and fp32+TF32 B=4 (default: TF32 flash),
# ours twice a size; bf16 B=16 with our own attention; B=32 / 64 with --recompute (memory);
# the per-kernel profile of the B=16 step; the trainer-vs-PyTorch equality tests last.
set -u
o=$OUT/c1; mkdir -p $o/train; S_DIR=results/h100-session19-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi > $o/nvidia-smi.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
R="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch"
for i in 1 2; do for f in attention_forward attention_backward; do for v in 9 15; do
  t timeout 90 $W run $f $v $R --json $o/run-$f-$v-$i.json > $o/run-$f-$v-$i.txt 2>&1
done; done; done
wait
t timeout 120 $W profile attention_forward 9 15 --sizes B=16,T=1024 --json $o/prof-af.json > $o/prof-af.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--steps 50 -v 0 -s 0"
tr warm_b16 $W train --precision bf16 $S -b 16
for b in 16 32; do
  tr P_b${b}_1 $W train --precision bf16 $S -b $b
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
  tr P_b${b}_2 $W train --precision bf16 $S -b $b
done
tr P_b16_flash $W train --precision bf16 $S -b 16 --attention flash
tr F_b4_1 $W train --precision fp32 $S -b 4
tr torch_f_b4 python3 -m train.torch_baseline --precision fp32 -b 4 --steps 50
tr F_b4_2 $W train --precision fp32 $S -b 4
tr P_b32_r1 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 32 --recompute 1
tr P_b64_r1 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 64 --recompute 1
tr P_b64_r2 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 64 --recompute 2
t timeout 90 env PYTHONPATH="$PP" python3 $S_DIR/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
t timeout 250 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]; mem = j.get("memory") or {}
    print(n, j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"),
          "buffers GiB %.1f" % (mem.get("buffers", 0) / 2**30), "used GiB %.1f" % (mem.get("gpu_used_after_capture", 0) / 2**30))
PY
cat $o/summary.txt
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-100)"; done
grep -a "duration\|SM throughput\|registers" $o/prof-af.txt | cut -c1-160; head -n 30 $o/prof-bf16-b16.txt | grep -a " ms " 
tail -n 3 $o/gpu_train.txt; cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1

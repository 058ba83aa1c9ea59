#!/usr/bin/env bash
# session 26, call 1 (prepared in session 25 as its call 3; not run there, its device time went to
# failed machine starts): issue 27's bars all measured in one call on an H100, at this tree's promoted set,
# as session 19's call 1 did (~8 minutes; left() skips the tail rather than lose the outputs):
# own attention (forward 17, backward 15, deterministic) against cuDNN (version 9) at the trainer's
# shape, two rounds interleaved; the trainer against PyTorch at bf16 B=16 and B=32 (default
# attention: cuDNN) and fp32 + TF32 B=4, ours interleaved around PyTorch's; MFU from the JSON;
# --recompute at B=32 / 64 (memory and tokens/s); then the trainer-vs-PyTorch equality tests and
# bf16 following fp32 within 2% over 100 steps, and the new power test (workbench/power.py, 703e6e1).
set -u
o=$OUT/c3; mkdir -p $o/train; S_DIR=results/h100-session26-2026-12-06/scripts
export WORKBENCH_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat $S_DIR/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
start=$(date +%s); left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
R="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch"
for i in 1 2; do for fv in "attention_forward 9" "attention_forward 17" "attention_backward 9" "attention_backward 15"; do
  n=${fv// /-}; t timeout 90 $W run $fv $R --json $o/run-$n-$i.json > $o/run-$n-$i.txt 2>&1
done; done
wait
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--steps 50 -v 0 -s 0"
tr warm_b16 $W train --precision bf16 $S -b 16
for b in 16 32; do
  tr P_b${b}_1 $W train --precision bf16 $S -b $b
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
  tr P_b${b}_2 $W train --precision bf16 $S -b $b
done
tr P_b32_3 $W train --precision bf16 $S -b 32
tr F_b4_1 $W train --precision fp32 $S -b 4
tr torch_f_b4 python3 -m train.torch_baseline --precision fp32 -b 4 --steps 50
tr F_b4_2 $W train --precision fp32 $S -b 4
left 420 && tr P_b32_r1 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 32 --recompute 1
left 430 && tr P_b64_r1 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 64 --recompute 1
left 445 && tr P_b64_r2 $W train --precision bf16 --steps 30 -v 0 -s 0 -b 64 --recompute 2
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider"
( left 470 && t timeout 110 $P --timeout 100 tests/test_gpu_train.py -k "match_pytorch or same_losses" > $o/gpu_train.txt 2>&1 ) &
( left 470 && t timeout 110 $P --timeout 100 tests/test_gpu_trainer_runs.py -k "bf16_follows_fp32 or power" > $o/gpu_follows.txt 2>&1 ) &
wait
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]; mem = j.get("memory") or {}
    print(n, j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"),
          "buffers GiB %.1f" % (mem.get("buffers", 0) / 2**30), "used GiB %.1f" % (mem.get("gpu_used_after_capture", 0) / 2**30),
          j.get("power"))
PY
cat $o/summary.txt
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-100)"; done
tail -n 2 $o/gpu_train.txt $o/gpu_follows.txt; cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && cp c3/summary.txt c3/times.txt . && rm -rf c3

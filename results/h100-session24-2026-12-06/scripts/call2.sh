#!/usr/bin/env bash
# session 24, call 2: why call 1's trainer shows no gain from matmul_forward 11: the step's
# per-kernel profile with version 8 (before) and 11 (after, this tree's manifest), and the SM clock and
# power drawn while `workbench train` runs at B=32 (nvidia-smi every 100 ms); exp_bcast.py (the fc bias as a
# broadcast C); the trainer at B=32 before/after interleaved beside PyTorch; then the whole
# `pytest -m gpu` at this commit (three processes, then test_profile_gpu.py alone).
set -u
o=$OUT/c2; mkdir -p $o/train; S_DIR=results/h100-session24-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"; start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
rm -rf /tmp/before /tmp/after; cp -r train/kernels /tmp/after; cp -r train/kernels /tmp/before
tar xzf before_kernels.tgz -C /tmp/before --strip-components=2
use() { rm -rf train/kernels; cp -r /tmp/$1 train/kernels; }
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
prof() { t timeout 90 env PYTHONPATH="$PP" PROF_STEPS=30 python3 results/h100-session20-2026-12-06/scripts/prof_train.py -b 32 > $o/prof-$1.txt 2>&1; }
use before; prof before
use after; prof after
S="--precision bf16 --steps 60 -v 0 -s 0 -b 32"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $o/smi.csv 2>&1 &
smi=$!
sleep 2; use after; t timeout 150 $W train $S --json $o/train/after_smi.json > $o/train-after.txt 2>&1
sleep 2; use before; t timeout 150 $W train $S --json $o/train/before_smi.json > $o/train-before.txt 2>&1
sleep 1; kill $smi
t timeout 60 python3 $S_DIR/exp_bcast.py > $o/exp-bcast.txt 2>&1; cat $o/exp-bcast.txt
for f in before after; do echo "== $f"; grep -a "average step\|GPU time per step" $o/prof-$f.txt; grep -a "nvjet\|fused_class" $o/prof-$f.txt | head -14; done
grep -a "average step" $o/train-*.txt; cat $o/times.txt
python3 - $o/smi.csv <<'PY'
import sys, csv
rows = list(csv.reader(open(sys.argv[1])))[1:]
def f(x):
    try: return float(x.strip().split()[0])
    except Exception: return None
clk = [f(r[1]) for r in rows if len(r) > 4]; pw = [f(r[3]) for r in rows if len(r) > 4]
busy = [(c, p) for c, p in zip(clk, pw) if p and p > 300]
print("samples", len(rows), "busy (power > 300 W)", len(busy))
if busy:
    import statistics as s
    print("sm clock median", s.median(c for c, _ in busy), "min", min(c for c, _ in busy), "power median", s.median(p for _, p in busy), "max", max(p for _, p in busy))
print("throttle reasons seen:", sorted({r[5].strip() for r in rows if len(r) > 5}))
PY
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2; do
  left 230 || break
  use before; tr before_$i $W train $S
  use after; tr after_$i $W train $S
done
left 250 && tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
use after
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=12"
( t timeout 290 $P --timeout 280 tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 290 $P --timeout 280 tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 290 $P --timeout 280 tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
left 570 && t timeout 40 $P --timeout 35 tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -8; tail -n 1 $f; done
cat $o/times.txt
tar czf $OUT/c2.tgz -C $OUT c2

#!/usr/bin/env bash
# session 22, call 4 (H100): the whole `pytest -m gpu` with matmul_forward_residual 2 and 3 promoted
# (three processes, then test_profile_gpu.py alone, as session 20's call 5); then the trainer at bf16
# B=32 with and without the fusion, interleaved (the manifest without the two new entries is "before"),
# beside PyTorch, and the fused step's per-kernel profile (session 20's prof_train.py).
set -u
o=$OUT/c4; mkdir -p $o/train; S_DIR=results/h100-session22-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"; start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train tests > /dev/null 2>&1
timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 220 --durations=12"
( t timeout 230 $P tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 230 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 230 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
t timeout 70 $P tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -5; tail -n 1 $f; done
M=train/kernels/manifest.json; cp $M /tmp/after.json
python3 -c "
import json; m = json.load(open('/tmp/after.json'))
for k in ('matmul_forward_residual', 'matmul_forward_residual.bf16'): m['kernels'].pop(k)
json.dump(m, open('/tmp/before.json', 'w'), indent=1)"
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
cp /tmp/before.json $M; tr warm_before $W train $S --steps 12
cp /tmp/after.json $M; tr warm_after $W train $S --steps 12
left 420 && tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2 3; do
  left 520 || break
  cp /tmp/before.json $M; tr before_$i $W train $S
  cp /tmp/after.json $M; tr after_$i $W train $S
done
cp /tmp/after.json $M
left 500 && t timeout 60 env PYTHONPATH="$PP" PROF_STEPS=30 python3 results/h100-session20-2026-12-06/scripts/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
left 530 && tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; grep -a " ms " $o/prof-bf16-b32.txt | head -30; cat $o/times.txt

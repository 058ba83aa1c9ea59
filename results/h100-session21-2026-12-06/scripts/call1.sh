#!/usr/bin/env bash
# session 21, call 1 (H100): the weight-gradient GEMMs on a side stream (train/streams.py). Does it
# pay? bf16 B=32 and B=16, --one-stream against --side-stream, interleaved; then the GPU test that
# the side stream trains the identical run (plain and under mpirun -np 1).
set -u
o=$OUT/c1; mkdir -p $o/train; S_DIR=results/h100-session21-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0"
tr one_b32_1 $W train $S -b 32 --one-stream
tr side_b32_1 $W train $S -b 32 --side-stream
tr side_b32_2 $W train $S -b 32 --side-stream
tr one_b32_2 $W train $S -b 32 --one-stream
tr one_b16_1 $W train $S -b 16 --one-stream
tr side_b16_1 $W train $S -b 16 --side-stream
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"), j["losses"][-1])
PY
cat $o/summary.txt
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 200"
t timeout 230 $P tests/test_gpu_trainer_runs.py -k side_stream > $o/gpu_side.txt 2>&1
tail -n 5 $o/gpu_side.txt; grep -a "error\|Error" $o/train-log.txt | head; cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1

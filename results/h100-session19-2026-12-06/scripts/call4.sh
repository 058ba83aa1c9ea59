#!/usr/bin/env bash
# session 19, call 4 (H100): attention_forward 17 checked at every size set (3 seeds), under the
# four sanitizers, timed against 9 (cuDNN) and 15 in three interleaved rounds (L2 flushed, 1 s of
# timing a run); if it passes, is clean and beats 15 in every round, promoted (its train/kernels
# files come back), then the trainer's bf16 B=16 with our attention (--attention flash) beside the
# default (cuDNN), and the GPU tests that run our attention in the trainer.
set -u
o=$OUT/c4; mkdir -p $o/train; S_DIR=results/h100-session19-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W run attention_forward 17 --no-torch --json $o/check-17.json > $o/check-17.txt 2>&1; C17=$?
wait
t timeout 200 $W sanitize attention_forward 17 --timeout 150 > $o/sanitize-17.txt 2>&1; S17=$?
R="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0"
for i in 1 2 3; do for v in 9 15 17; do
  t timeout 90 $W run attention_forward $v $R --json $o/run-$v-$i.json > $o/run-$v-$i.txt 2>&1
done; done
python3 - $o > $o/verdict.txt 2>&1 <<'PY'
import json, sys, glob
o = sys.argv[1]; med = {}
for f in sorted(glob.glob(o + "/run-*-*.json")):
    v = json.load(open(f))["families"][0]["versions"][0]
    med.setdefault(v["version"], []).append(list(v["best"].values())[0]["median_us"] if v["status"] == "passed" else None)
print("medians us:", med)
ok = None not in med.get(17, [None]) and all(a < b for a, b in zip(med[17], med[15]))
for k in (15, 17):
    print(f"{k} / cuDNN:", [round(a / c, 4) if a and c else None for a, c in zip(med[k], med[9])])
print("PROMOTE" if ok else "KEEP 15")
PY
cat $o/verdict.txt
if [ $C17 = 0 ] && [ $S17 = 0 ] && grep -q PROMOTE $o/verdict.txt; then
  t timeout 200 $W promote attention_forward 17 > $o/promote.txt 2>&1 && tar czf $o/train-kernels.tgz train/kernels/attention_forward* train/kernels/manifest.json
  tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
  S="--precision bf16 --steps 50 -v 0 -s 0 -b 16"
  tr warm $W train $S --attention flash
  tr flash_1 $W train $S --attention flash
  tr cudnn_1 $W train $S
  tr flash_2 $W train $S --attention flash
  python3 -c "
import json,glob,os
for f in sorted(glob.glob('$o/train/*.json')):
    j=json.load(open(f)); print(os.path.basename(f), j.get('median_ms'), j.get('median_tokens_per_s'), j.get('median_mfu'), j.get('losses',[None])[-1])" > $o/train-summary.txt
  cat $o/train-summary.txt
  P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 200"
  t timeout 230 $P tests/test_gpu_train.py tests/test_gpu_trainer_runs.py -k "recompute or flash" > $o/gpu_tests.txt 2>&1
fi
grep -a -h "check " $o/check-17.txt | cut -c1-150; grep -a "runs clean\|not clean" $o/sanitize-17.txt
tail -n 3 $o/gpu_tests.txt 2>/dev/null; tail -n 4 $o/promote.txt 2>/dev/null; cat $o/times.txt

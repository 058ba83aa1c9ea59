#!/usr/bin/env bash
# session 19, call 2 (H100): attention_forward 16 (version 15 fed by the TMA) checked at every
# size set (the new several-batch one too, 15 beside it), timed against 9 (cuDNN) and 15 in three
# interleaved rounds at the trainer's shape, profiled beside them, run under the four sanitizers.
# If it passes, is clean and beats 15 in every round: promoted here (its train/kernels files come
# back in $OUT), then the trainer's bf16 flash path at B=16 against the default (cuDNN) and the
# GPU tests that run our attention in the trainer.
set -u
o=$OUT/c2; mkdir -p $o/train; S_DIR=results/h100-session19-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W run attention_forward 16 --no-torch --json $o/check-16.json > $o/check-16.txt 2>&1; C16=$?
t timeout 150 $W run attention_forward 15 --no-torch --json $o/check-15.json > $o/check-15.txt 2>&1
wait
R="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0"
for i in 1 2 3; do for v in 9 15 16; do
  t timeout 90 $W run attention_forward $v $R --json $o/run-$v-$i.json > $o/run-$v-$i.txt 2>&1
done; done
t timeout 120 $W profile attention_forward 9 15 16 --sizes B=16,T=1024 --json $o/prof.json > $o/prof.txt 2>&1
t timeout 200 $W sanitize attention_forward 16 --timeout 150 > $o/sanitize-16.txt 2>&1; S16=$?
python3 - $o > $o/verdict.txt 2>&1 <<'PY'
import json, sys, glob
o = sys.argv[1]; med = {}
for f in sorted(glob.glob(o + "/run-*-*.json")):
    v = json.load(open(f))["families"][0]["versions"][0]
    med.setdefault(v["version"], []).append(v["best"]["None"]["median_us"] if v["status"] == "passed" else None)
print("medians us:", med)
ok = all(x is not None for x in med.get(16, [None])) and all(a < b for a, b in zip(med[16], med[15]))
print("cuDNN ratios 15:", [round(a / c, 4) for a, c in zip(med[15], med[9])], "16:", [round(a / c, 4) for a, c in zip(med[16], med[9])] if ok else "-")
print("PROMOTE" if ok else "KEEP 15")
PY
cat $o/verdict.txt
if [ $C16 = 0 ] && [ $S16 = 0 ] && grep -q PROMOTE $o/verdict.txt; then
  t timeout 200 $W promote attention_forward 16 > $o/promote.txt 2>&1 && tar czf $o/train-kernels.tgz train/kernels/attention_forward* train/kernels/manifest.json
  tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
  S="--precision bf16 --steps 50 -v 0 -s 0 -b 16"
  tr warm $W train $S --attention flash
  tr flash_1 $W train $S --attention flash
  tr cudnn_1 $W train $S
  tr flash_2 $W train $S --attention flash
  P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
  t timeout 250 $P tests/test_gpu_train.py tests/test_gpu_trainer_runs.py -k "recompute or flash" > $o/gpu_tests.txt 2>&1
  python3 -c "
import json,glob,os
for f in sorted(glob.glob('$o/train/*.json')):
    j=json.load(open(f)); print(os.path.basename(f), j.get('median_ms'), j.get('median_tokens_per_s'), j.get('losses',[None])[-1])"
fi
grep -a -h "passed\|failed\|FAIL" $o/check-16.txt | head -5; grep -a "runs clean\|not clean\|hazard\|error" $o/sanitize-16.txt | head
grep -a "duration\|SM throughput\|registers\|stall" $o/prof.txt | cut -c1-170; tail -n 3 $o/gpu_tests.txt 2>/dev/null; tail -n 5 $o/promote.txt 2>/dev/null
cat $o/times.txt

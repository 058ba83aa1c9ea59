#!/usr/bin/env bash
# session 26, call 4 (H100): the power meter sampling on a thread every 5 ms, each step's figure the
# mean of its samples (this tree). bf16 B=16 and B=32 runs with the sampler (S) alternating with the
# control (N: scripts/no_sampler.py, one read a step), under an nvidia-smi log of power.draw.instant
# every 100 ms to compare the means; then the power and loop tests.
set -u
o=$OUT/c; mkdir -p $o/train; S_DIR=results/h100-session26-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id,driver_version --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 python3 -m workbench prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 )
nvidia-smi --query-gpu=timestamp,power.draw.instant,power.draw.average,clocks.sm --format=csv,nounits -lms 100 > $o/smi.csv 2>&1 &
SMI=$!
tr() { local name=$1; shift; echo "=== $name $(date +%T.%N): $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; echo "=== end $name $(date +%T.%N)" >> $o/train-log.txt; }
A="--precision bf16 --steps 60 -v 0 -s 0"
S="python3 -m workbench train"; N="python3 $S_DIR/no_sampler.py train"
tr warm $S $A -b 16 --steps 20
for i in 1 2 3; do tr S_b16_$i $S $A -b 16; tr N_b16_$i $N $A -b 16; done
for i in 1 2; do tr S_b32_$i $S $A -b 32; tr N_b32_$i $N $A -b 32; done
kill $SMI
P="python3 -m pytest -q -rs -p no:cacheprovider"
t timeout 150 $P --timeout 100 tests/test_power.py tests/test_train_loop_cpu.py > $o/tests.txt 2>&1
t timeout 100 $P --timeout 90 tests/test_gpu_trainer_runs.py -k power >> $o/tests.txt 2>&1
grep -h "^=== [SNw]\|GPU power\|average step" $o/train-log.txt | cut -c1-230 > $o/summary.txt
cat $o/summary.txt; grep -a "passed\|failed\|FAIL" $o/tests.txt; cat $o/times.txt
cd $OUT && tar czf c.tgz c && cp c/summary.txt c/tests.txt . && rm -rf c

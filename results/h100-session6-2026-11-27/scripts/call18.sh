#!/usr/bin/env bash
# session 6, call 6: cold run first on a fresh machine (as lent), then bench --all (not first: the run warmed the disk), the profile tests and ncu's figures for layernorm_forward 4
set -u
o=$OUT/c18; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-cold-as-lent.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm1.txt 2>&1
t env WORKBENCH_CACHE=/tmp/wbc-bench timeout 250 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/h100-session5-2026-11-27/call8-bench-all-dd677cf-h100.json $o/bench-all.json > $o/compare-dd677cf.txt 2>&1
t env COLUMNS=200 timeout 120 $W profile layernorm_forward 3 4 --json $o/profile-ln-3-4.json > $o/profile-ln-3-4.txt 2>&1
t timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_profile_gpu.py > $o/pytest-profile.txt 2>&1
cd $OUT && tar czf c18.tgz c18 && rm -rf c18

#!/usr/bin/env bash
# session 6, call 5: cold run first on a fresh machine (as lent), warm runs, watch; then the device's site-packages byte-compiled, page cache dropped, workbench cache cleared: cold run again; the whole GPU suite
set -u
o=$OUT/c17; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-cold-as-lent.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm1.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm2.txt 2>&1
t timeout 120 python3 scratch/watch_timing.py /tmp/wt > $o/watch.txt 2>&1
t python3 -m compileall -q -j 16 /opt/torch/.venv/lib/python3.12/site-packages > $o/compileall-venv.txt 2>&1
rm -rf ~/.cache/workbench; sync; echo 3 > /proc/sys/vm/drop_caches; echo "drop_caches rc=$?" >> $o/times.txt
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-cold-pyc.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm-pyc.txt 2>&1
t timeout 520 python3 -m pytest -q -m gpu -p no:cacheprovider > $o/pytest-gpu.txt 2>&1
cd $OUT && tar czf c17.tgz c17 && rm -rf c17

#!/usr/bin/env bash
# session 20, call 4 (H100): after the remote arrive's change (gemm_wgmma.cuh), version 8 (the other
# pairs kernel) timed against 7 and sanitized; every matmul_forward_gelu and matmul_backward_dgelu
# version's GPU test (16 included); then the owed bench --all.
set -u
o=$OUT/c4; mkdir -p $o; S_DIR=results/h100-session20-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
Q="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0"
for i in 1 2; do for v in 7 8 14; do
  t timeout 90 $W run matmul_forward_gelu $v $Q --json $o/run-fg-$v-$i.json > $o/run-fg-$v-$i.txt 2>&1
done; done
t timeout 200 $W sanitize matmul_forward_gelu 8 --timeout 150 > $o/sanitize-fg-8.txt 2>&1
t timeout 300 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 280 tests/test_gpu.py -k "matmul_forward_gelu or matmul_backward_dgelu" > $o/gpu-tests.txt 2>&1
t timeout 330 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-100)"; done
grep -a "runs clean" $o/sanitize-fg-8.txt; tail -n 3 $o/gpu-tests.txt; tail -n 5 $o/bench-all.txt
cat $o/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4

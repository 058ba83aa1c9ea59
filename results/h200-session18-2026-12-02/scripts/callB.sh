#!/usr/bin/env bash
# session 18, call B (H200), dgelu 10 + gelu 14 promoted (working tree): Nsight Compute on our GEMMs
# beside cuBLASLt's at B=16 (summary tables, then a full-set report of gelu 14's and cuBLASLt's
# kernels with per-instruction samples); racecheck of dgelu 10 with no library kernel; the step's
# GPU tests
set -u
o=$OUT/cB; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
ncu --version > $o/ncu-version.txt 2>&1
t timeout 100 $W profile matmul_forward 8 10 --sizes B=16,T=1024,C=768,OC=3072 --json $o/prof-mf.json > $o/prof-mf.txt 2>&1
t timeout 100 $W profile matmul_forward_gelu 5 12 14 --sizes B=16,T=1024 --json $o/prof-g.json > $o/prof-g.txt 2>&1
t timeout 100 $W profile matmul_backward_dgelu 8 10 --sizes B=16,T=1024 --json $o/prof-d.json > $o/prof-d.txt 2>&1
R="--no-test-sizes --seeds 1 --no-torch --budget 0.01 --sizes B=16,T=1024"
t timeout 150 ncu --set full -k regex:'matmul_forward_gelu14' --launch-skip 1 --launch-count 1 -o $o/g14 $W run matmul_forward_gelu 14 $R > $o/ncu-g14.log 2>&1
t timeout 150 ncu --set full -k regex:'sm90|gemm|Kernel' --launch-skip 1 --launch-count 1 -o $o/mf8 $W run matmul_forward 8 --no-test-sizes --seeds 1 --no-torch --budget 0.01 --sizes B=16,T=1024,C=768,OC=3072 > $o/ncu-mf8.log 2>&1
for r in g14 mf8; do
  [ -f $o/$r.ncu-rep ] || continue
  timeout 60 ncu -i $o/$r.ncu-rep --page details --csv > $o/$r-details.csv 2>&1
  timeout 60 ncu -i $o/$r.ncu-rep --page source --csv --print-source sass > $o/$r-source.csv 2>&1
done
python3 scratch/s18/make_probe11.py
( t timeout 200 env PYTHONPATH="$PP" python3 scratch/s18/racecheck_probe.py $o d11-no-library:11 > $o/racecheck-probe.txt 2>&1 ) &
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
( t timeout 250 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1 ) &
( t timeout 250 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
wait
rm -f kernels/matmul_backward_dgelu/11_probe_no_library.cu
cat $o/racecheck-probe.txt; tail -n 2 $o/gpu_*.txt; grep -a "duration\|registers\|SM throughput\|tensor" $o/prof-*.txt | cut -c1-160; cat $o/times.txt
cd $OUT && tar czf cB.tgz cB && rm -rf cB

#!/usr/bin/env bash
# session 15, call 6 (H200): attention_forward 13-15 checked after their mbarrier helpers moved to
# kernels/common/mbarrier.cuh (racecheck on 15); Nsight Compute's full set on matmul_forward_gelu 7 at B=16.
set -u
o=$OUT/c6; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
for v in 13 14 15; do t timeout 100 $W run attention_forward $v --no-torch > $o/run-af$v.txt 2>&1; done
t timeout 100 $W sanitize attention_forward 15 --tool racecheck --tool memcheck --timeout 90 > $o/sanitize-af15.txt 2>&1
t timeout 150 ncu --set full -k regex:matmul_forward_gelu7 -c 1 --export $o/v7 python3 scratch/s15/dbg/time7.py v7.cu > $o/ncu-run.txt 2>&1
t timeout 60 ncu --import $o/v7.ncu-rep --page details > $o/v7-details.txt 2>&1
rm -f $o/v7.ncu-rep
grep -a -h "check \|sizes " $o/run-af*.txt | cut -c1-200; grep -a "runs clean" $o/sanitize-af15.txt
grep -a -i "stall\|issue slot\|Throughput\|L2 \|Duration\|Warp Cycles\|Eligible\|Active Warps\|Bank" $o/v7-details.txt | head -50
cat $o/times.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6

#!/usr/bin/env bash
# session 15, call 7 (H200): matmul_forward_gelu 7's stall reasons by warp state (Nsight Compute raw
# metrics), the whole kernel and its main loop alone, at B=16.
set -u
o=$OUT/c7; mkdir -p $o
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|smsp__pipe_tensor_op_gmma_cycles_active\.avg\.pct_of_peak_sustained_active|sm__throughput\.avg\.pct_of_peak_sustained_elapsed|gpu__time_duration\.sum'
for v in v7 v7_mainloop; do
  timeout 100 ncu --metrics "$M" -k regex:matmul_forward_gelu7 -c 1 python3 scratch/s15/dbg/time7.py $v.cu > $o/ncu-$v.txt 2>&1
done
for v in v7 v7_mainloop; do echo "== $v"; grep -a -E "stalled|gmma|duration|throughput" $o/ncu-$v.txt | awk '$NF+0 > 0.05 || /duration|gmma|throughput/' | sed 's/  */ /g' | cut -c1-120; done
cd $OUT && tar czf c7.tgz c7 && rm -rf c7

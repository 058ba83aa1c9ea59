source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
mkdir -p $OUT/t; for f in vA_nopoll vB_nofetch vC_early_release vD_late_regs vE_late_prefetch vF_cluster; do cp scratch/s9/$f.cu kernels/attention_backward/29_$f.cu; done; S=$(date +%s); X=scratch/s9/bwd_check.py; D=kernels/attention_backward
V14=kernels/attention_backward/14_flash_wgmma_ordered_dq.cu; V13=kernels/attention_backward/13_flash_wgmma_128q.cu
for sz in "2 1024 3" "1 300 2"; do for f in vC_early_release vD_late_regs vE_late_prefetch; do timeout 60 python3 $X check $D/29_$f.cu attention_backward14 $sz 2>&1 | tail -1; done;
 ORDERED=0 CLUSTER=1 SHARED=166912 timeout 60 python3 $X check $D/29_vF_cluster.cu attention_backward15 $sz 2>&1 | tail -4; done | tee $OUT/t/checks.txt
for r in 1 2; do
 ORDERED=0 SHARED=134144 timeout 60 python3 $X bench $V13 attention_backward13 16 1024 12 2>&1 | tail -1
 timeout 60 python3 $X bench $V14 attention_backward14 16 1024 12 2>&1 | tail -1
 for f in vA_nopoll vB_nofetch vC_early_release vD_late_regs vE_late_prefetch; do timeout 60 python3 $X bench $D/29_$f.cu attention_backward14 16 1024 12 2>&1 | tail -1; done
 ORDERED=0 CLUSTER=1 SHARED=166912 timeout 60 python3 $X bench $D/29_vF_cluster.cu attention_backward15 16 1024 12 2>&1 | tail -1
done | tee $OUT/t/bench.txt
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t

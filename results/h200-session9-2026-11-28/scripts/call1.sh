source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t; S=$(date +%s)
X=scratch/s9/bwd_check.py; V14=kernels/attention_backward/14_flash_wgmma_ordered_dq.cu; V13=kernels/attention_backward/13_flash_wgmma_128q.cu
for sz in "2 1024 3" "1 200 2" "1 37 1" "1 300 2" "1 2048 2" "3 129 2"; do timeout 60 python3 $X check $V14 attention_backward14 $sz 2>&1 | grep -vE "^\(|^$" ; done | tee $OUT/t/check14.txt
timeout 60 python3 $X det $V14 attention_backward14 4 1024 12 2>&1 | tail -1 | tee $OUT/t/det.txt
ORDERED=0 SHARED=134144 timeout 60 python3 $X det $V13 attention_backward13 4 1024 12 2>&1 | tail -1 | tee -a $OUT/t/det.txt
echo "$(( $(date +%s) - S ))s"
for r in 1 2; do ORDERED=0 SHARED=134144 timeout 60 python3 $X bench $V13 attention_backward13 16 1024 12 2>&1 | tail -1; timeout 60 python3 $X bench $V14 attention_backward14 16 1024 12 2>&1 | tail -1; done | tee $OUT/t/bench.txt
timeout 200 python3 -m workbench run attention_backward 14 --no-torch > $OUT/t/wb14.txt 2>&1; echo "wb14 rc=$?"; grep -E "passed|failed|FAIL" $OUT/t/wb14.txt | head -5
for v in 9 13 14 9 13 14; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s%N).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; done
grep -h "│" $OUT/t/run*.txt | grep -E "^│ *[0-9]" | head -20
timeout 240 python3 -m workbench sanitize attention_backward 14 --tool memcheck --tool racecheck --tool synccheck > $OUT/t/san14.txt 2>&1; echo "san rc=$?"; tail -5 $OUT/t/san14.txt
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t

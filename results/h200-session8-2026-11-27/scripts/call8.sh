source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t
cp scratch/s8/bwd13.cu kernels/attention_backward/13_v.cu
cp scratch/s8/bwd13_v4.cu kernels/attention_backward/15_v.cu
cp scratch/s8/bwd13_noatom.cu kernels/attention_backward/16_v.cu
S=$(date +%s)
for f in 13 15 16 13 15 16; do SRC=kernels/attention_backward/${f}_v.cu KN=attention_backward13 SHARED=134144 BENCH=1 timeout 60 python3 scratch/s8/bwd_debug.py 16 1024 12 64 2>&1 | grep median; done | tee $OUT/t/bench.txt
SRC=kernels/attention_backward/15_v.cu KN=attention_backward13 SHARED=134144 timeout 60 python3 scratch/s8/bwd_debug.py 2 1024 3 64 2>&1 | grep -v Resources | tee $OUT/t/dbg15.txt
timeout 150 python3 -m workbench run attention_backward 15 --no-torch > $OUT/t/check15.txt 2>&1; echo "check 15 rc=$? $(( $(date +%s) - S ))s"; grep -hE "check |best|FAIL|rror|C75" $OUT/t/check15.txt | tail -3
for v in 9 13 15 9 13 15; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -1; done
timeout 240 python3 -m workbench profile attention_backward 9 13 --sizes B=16,T=1024,NH=12,HS=64 > $OUT/t/profile.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t

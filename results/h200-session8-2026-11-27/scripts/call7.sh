source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t
cp scratch/s8/bwd13.cu kernels/attention_backward/13_v.cu
cp scratch/s8/bwd14.cu kernels/attention_backward/14_v.cu
S=$(date +%s)
export SRC=kernels/attention_backward/14_v.cu KN=attention_backward14 SHARED=166912
for sz in "1 200 2 64" "1 64 1 64" "2 1024 3 64" "1 37 2 64" "1 300 1 64"; do timeout 60 python3 scratch/s8/bwd_debug.py $sz; done 2>&1 | grep -v Resources | tee $OUT/t/dbg14.txt
unset SRC KN SHARED
echo "dbg $(( $(date +%s) - S ))s"
for x in "kernels/attention_backward/13_v.cu attention_backward13 134144" "kernels/attention_backward/14_v.cu attention_backward14 166912"; do set -- $x; SRC=$1 KN=$2 SHARED=$3 BENCH=1 timeout 60 python3 scratch/s8/bwd_debug.py 16 1024 12 64 2>&1 | grep median; done | tee $OUT/t/bench.txt
for v in 13 14; do timeout 150 python3 -m workbench run attention_backward $v --no-torch > $OUT/t/check$v.txt 2>&1; echo "check $v rc=$? $(( $(date +%s) - S ))s"; grep -hE "check |best|FAIL|rror|C75" $OUT/t/check$v.txt | tail -3; done
for v in 9 12 13 14 9 13 14; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -1; done
for v in 12 13 14; do timeout 200 python3 -m workbench sanitize attention_backward $v --tool memcheck --tool racecheck --tool synccheck > $OUT/t/sanitize$v.txt 2>&1; echo "sanitize v$v rc=$? $(( $(date +%s) - S ))s"; grep -hE "runs clean|not clean|error" $OUT/t/sanitize$v.txt | tail -2; done
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t

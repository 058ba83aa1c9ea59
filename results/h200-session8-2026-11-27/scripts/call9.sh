source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t
cp scratch/s8/bwd13.cu kernels/attention_backward/13_v.cu
cp scratch/s8/bwd13_desc.cu kernels/attention_backward/15_v.cu
cp scratch/s8/bwd13_rot.cu kernels/attention_backward/16_v.cu
for f in 15 16; do for sz in "2 1024 3 64" "1 300 1 64"; do SRC=kernels/attention_backward/${f}_v.cu KN=attention_backward13 SHARED=134144 timeout 60 python3 scratch/s8/bwd_debug.py $sz 2>&1 | grep -E "bad|err"; done; done | tee $OUT/t/dbg.txt
for f in 13 15 16 13 15 16; do SRC=kernels/attention_backward/${f}_v.cu KN=attention_backward13 SHARED=134144 BENCH=1 timeout 60 python3 scratch/s8/bwd_debug.py 16 1024 12 64 2>&1 | grep median; done | tee $OUT/t/bench.txt
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t

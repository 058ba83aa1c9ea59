source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
echo "commit $(cat scratch/commit)" > $OUT/pytest-gpu.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/pytest-gpu.txt
if python3 -c "import xdist" 2>/dev/null; then N="-n 3"; else N=""; fi
echo "xdist: ${N:-none}" >> $OUT/pytest-gpu.txt
start=$(date +%s)
timeout 440 python3 -m pytest -m gpu -q $N --durations=25 -p no:cacheprovider >> $OUT/pytest-gpu.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/pytest-gpu.txt
tail -45 $OUT/pytest-gpu.txt

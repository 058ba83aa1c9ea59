source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
export WG_VERSION=13
for sz in "1 200 2 64" "1 960 2 64" "2 1024 3 64" "1 37 2 64"; do timeout 60 python3 scratch/wg_debug.py $sz; done 2>&1 | grep -v Resources | tee $OUT/dbg.txt
for v in 9 12 13 12 13; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "best|FAIL|fail|rror" $OUT/run$v-b16.txt | head -3; done
timeout 200 python3 -m workbench run attention_forward 13 --fresh-baselines > $OUT/run13.txt 2>&1; grep -E "check |best|torch" $OUT/run13.txt
timeout 200 python3 -m workbench sanitize attention_forward 13 --tool memcheck --tool racecheck --tool synccheck > $OUT/sanitize13.txt 2>&1; grep -E "clean|error|hazard|verdict|runs" $OUT/sanitize13.txt | tail -8

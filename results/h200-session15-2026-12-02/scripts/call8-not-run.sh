#!/usr/bin/env bash
# session 15, call 8 (H200): why the main-loop-only variant faulted with exactly its ring's shared memory
set -u
o=$OUT/c8; mkdir -p $o
cd scratch/s15/dbg
timeout 40 python3 once.py ml_192x4.cu 216128 > $o/big.txt 2>&1
timeout 40 python3 once.py ml_192x4.cu 164928 > $o/small.txt 2>&1
timeout 60 compute-sanitizer --tool memcheck python3 once.py ml_192x4.cu 164928 > $o/memcheck-small.txt 2>&1
for f in big small memcheck-small; do echo "== $f"; grep -a -v "^\s*$\|Warn\|warning" $o/$f.txt | head -30 | cut -c1-200; done
cd $OUT && tar czf c8.tgz c8 && rm -rf c8

# experiment only: cap the reference pool at $REF_WORKERS and the compile pool at $COMPILE_WORKERS processes
import os
for mod, var in (("workbench.cases", "REF_WORKERS"), ("workbench.compiles", "COMPILE_WORKERS")):
    n = os.environ.get(var)
    if n:
        try:
            import importlib
            m = importlib.import_module(mod)
            orig = m.niced_pool
            m.niced_pool = lambda workers, niceness, orig=orig, n=int(n): orig(min(workers, n), niceness)
        except Exception as e:
            print("pool patch failed:", e)

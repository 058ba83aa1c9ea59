"""Save-to-table of run --watch on a project copy: three edits, the seconds each took."""
import os, queue, shutil, signal, subprocess, sys, threading, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
tmp = Path(sys.argv[1]); root = tmp / "project"
for part in ("kernels/layernorm_forward", "kernels/common", "references"):
    shutil.copytree(ROOT / part, root / part)
src = next((root / "kernels/layernorm_forward").glob("4_*.cu"))
env = {**os.environ, "WORKBENCH_ROOT": str(root), "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
cmd = [sys.executable, str(ROOT / "scratch/trace_run.py")] if os.environ.get("TRACE") else [sys.executable, "-m", "workbench"]
p = subprocess.Popen([*cmd, "run", "layernorm_forward", "4", "--watch"], env=env, cwd=root,
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
q = queue.Queue(); threading.Thread(target=lambda: [q.put(l) for l in p.stdout], daemon=True).start()
def wait(text, t=120):
    end = time.monotonic() + t
    while time.monotonic() < end:
        try: l = q.get(timeout=0.2)
        except queue.Empty: continue
        sys.stdout.write(l)
        if text in l: return l
    raise SystemExit(f"no {text}")
t0 = time.monotonic(); wait("watching"); print(f"## first table after {time.monotonic()-t0:.2f} s")
for i in range(4):
    time.sleep(1.0)
    t0 = time.monotonic(); src.write_text(src.read_text() + f"\n// edit {i}\n")
    l = wait("saved 4_"); print(f"## edit {i}: {time.monotonic()-t0:.2f} s by the clock here | {l.strip()}")
    wait("watching")
os.killpg(p.pid, signal.SIGINT); print("## exit", p.wait(timeout=30))

"""The device, as the parent process knows it: `probe_device` asks a fresh child (its name,
compute capability, memory, the measured copy ceiling and any measured matmul peaks), and keeps
the answer on disk keyed by what the driver says about the machine's GPUs without a CUDA context
(/proc/driver/nvidia: the driver's version, each GPU's model and bus), so a later session on the
same machine starts without a probe child: the probe (a process, its imports and a CUDA context)
was about a second of every `workbench run`. A different GPU, driver or CUDA_VISIBLE_DEVICES is
a different key; where /proc/driver/nvidia is not readable every session probes."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from pathlib import Path

from .compile import CACHE_DIR
from .errors import NoGPU
from .files import write_text_atomic
from .isolate import run_job
from .options import Progress
from .timing import peaks_for

DRIVER_PROC = Path("/proc/driver/nvidia")
CACHE_FILE = "device.json"


def host_identity(proc: Path = DRIVER_PROC) -> str | None:
    """What the kernel driver says about this machine's GPUs (no CUDA needed), with the
    process's CUDA_VISIBLE_DEVICES; None where it cannot be read."""
    try:
        parts = [(proc / "version").read_text().splitlines()[0]]
        gpus = sorted((proc / "gpus").iterdir())
        if not gpus:
            return None
        for g in gpus:
            info = (g / "information").read_text()
            parts.append(g.name + ":" + " ".join(line.strip() for line in info.splitlines()
                                                   if line.split(":")[0].strip() in ("Model", "Bus Location", "GPU UUID")))
    except (OSError, IndexError):
        return None
    parts.append("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    return "\n".join(parts)


def _key(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def cached_probe(identity: str | None, cache_dir: Path | None = None) -> dict | None:
    """The probe's answer kept for this identity, with the peaks measured since (timing.PEAK_FILE)."""
    if identity is None:
        return None
    cache_dir = cache_dir or CACHE_DIR
    try:
        known = json.loads((cache_dir / CACHE_FILE).read_text())
        hit = known[_key(identity)]
    except (OSError, ValueError, KeyError):
        return None
    return {**hit, "peaks": _peaks(hit["device"], cache_dir)}


def keep_probe(identity: str | None, answer: dict, cache_dir: Path | None = None) -> None:
    if identity is None:
        return
    cache_dir = cache_dir or CACHE_DIR
    path = cache_dir / CACHE_FILE
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        known = {}
    known[_key(identity)] = {"device": answer["device"], "ceiling": answer["ceiling"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(known, indent=1))


def _peaks(device: dict, cache_dir: Path) -> dict[str, float]:
    """The matmul peaks `workbench doctor` measured on this device (none where its file is unreadable)."""
    try:
        return peaks_for(device, cache_dir)
    except (OSError, ValueError):
        return {}


def probe_device(root: Path, refresh: bool, timeout: float, progress: Progress) -> dict:
    """The device as a fresh child finds it: {"device": ..., "ceiling": ..., "peaks": ...}
    (the copy ceiling measured again with `refresh`, else read from its cache); NoGPU when there
    is no usable GPU (or no PyCUDA). Without `refresh`, the answer kept for this machine's
    identity is used, with no child at all."""
    require_pycuda()
    identity = host_identity()
    if not refresh and (hit := cached_probe(identity)) is not None:
        return hit
    progress("measuring the device's copy bandwidth (cached after the first run)")
    res = run_job({"job": "probe", "root": str(root), "refresh": refresh}, timeout)
    if res.get("status") == "no_gpu":
        raise NoGPU(f"{res['reason']}. The workbench needs an NVIDIA GPU with a working "
                    "driver; without one, use Modal: modal run modal_app.py")
    if res.get("status") != "passed":
        raise NoGPU(f"the device probe failed: {res.get('reason', res.get('status'))}")
    answer = {"device": res["device"], "ceiling": res["ceiling"], "peaks": res.get("peaks") or {}}
    keep_probe(identity, answer)
    return answer


class Probe:
    """The device for a session: probe_device, asked once; on a machine with no kept probe it
    can start early (start) in a thread, so the probe's child (~2 s) overlaps the parent's own
    work (the references), and `get` waits for it. An error it met is raised by `get`."""

    def __init__(self, root: Path, timeout: float, progress: Progress):
        self.root, self.timeout, self.progress = root, timeout, progress
        self._thread: threading.Thread | None = None
        self._answer: dict | None = None
        self._error: BaseException | None = None

    def start(self) -> bool:
        """Start the probe in a thread on a machine never probed; True while it is under way
        (nothing can have been kept for a device not yet seen)."""
        require_pycuda()  # here, at once: a machine without it must not compute references first
        if self._thread is None and self._answer is None and cached_probe(host_identity()) is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self._thread is not None

    def _run(self) -> None:
        try:
            self._answer = probe_device(self.root, False, self.timeout, self.progress)
        except BaseException as e:  # raised where the device is asked for
            self._error = e

    def get(self, refresh: bool = False) -> dict:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
        if self._answer is None or refresh:
            self._answer = probe_device(self.root, refresh, self.timeout, self.progress)
        return self._answer


def require_pycuda() -> None:
    if importlib.util.find_spec("pycuda") is None:
        raise NoGPU("PyCUDA is not installed. On a machine with a CUDA GPU and toolkit: "
                    "pip install -e '.[gpu]'  (or use Modal: modal run modal_app.py)")

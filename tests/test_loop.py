"""The daily loop's parts that need no GPU: the device's identity and the probe kept for it, the
baselines kept between runs, what `run --watch` watches and when it wakes, the change line, and
the CLI's refusals."""

import datetime
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench import device, watch
from workbench.timing import PEAK_FILE
from workbench.baselines import BaselineCache, KeptBaselines, baseline_key
from workbench.cli.app import cli
from workbench.family import Project
from workbench.options import Options
from workbench.report import change_line
from workbench.results import Measured, Row, Timing

from conftest import ROOT


def fake_proc(tmp_path: Path, model="NVIDIA H100 80GB HBM3", bus="0000:19:00.0", driver="580.159.04") -> Path:
    proc = tmp_path / "nvidia"
    (proc / "gpus" / bus).mkdir(parents=True)
    (proc / "version").write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build\n")
    (proc / "gpus" / bus / "information").write_text(
        f"Model: \t\t {model}\nIRQ:   \t\t 0\nGPU UUID: \t GPU-1234\nBus Location: \t {bus}\n")
    return proc


def test_the_identity_names_the_driver_the_gpus_and_the_visible_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one = device.host_identity(fake_proc(tmp_path / "a"))
    assert "580.159.04" in one and "H100" in one and "0000:19:00.0" in one
    assert device.host_identity(fake_proc(tmp_path / "b", driver="590.1")) != one
    assert device.host_identity(fake_proc(tmp_path / "c", model="NVIDIA H200")) != one
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert device.host_identity(fake_proc(tmp_path / "d")) != one
    assert device.host_identity(tmp_path / "missing") is None  # then every session probes


def test_a_probe_is_kept_per_identity_with_the_peaks_measured_since(tmp_path):
    answer = {"device": {"name": "H100", "pci": "0000:19:00.0", "driver": 13000}, "ceiling": {"gbps": 3012.0},
              "peaks": {"bf16": 700.0}}
    assert device.cached_probe("machine A", tmp_path) is None
    device.keep_probe("machine A", answer, tmp_path)
    hit = device.cached_probe("machine A", tmp_path)
    assert hit["device"] == answer["device"] and hit["ceiling"] == answer["ceiling"]
    assert hit["peaks"] == {}  # peaks are read from doctor's file, not frozen in the probe
    (tmp_path / PEAK_FILE).write_text('{"H100|0000:19:00.0|13000|bf16": 712.5, "other|x|1|bf16": 1.0}')
    assert device.cached_probe("machine A", tmp_path)["peaks"] == {"bf16": 712.5}
    assert device.cached_probe("machine B", tmp_path) is None
    assert device.cached_probe(None, tmp_path) is None
    device.keep_probe(None, answer, tmp_path)  # no identity: nothing kept, nothing breaks


def torch_row(status="passed") -> Row:
    r = Row("torch", "layernorm_forward", title="torch", status=status, expression="F.layer_norm(...)")
    r.timings = {None: Measured(None, Timing(34.7, 34.0, 35.5, 100, 0.04), 1454.0, 48.3)}
    return r


def test_kept_baselines_come_back_marked_and_expire_after_a_day(tmp_path):
    family = Project(ROOT).family("layernorm_forward")
    sizes = family.parse_sizes(None)
    clock = [datetime.datetime(2026, 11, 27, 10, 0)]
    cache = BaselineCache(tmp_path, now=lambda: clock[0])
    dev = {"name": "H100", "pci": "0000:19:00.0", "driver_version": "580"}
    kept = KeptBaselines(Options(kept_baselines=True), lambda: dev, cache)
    assert kept.get(family, sizes, "fp32") is None
    kept.put(family, sizes, "fp32", [torch_row()])
    rows = kept.get(family, sizes, "fp32")
    assert [r.kind for r in rows] == ["torch"] and rows[0].best.median_us == 34.7
    assert rows[0].extra["kept_from"] == "2026-11-27T10:00:00"
    assert kept.get(family, {**sizes, "B": 4}, "fp32") is None          # other sizes
    assert KeptBaselines(Options(kept_baselines=True, budget=1.0), lambda: dev, cache).get(family, sizes, "fp32") is None
    assert KeptBaselines(Options(kept_baselines=True), lambda: {**dev, "name": "H200"}, cache).get(family, sizes, "fp32") is None
    assert KeptBaselines(Options(), lambda: dev, cache).get(family, sizes, "fp32") is None  # bench: never
    clock[0] += datetime.timedelta(hours=25)
    assert kept.get(family, sizes, "fp32") is None


def test_a_failed_baseline_is_not_kept(tmp_path):
    family = Project(ROOT).family("layernorm_forward")
    cache = BaselineCache(tmp_path)
    kept = KeptBaselines(Options(kept_baselines=True), lambda: {"name": "H100"}, cache)
    kept.put(family, family.parse_sizes(None), "fp32", [torch_row("failed")])
    assert kept.get(family, family.parse_sizes(None), "fp32") is None


def test_the_key_follows_the_family_files(tmp_path):
    project = Project(ROOT)
    family = project.family("layernorm_forward")
    sizes = family.parse_sizes(None)
    key = baseline_key(family, sizes, "fp32", Options(), {"name": "H100"}, [])
    assert key == baseline_key(family, sizes, "fp32", Options(), {"name": "H100"}, [])
    assert key != baseline_key(family, sizes, "bf16", Options(), {"name": "H100"}, [])
    assert key != baseline_key(family, sizes, "fp32", Options(flush=False), {"name": "H100"}, [])


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_watch_follows_the_local_headers(tmp_path):
    v = tmp_path / "kernels" / "fam" / "2_x.cu"
    write(v, '#include "own.cuh"\n#include "shared.cuh"\n#include <cuda_bf16.h>\n')
    write(tmp_path / "kernels" / "fam" / "own.cuh", "// mine\n")
    write(tmp_path / "kernels" / "common" / "shared.cuh", '#include "deeper.cuh"\n')
    write(tmp_path / "kernels" / "common" / "deeper.cuh", "// deeper\n")
    names = [p.name for p in watch.build_files(v)]
    assert names == ["2_x.cu", "own.cuh", "shared.cuh", "deeper.cuh"]


def test_watch_wakes_on_a_save_of_a_header_and_names_it(tmp_path):
    v = tmp_path / "kernels" / "fam" / "1_x.cu"
    write(v, '#include "h.cuh"\n')
    header = tmp_path / "kernels" / "common" / "h.cuh"
    write(header, "// one\n")
    since = watch.stamp(v)
    result = {}

    def waiter():
        result["got"] = watch.wait_for_change(v, since)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()  # nothing changed: still waiting
    header.write_text("// two, longer\n")
    t.join(timeout=10)
    assert not t.is_alive(), "the save was not seen"
    stamp, changed = result["got"]
    assert changed == [str(header.resolve())] and stamp == watch.stamp(v)


def test_watch_waits_for_a_save_in_steps_to_settle(tmp_path):
    v = tmp_path / "kernels" / "fam" / "1_x.cu"
    write(v, "a\n")
    since = watch.stamp(v)
    writes = iter(["ab\n", "abc\n", "abcd\n"])

    def sleep(_):  # each pause of the watcher sees one more write, then none
        nxt = next(writes, None)
        if nxt is not None:
            v.write_text(nxt)

    stamp, changed = watch.wait_for_change(v, since, sleep=sleep)
    assert v.read_text() == "abcd\n" and stamp == watch.stamp(v) and changed == [str(v.resolve())]


def timed_row(us: dict[int, float], status="passed") -> Row:
    r = Row("version", "layernorm_forward", 4, "x", status=status)
    r.timings = {bs: Measured(bs, Timing(t, t, t, 10, 0.0), 1000.0, 33.0) for bs, t in us.items()}
    return r


def test_the_change_line_says_what_moved():
    prev, now = timed_row({256: 30.0, 512: 29.8}), timed_row({256: 27.0, 512: 26.8})
    now.phases = {"load": 0.512, "setup": 0.001, "check": 0.14, "time": 0.21, "re-check": 0.004}
    text = change_line(prev, now, ["/x/4_one_pass.cu"], 1.234).plain
    assert "saved 4_one_pass.cu; 1.23 s from the save to this table (compile 0.51 s, check 0.14 s, time 0.21 s)" in text
    assert "29.8 µs -> 26.8 µs (-10.1%)" in text and "256: -10.0%" in text
    assert "first run" in change_line(None, now).plain
    failed = change_line(prev, timed_row({}, status="failed")).plain
    assert "failed" in failed and "last passing run" in failed


def test_watch_and_sweep_are_refused_together_before_any_gpu_work():
    r = CliRunner().invoke(cli, ["run", "layernorm_forward", "4", "--watch", "--sweep", "C=256..1024"])
    assert r.exit_code == 2 and "--watch and --sweep" in r.output
    r = CliRunner().invoke(cli, ["run", "--help"])
    assert "--watch" in r.output and "--fresh-baselines" in r.output


def test_a_session_probes_once_per_machine_then_reads_what_it_kept(tmp_path, monkeypatch):
    """probe_device asks a child the first time (here a stand-in for the child's answer: what is
    tested is the parent's caching), keeps the answer under this machine's identity, and the next
    session asks no child; --refresh (refresh=True) always asks."""
    calls = []

    def child(req, timeout):
        calls.append(req)
        return {"status": "passed", "device": {"name": "H100", "pci": "0000:19:00.0", "driver": 13000},
                "ceiling": {"gbps": 3012.0}, "peaks": {}}

    monkeypatch.setattr(device, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(device, "run_job", child)
    monkeypatch.setattr(device, "require_pycuda", lambda: None)
    monkeypatch.setattr(device, "host_identity", lambda: "this machine")
    first = device.probe_device(ROOT, False, 10, lambda text: None)
    again = device.probe_device(ROOT, False, 10, lambda text: None)
    assert len(calls) == 1 and again["ceiling"] == first["ceiling"] == {"gbps": 3012.0}
    device.probe_device(ROOT, True, 10, lambda text: None)
    assert len(calls) == 2
    monkeypatch.setattr(device, "host_identity", lambda: None)  # unreadable: every session probes
    device.probe_device(ROOT, False, 10, lambda text: None)
    assert len(calls) == 3


def test_a_rows_job_travels_typed_and_every_field_is_said(tmp_path, monkeypatch):
    """Session.request writes the RowJob the child reads back; nothing is guessed on the way: a
    request without one of its fields is refused (KeyError), and a copy baseline's own bytes
    replace the family's."""
    import json

    from workbench.bench import Session
    from workbench.options import RowJob
    project = Project(ROOT)
    family = project.family("layernorm_forward")
    session = Session(project, Options(budget=0.7, flush=False))
    session._probe._answer = {"device": {"name": "H100"}, "ceiling": {"gbps": 3000.0}, "peaks": {}}
    req = json.loads(json.dumps(session.request(family, family.parse_sizes(None), "fp32")))
    job = RowJob.from_request(req)
    assert (job.budget, job.flush, job.time, job.screen, job.ceiling_gbps) == (0.7, False, True, True, 3000.0)
    assert job.bytes == family.bytes_moved(family.parse_sizes(None), "fp32") and job.flops == family.flops_done(family.parse_sizes(None))
    assert RowJob.from_request(req, bytes=123).bytes == 123 and RowJob.from_request(req, bytes=None).bytes == job.bytes
    del req["budget"]
    with pytest.raises(KeyError):
        RowJob.from_request(req)
    session.close()


@pytest.mark.parametrize("verb", ["run", "profile"])
def test_sizes_a_version_refuses_are_one_line_before_any_gpu_work(verb):
    r = CliRunner().invoke(cli, [verb, "matmul_backward_dgelu", "3", "--sizes", "B=1,T=2,C=37,OC=5"])
    assert r.exit_code != 0 and "PyCUDA" not in r.output and "ncu" not in r.output
    assert "matmul_backward_dgelu 3 refuses B=1,T=2,C=37,OC=5: it requires C % 8 == 0" in r.output


class FakePool:
    def __init__(self):
        self.jobs = []

    def submit(self, fn, args):
        from concurrent.futures import Future
        self.jobs.append(args)
        done = Future()
        done.set_result(None)
        return done


def test_compiles_start_only_what_is_not_cached_and_a_warm_session_starts_no_pool(tmp_path, monkeypatch):
    """A one-version command starts its version's and the harness kernels' compiles before the
    probe; what the cache already holds (for the arch the kept probe names) starts nothing, and
    without a known arch everything goes to the pool, whose process asks the driver."""
    from workbench import compile as wb_compile
    from workbench import compiles
    from workbench.compiles import Compiles, harness_sources
    from workbench.ledger import Ledger
    pools = []
    monkeypatch.setattr(compiles, "niced_pool", lambda *a: pools.append(FakePool()) or pools[-1])
    v = Project(ROOT).family("layernorm_forward").version(4)
    cached = set()
    monkeypatch.setattr(wb_compile, "is_cached", lambda path, arch, source=None: (path, source) in cached)

    c = Compiles(Ledger(), lambda text: None)
    c.start([v], None)   # a fresh machine: no kept probe, no arch
    assert len(pools) == 1 and [j[1] for j in pools[0].jobs] == [None] * 7
    assert pools[0].jobs[0][0] == str(v.path) and [j[2] for j in pools[0].jobs[1:]] == harness_sources()
    c.start([v], None)   # already started: not again
    assert len(pools[0].jobs) == 7

    cached |= {(v.path, None)} | {(None, src) for src in harness_sources()}
    warm = Compiles(Ledger(), lambda text: None)
    warm.start([v], "sm_90")
    assert len(pools) == 1, "a warm session started a compile pool"
    cached.discard((v.path, None))  # the version was edited: only it is compiled
    warm.start([v], "sm_90")
    assert len(pools) == 2 and pools[1].jobs == [(str(v.path), "sm_90", None)]


def test_the_cache_key_is_the_one_compile_cubin_reads(tmp_path, monkeypatch):
    from workbench import compile as wb_compile
    monkeypatch.setattr(wb_compile, "CACHE_DIR", tmp_path)
    v = Project(ROOT).family("layernorm_forward").version(4)
    assert not wb_compile.is_cached(v.path, "sm_90")
    key = wb_compile._keyed(v.path, "sm_90", None)[-1]
    key.parent.mkdir(parents=True)
    key.with_suffix(".cubin").write_bytes(b"x")
    assert not wb_compile.is_cached(v.path, "sm_90"), "a cubin without its report is not a cache entry"
    key.with_suffix(".json").write_text("{}")
    assert wb_compile.is_cached(v.path, "sm_90") and not wb_compile.is_cached(v.path, "sm_80")


def test_the_watch_the_cache_key_and_flatten_see_the_same_headers_for_every_version():
    """One resolver (compile.find_header) behind all three: the files the watch follows, the
    headers the compile cache keys on and those promote's flattened copy inlines are the same."""
    import re

    from workbench import compile as wb_compile
    for fam in Project(ROOT).families():
        for v in fam.versions:
            followed = watch.build_files(v.path)[1:]
            dirs = wb_compile.include_dirs(v.path)
            keyed = wb_compile._local_includes(wb_compile.source_for(v.path), dirs)
            inlined = re.findall(r"^// ---- begin (\S+) ----$", wb_compile.flatten(v.path), re.M)
            assert sorted(f.name for f in followed) == sorted(inlined), v.label
            assert all(f.read_text() in keyed for f in followed), v.label


def test_start_ahead_compiles_for_the_kept_probes_arch_and_asks_the_driver_without_one(monkeypatch):
    from workbench import compile as wb_compile
    from workbench import compiles, device
    from workbench.compiles import Compiles
    from workbench.ledger import Ledger
    pools = []
    monkeypatch.setattr(compiles, "niced_pool", lambda *a: pools.append(FakePool()) or pools[-1])
    monkeypatch.setattr(wb_compile, "is_cached", lambda path, arch, source=None: False)
    v = Project(ROOT).family("layernorm_forward").version(4)
    monkeypatch.setattr(device, "cached_probe", lambda identity: {"device": {"compute_capability": "8.6"}})
    Compiles(Ledger(), lambda text: None).start_ahead([v])
    monkeypatch.setattr(device, "cached_probe", lambda identity: None)
    Compiles(Ledger(), lambda text: None).start_ahead([v])
    assert {j[1] for j in pools[0].jobs} == {"sm_86"} and {j[1] for j in pools[1].jobs} == {None}


def test_kept_baselines_are_not_looked_up_on_a_machine_never_probed(tmp_path, monkeypatch):
    """run starts the baselines' child before the probe on a fresh machine: head_start does not
    look for kept rows there, where asking for the device would wait for the probe."""
    from workbench.bench import Session
    family = Project(ROOT).family("layernorm_forward")
    sizes = family.parse_sizes(None)
    asked = []
    dev = {"name": "H100", "pci": "0000:19:00.0", "driver_version": "580"}
    cache = BaselineCache(tmp_path)
    KeptBaselines(Options(kept_baselines=True), lambda: dev, cache).put(family, sizes, "fp32", [torch_row()])
    monkeypatch.setattr(device, "require_pycuda", lambda: None)
    monkeypatch.setattr(device, "host_identity", lambda: "machine A")
    monkeypatch.setattr(device, "probe_device", lambda *a: {"device": dev})

    def started(options, sizes, probed):
        monkeypatch.setattr(device, "cached_probe", lambda identity: {"device": dev} if probed else None)
        session = Session(Project(ROOT), options)
        session.kept = KeptBaselines(options, lambda: asked.append(1) or dev, cache)
        baselines = []
        monkeypatch.setattr(session.children, "versions", lambda ops=(): None)
        monkeypatch.setattr(session.children, "baselines", lambda warm=(): baselines.append(warm))
        try:
            session.head_start(family, sizes, "fp32")
        finally:
            session.close()
        assert baselines in ([], [[(family, "fp32")]]), "the child warms the family's torch expression"
        return bool(baselines)
    assert started(Options(kept_baselines=True), sizes, probed=False) is True and asked == []
    assert started(Options(kept_baselines=True), sizes, probed=True) is False and asked, "kept rows serve"
    assert started(Options(kept_baselines=True), {**sizes, "B": 4}, probed=True) is True
    assert started(Options(), sizes, probed=True) is True  # bench: never kept


def test_a_probe_started_early_runs_beside_the_caller_and_its_error_comes_where_the_device_is_asked(monkeypatch):
    import threading
    from workbench.errors import NoGPU
    gate, calls = threading.Event(), []

    def probe(root, refresh, timeout, progress):
        calls.append(refresh)
        gate.wait(10)
        if len(calls) == 1:
            raise NoGPU("no usable CUDA device")
        return {"device": {"name": "H100"}}
    monkeypatch.setattr(device, "probe_device", probe)
    monkeypatch.setattr(device, "require_pycuda", lambda: None)
    monkeypatch.setattr(device, "host_identity", lambda: "machine A")
    monkeypatch.setattr(device, "cached_probe", lambda identity: None)
    p = device.Probe(ROOT, 60.0, lambda text: None)
    assert p.start() is True
    assert p.start() is True  # once, still under way
    for _ in range(500):
        if calls:
            break
        time.sleep(0.01)
    assert calls == [False], "the probe runs while the caller goes on"
    gate.set()
    with pytest.raises(NoGPU):
        p.get()
    assert p.get() == {"device": {"name": "H100"}} and calls == [False, False]
    assert p.get() is p.get() and len(calls) == 2, "asked once"
    monkeypatch.setattr(device, "cached_probe", lambda identity: {"device": {"name": "H100"}})
    kept = device.Probe(ROOT, 60.0, lambda text: None)
    assert kept.start() is False
    assert kept._thread is None, "a machine with a kept probe needs no thread: get reads it"


def test_run_without_pycuda_says_so_before_computing_any_reference(monkeypatch):
    """The probe starts in a thread, but a machine without PyCUDA is told at once: no reference
    is computed first (the session's first cases come after head_start)."""
    from workbench.bench import Options as O, Session
    from workbench.errors import NoGPU
    monkeypatch.setattr(device.importlib.util, "find_spec", lambda name: None if name == "pycuda" else object())
    session = Session(Project(ROOT), O())
    computed = []
    monkeypatch.setattr(session.store, "cases", lambda *a, **k: computed.append(a))
    monkeypatch.setattr(session.children, "versions", lambda ops=(): None)
    monkeypatch.setattr(session.children, "baselines", lambda warm=(): None)
    family = Project(ROOT).family("layernorm_forward")
    try:
        with pytest.raises(NoGPU, match="PyCUDA is not installed"):
            session.head_start(family, None, "fp32")
        assert computed == []
    finally:
        session.close()


def test_the_baselines_child_is_told_which_torch_expressions_to_warm(monkeypatch):
    """Those with an expression, in the order given; none where torch is not timed."""
    import base64
    import json as json_

    from workbench import children as children_mod
    from workbench.ledger import Ledger
    started = []

    class Recorder:
        def __init__(self, preload=(), **kw):
            started.append(preload)

        def start(self):
            return self
    monkeypatch.setattr(children_mod, "Server", Recorder)
    monkeypatch.setattr(children_mod.importlib.util, "find_spec", lambda name: object())
    project = Project(ROOT)
    adamw, fc = project.family("adamw"), project.family("fused_classifier")
    children_mod.Children(Options(), Ledger()).baselines([(fc, "bf16"), (adamw, "bf16"), (adamw, "fp32")])
    torch_, item = started[-1]
    spec = json_.loads(base64.urlsafe_b64decode(item.split("=", 1)[1]))
    assert torch_ == "torch" and spec == {"root": str(project.root), "groups": [["fused_classifier", "bf16"], ["adamw", "fp32"]]}
    children_mod.Children(Options(torch=False), Ledger()).baselines([(fc, "bf16")])
    assert started[-1] == ()

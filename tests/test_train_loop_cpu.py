"""The trainer's loop (train/trainer.py) on the CPU: PyCUDA's driver, the kernel backend and the
graphs are replaced by host stand-ins that run the program through the NumPy references
(ReferenceBackend, float64), so the loop's bookkeeping is checked without a GPU: micro-steps,
data windows, learning rates, checkpoints, --keep, and a resume that continues the run exactly.
The stand-in stream is asynchronous as a GPU's is: what is enqueued on it (copies, which read or
write the pinned host buffers when they run, and the program's calls) runs only when the host
waits for an event or the stream, or makes a synchronous copy, and each test runs twice: with a
wait for an event running only the work before it, and running everything queued (Queue); so a
host buffer rewritten while a copy from it is pending, or a result read after later work has
overwritten it, shows in the losses and inputs."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from train import backends, checkpoint, formats, trainer
from train.data import Shards, TrainData, window
from train.distributed import Launch, Local
from train.options import TrainOptions, prepare


class Queue:
    """The stand-in stream's pending work, in order (the trainer uses one stream). `eager`: a
    wait for an event runs everything pending, as a GPU that got through the work queued behind
    the event before the host looked (a result read too late shows); else only up to the event
    (a host buffer rewritten before a copy from it ran shows)."""

    pending: list = []
    eager = False

    @classmethod
    def run(cls, upto=None) -> None:
        """Run the pending work in order, up to the marker `upto` (all of it when None)."""
        while cls.pending:
            item = cls.pending.pop(0)
            if item is upto:
                return
            if callable(item):
                item()
        assert upto is None, "waited for an event that was never recorded"


class HostKernels(backends.ReferenceBackend):
    """KernelBackend's interface on host arrays: device addresses are offsets into a map. Calls
    given a stream are queued on it (Queue); `execute` is where they run."""

    live = None

    def __init__(self, program, promoted, comm=None, side_stream=False):
        super().__init__(program)
        self.base, at = {}, 1 << 20
        for name, spec in program.buffers.items():
            self.base[name] = at
            at += 4 * spec.elems + 4096
        HostKernels.live = self

    def ptr(self, ref) -> int:
        return self.base[ref.buffer] + 4 * ref.offset

    def at(self, address: int, n: int) -> np.ndarray:
        for name, base in self.base.items():
            if base <= address < base + 4 * self.host[name].size + 1:
                start = (address - base) // 4
                return self.host[name][start:start + n]
        raise AssertionError(f"no buffer at {address:#x}")

    def run(self, calls, stream=None) -> None:
        if stream is None:
            self.execute(calls)
        else:
            Queue.pending.append(lambda: self.execute(calls))

    def execute(self, calls) -> None:
        super().run(calls)
        for name, dtype in self.dtypes.items():  # device buffers hold fp32: a checkpoint holds them exactly
            if dtype == "f32":
                self.host[name][:] = self.host[name].astype(np.float32)

    def upload(self, name, host, offset=0) -> None:  # synchronous: after what the stream holds
        Queue.run()
        self.host[name][offset:offset + host.size] = host

    def download(self, name, dtype=np.float32, elems=None, offset=0):
        Queue.run()
        n = self.host[name].size if elems is None else elems
        return self.host[name][offset:offset + n].astype(dtype)

    def memory(self):
        return self.program.memory()


class Graph:
    nodes = 0
    made: list = []

    def __init__(self, stream, enqueue):
        self.enqueue = enqueue
        self.destroyed = False
        Graph.made.append(self)

    def launch(self, stream):
        assert not self.destroyed
        self.enqueue(stream)

    def destroy(self):
        self.destroyed = True


class Promoted:
    manifest: dict = {}
    served: tuple = ()  # the optional (fused) families promoted, where a test sets them

    def __init__(self, deterministic=False):
        self.deterministic = deterministic

    atomic: tuple = ()  # the served families whose versions add with atomics and have no stand-in

    def stand_ins(self, families, precision="fp32"):
        return {}

    def serves(self, family, precision="fp32"):  # PromotedSet.serves' rule (tests/test_promote.py)
        return family in self.served and not (self.deterministic and family in self.atomic)

    def entry(self, family, precision="fp32"):
        return {"family": family, "version": 2, "title": "a host stand-in"}


@pytest.fixture(params=["lazy", "eager"])
def host_gpu(monkeypatch, request):
    class Stream:
        handle = 1

        def synchronize(self):
            Queue.run()

    def htod(address, host, stream=None):  # reads the pinned host buffer when it runs, as a DMA does
        Queue.pending.append(lambda: HostKernels.live.at(address, host.size).__setitem__(slice(None), host))

    def dtoh(host, address, stream=None):
        def copy():
            host[...] = HostKernels.live.at(address, host.size).reshape(host.shape)
        Queue.pending.append(copy)

    class Event:
        def __init__(self, flags=0):
            self.marker = None

        def record(self, stream=None):
            self.marker = object()
            Queue.pending.append(self.marker)

        def synchronize(self):
            if self.marker in Queue.pending:
                Queue.run(None if Queue.eager else self.marker)

        def query(self):
            self.synchronize()
            return True

    device = types.SimpleNamespace(name=lambda: "host", pci_bus_id=lambda: "0000:00:00.0")  # NVML finds none: no power line
    drv = types.SimpleNamespace(Stream=Stream, Event=Event, event_flags=types.SimpleNamespace(DISABLE_TIMING=2),
                                pagelocked_empty=lambda shape, dtype: np.zeros(shape, dtype),
                                memcpy_htod_async=htod, memcpy_dtoh_async=dtoh, mem_get_info=lambda: (0, 0),
                                Context=types.SimpleNamespace(get_device=lambda: device))
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = drv
    for name, module in (("pycuda", pycuda), ("pycuda.driver", drv), ("pycuda.autoprimaryctx", types.ModuleType("x"))):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(backends, "KernelBackend", HostKernels)
    monkeypatch.setattr(backends, "Graph", Graph)
    monkeypatch.setattr(backends, "PromotedSet", Promoted)
    monkeypatch.setattr(trainer, "matmul_peak", lambda kind: 1.0)
    Queue.pending, Queue.eager = [], request.param == "eager"
    yield
    assert not Queue.pending or all(not callable(x) for x in Queue.pending), "work left on the stream at the end"


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(0)
    tokens = (np.arange(3000) * 3 + rng.integers(0, 2, 3000)) % 11  # the micro model's vocabulary
    formats.write_tokens(tmp_path / "train.bin", tokens)
    formats.write_tokens(tmp_path / "val.bin", tokens[:200])
    return {"train_tokens": str(tmp_path / "train.bin"), "val_tokens": str(tmp_path / "val.bin"), "init": "micro",
            "seq": 8, "sample_every": 0, "val_every": 3, "val_batches": 2, "lr": 1e-2}


def run(tmp_path, name, **kw) -> dict:
    opts = TrainOptions(**{"json": str(tmp_path / f"{name}.json"), **kw})
    summary = trainer.train(prepare(opts, Launch()), trainer.SilentUI(), Local())
    assert json.loads((tmp_path / f"{name}.json").read_text())["losses"] == summary["losses"]
    return summary


def test_the_loop_trains_and_logs_in_llmc_format(host_gpu, data, tmp_path):
    Graph.made.clear()
    s = run(tmp_path, "a", **data, batch=2, steps=6, log=str(tmp_path / "log.txt"), lr_schedule="cosine", warmup=2)
    assert Graph.made and all(g.destroyed for g in Graph.made)  # before NCCL's communicator is closed
    assert len(s["losses"]) == 6 and s["losses"][-1] < s["losses"][0]
    assert s["lrs"][:3] == [5e-3, 1e-2, 1e-2] and s["lrs"][-1] == 0.0  # warm-up, then cosine down to 0
    lines = (tmp_path / "log.txt").read_text().splitlines()
    assert lines[0] == f"s:0 tel:{s['val_losses'][0][1]:.6f}" and f"s:6 trl:{s['losses'][-1]:.6f}" in lines


def test_each_step_takes_the_meters_mean_once_and_the_summary_keeps_the_timed_steps(host_gpu, data, tmp_path, monkeypatch):
    """The loop starts the power meter sampling, takes its mean once a step, while the step runs,
    forgets what it read before a step launched after a pause (the first; validation), and the
    summary (and its JSON) gives the means of steps 10-12 of 12: each tagged with the step it came
    from here, so one kept from outside the window, or one missing, changes the medians."""
    from workbench.power import SW_POWER_CAP, Reading

    class Meter:
        limit_w, max_mhz, takes, skips, started, closed = 700.0, 1980, 0, 0, False, False

        def __init__(self, pci_bus_id):
            assert pci_bus_id == "0000:00:00.0"

        def start(self):
            Meter.started = True

        def skip(self):
            Meter.skips += 1

        def take(self):
            Meter.takes += 1
            return Reading(600.0 + Meter.takes, 1500 + Meter.takes, SW_POWER_CAP if Meter.takes % 2 else 0, samples=5)

        def close(self):
            Meter.closed = True
    monkeypatch.setattr(trainer, "PowerMeter", Meter)
    s = run(tmp_path, "p", **data, batch=2, steps=12)
    assert Meter.started and Meter.takes == 12 and Meter.closed
    assert Meter.skips >= 1  # at least the first step, launched with nothing in flight
    p = s["power"]
    assert p["readings"] == 3 and p["samples"] == 15 and p["power_w"] == 611.0 and p["sm_mhz"] == 1511  # steps 10-12
    assert p["clock_held_by"] == {"power cap": 1 / 3} and (p["power_limit_w"], p["sm_max_mhz"]) == (700.0, 1980)
    assert p["joules_per_step"] > 0  # its arithmetic: tests/test_power.py
    assert json.loads((tmp_path / "p.json").read_text())["power"] == p


def test_the_fused_mlp_runs_where_its_families_are_promoted_unless_no_fuse_gelu(host_gpu, data, tmp_path, monkeypatch):
    from train.model import FUSED_GELU
    plain = run(tmp_path, "plain", **data, batch=2, steps=3)
    assert HostKernels.live.program.fused == ()  # nothing promoted: the separate calls
    monkeypatch.setattr(Promoted, "served", FUSED_GELU)
    fused = run(tmp_path, "fused", **data, batch=2, steps=3)
    assert HostKernels.live.program.fused == FUSED_GELU
    np.testing.assert_allclose(fused["losses"], plain["losses"], rtol=1e-6)
    off = run(tmp_path, "off", **data, batch=2, steps=3, fuse_gelu=False)
    assert HostKernels.live.program.fused == () and off["losses"] == plain["losses"]


def test_the_fused_layernorm_backward_runs_where_promoted_but_not_under_deterministic(host_gpu, data, tmp_path,
                                                                                      monkeypatch):
    from train.model import FUSED_LN
    plain = run(tmp_path, "plain", **data, batch=2, steps=3)
    monkeypatch.setattr(Promoted, "served", (FUSED_LN,))
    monkeypatch.setattr(Promoted, "atomic", (FUSED_LN,))
    fused = run(tmp_path, "fused", **data, batch=2, steps=3, fuse_gelu=False)
    assert HostKernels.live.program.fused == (FUSED_LN,)
    np.testing.assert_allclose(fused["losses"], plain["losses"], rtol=1e-6)
    run(tmp_path, "det", **data, batch=2, steps=3, deterministic=True)
    assert HostKernels.live.program.fused == ()


def test_accumulating_two_micro_steps_equals_a_batch_twice_as_large(host_gpu, data, tmp_path):
    micro = run(tmp_path, "micro", **data, batch=2, total_batch=2 * 2 * 8, steps=4)
    whole = run(tmp_path, "whole", **data, batch=4, steps=4)
    assert micro["micro_steps"] == 2
    np.testing.assert_allclose(micro["losses"], whole["losses"], rtol=1e-11)


def test_a_resumed_run_continues_the_run_exactly(host_gpu, data, tmp_path):
    flags = dict(**data, batch=2, steps=8, weight_decay=0.1, lr_schedule="wsd", warmup=2, checkpoint_every=3,
                 checkpoint_dir=str(tmp_path / "ck"))
    whole = run(tmp_path, "whole", **flags, keep=3)
    # every 3 steps, and the last step's (8) so that `--resume latest` finds the run complete
    assert checkpoint.steps_in(tmp_path / "ck") == [3, 6, 8] and checkpoint.read_latest(tmp_path / "ck") == 8
    rest = run(tmp_path, "rest", **data, resume=str(tmp_path / "ck" / "model_00000003.bin"),
               checkpoint_dir=str(tmp_path / "ck"))
    assert rest["start_step"] == 3 and rest["losses"] == whole["losses"][3:] and rest["lrs"] == whole["lrs"][3:]
    assert [v for v in rest["val_losses"] if v[0] >= 3] == [v for v in whole["val_losses"] if v[0] >= 3]
    state = formats.read_state(checkpoint.state_path(tmp_path / "ck", 6, 0))
    assert state.info["data"]["position"] == {"step": 6, "shard": 0, "file": "train.bin", "offset": 6 * 2 * 8}
    assert state.info["schedule"]["kind"] == "wsd"
    assert state.m.size == state.num_params and np.abs(state.v).sum() > 0


def test_the_loop_launches_a_step_behind_the_running_one_except_where_the_gpu_must_stop(host_gpu, data, tmp_path,
                                                                                        monkeypatch):
    """Step s + 1 is launched before step s is waited for, except after the first step (the
    graphs are captured), before validation (every 3 steps here) and the end, and after a step
    that is checkpointed (every 5); the run computes what it computes with no step run ahead."""
    events = []
    launch, collect = trainer.Trainer.launch, trainer.Trainer.collect
    monkeypatch.setattr(trainer.Trainer, "launch", lambda t, b, step, lr: (events.append(f"L{step}"), launch(t, b, step, lr))[1])
    monkeypatch.setattr(trainer.Trainer, "collect", lambda t, step: (events.append(f"C{step}"), collect(t, step))[1])
    flags = dict(**data, batch=2, steps=8, lr_schedule="cosine", checkpoint_every=5)
    ahead = run(tmp_path, "ahead", **flags, checkpoint_dir=str(tmp_path / "ck1"), save=str(tmp_path / "ahead.bin"))
    assert events == "L0 C0 L1 L2 C1 C2 L3 L4 C3 C4 L5 C5 L6 L7 C6 C7".split()
    monkeypatch.setattr(trainer.TrainLoop, "run_ahead", lambda self, step, stopping: False)
    events.clear()
    behind = run(tmp_path, "behind", **flags, checkpoint_dir=str(tmp_path / "ck2"), save=str(tmp_path / "behind.bin"))
    assert events == [f"{k}{s}" for s in range(8) for k in "LC"]
    assert ahead["losses"] == behind["losses"] and ahead["val_losses"] == behind["val_losses"]
    assert ahead["lrs"] == behind["lrs"] and len(set(ahead["lrs"])) > 4
    for path in ("ahead.bin", "behind.bin", "ck1/model_00000005.bin", "ck2/model_00000005.bin"):
        assert (tmp_path / path).exists()
    assert (tmp_path / "ahead.bin").read_bytes() == (tmp_path / "behind.bin").read_bytes()
    assert (tmp_path / "ck1/model_00000005.bin").read_bytes() == (tmp_path / "ck2/model_00000005.bin").read_bytes()


def test_zero_1_on_one_process_trains_as_without(host_gpu, data, tmp_path):
    a = run(tmp_path, "a", **data, batch=2, steps=3)
    b = run(tmp_path, "b", **data, batch=2, steps=3, zero=1)
    assert a["losses"] == b["losses"]


def test_recompute_trains_identically_reports_less_memory_and_may_change_on_resume(host_gpu, data, tmp_path):
    """--recompute 2 gives --recompute 0's losses with fewer activation bytes (the summary's memory,
    by kind); a run checkpointed at --recompute 2 resumes at --recompute 1 (given) or at 2 (carried)
    and continues the same losses."""
    flags = dict(**data, batch=2, steps=6)
    kept = run(tmp_path, "kept", **flags)
    ck = dict(checkpoint_every=3, checkpoint_dir=str(tmp_path / "ck"))
    r2 = run(tmp_path, "r2", **flags, recompute=2, **ck)
    assert r2["losses"] == kept["losses"]
    m0, m2 = kept["memory"], r2["memory"]
    assert (m0["recompute"], m2["recompute"]) == (0, 2) and 0 < m2["activations"] < m0["activations"]
    assert m0["buffers"] - m2["buffers"] == m0["activations"] - m2["activations"]
    assert all(m0[k] == m2[k] > 0 for k in ("parameters", "gradients", "optimizer state"))
    model3 = str(tmp_path / "ck" / "model_00000003.bin")
    given = run(tmp_path, "given", **data, resume=model3, recompute=1, explicit=frozenset({"recompute"}),
                checkpoint_dir=str(tmp_path / "ck"))
    carried = run(tmp_path, "carried", **data, resume=model3, checkpoint_dir=str(tmp_path / "ck"))
    assert given["memory"]["recompute"] == 1 and carried["memory"]["recompute"] == 2
    assert given["losses"] == carried["losses"] == kept["losses"][3:]


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_after_the_step_with_a_checkpoint_and_the_model_saved(host_gpu, data, tmp_path, monkeypatch,
                                                                             signum):
    """Ctrl-C, or SIGTERM (a scheduler's stop; what mpirun sends every rank when it is interrupted),
    while the second step runs: the third was launched behind it (the loop runs one step ahead), so
    the run stops after the third, checkpointed and saved there."""
    import signal
    steps_seen = []
    original = HostKernels.execute

    def run_and_interrupt(self, calls):
        original(self, calls)
        if self.program.update and calls and calls[-1] is self.program.update[-1]:
            steps_seen.append(1)
            if len(steps_seen) == 2:
                signal.raise_signal(getattr(signal, signum))  # during the second step
    monkeypatch.setattr(HostKernels, "execute", run_and_interrupt)
    s = run(tmp_path, "a", **data, batch=2, steps=50, checkpoint_every=10, checkpoint_dir=str(tmp_path / "ck"),
            save=str(tmp_path / "model.bin"))
    assert s["stopped"] == "interrupted after step 3" and len(s["losses"]) == 3 and len(steps_seen) == 3
    assert checkpoint.read_latest(tmp_path / "ck") == 3 and s["saved"] == str(tmp_path / "model.bin")
    _, params = formats.read_checkpoint(tmp_path / "model.bin")
    _, at_three = formats.read_checkpoint(checkpoint.model_path(tmp_path / "ck", 3))
    assert np.array_equal(params, at_three)


# -- the plan of the embedding backward: made on the host, one step ahead ---------------------------------
def record_backward_inputs(monkeypatch) -> list[dict]:
    """What the device buffers hold whenever a backward runs: the micro-step's tokens, targets
    and the plan the embedding backward reads."""
    seen = []
    original = HostKernels.execute

    def run_and_record(self, calls):
        if any(getattr(c, "family", None) == "encoder_backward" for c in calls):
            seen.append({name: self.host[name].copy() for name in ("tokens", "targets", "eb_role", "eb_plan")})
        original(self, calls)
    monkeypatch.setattr(HostKernels, "execute", run_and_record)
    return seen


def expected_inputs(path, B, T, C, steps, micro_steps) -> list[dict]:
    """Per micro-step of each of `steps`, in order: its window of the file and the plan of it."""
    from references.encoder_backward import encoder_backward_plan
    batches = TrainData(Shards(path), B, T, B * T * micro_steps)
    out = []
    for step in steps:
        for k in range(micro_steps):
            x, y = np.zeros(B * T, np.int32), np.zeros(B * T, np.int32)
            batches.load(step, window(k, 0, 1), x, y)
            role, plan = encoder_backward_plan(x, C)
            out.append({"tokens": x, "targets": y, "eb_role": role, "eb_plan": plan})
    return out


def assert_same_inputs(seen: list[dict], want: list[dict]) -> None:
    assert len(seen) == len(want)
    for i, (a, b) in enumerate(zip(seen, want)):
        for name in b:
            assert np.array_equal(a[name], b[name]), f"micro-step {i}: {name}"


def test_every_backward_reads_the_plan_of_its_own_micro_steps_tokens(host_gpu, data, tmp_path, monkeypatch):
    """The plans made one step ahead (and the first step's, made on the spot) reach the device with
    their micro-step's batch; validation between the steps does not overwrite a prepared batch."""
    val = tmp_path / "other_val.bin"
    formats.write_tokens(val, np.arange(200)[::-1] % 11)  # windows unlike the training file's
    seen = record_backward_inputs(monkeypatch)
    s = run(tmp_path, "a", **{**data, "val_tokens": str(val), "val_every": 1}, batch=4, total_batch=2 * 4 * 8, steps=5)
    assert s["micro_steps"] == 2 and len(s["val_losses"]) == 6
    want = expected_inputs(data["train_tokens"], 4, 8, trainer.preset("micro").channels, range(5), 2)
    assert_same_inputs(seen, want)
    assert any((w["eb_role"] >= 4 * 8).any() for w in want)  # the plans hold segments, not only pairs


def test_a_prepared_step_uploads_what_a_step_loaded_on_the_spot_does(host_gpu, data, tmp_path, monkeypatch):
    """Steps 0, 1, 2, then 5, 6 (a jump, as after a resume): the steps the previous call prepared
    and those it did not upload the same batches and plans as a trainer that prepares none ahead."""
    opts = TrainOptions(**{**data, "batch": 4, "total_batch": 3 * 4 * 8, "steps": 10})
    run_ = prepare(opts, Launch())
    config, params, _ = trainer.load_model("micro", 0)
    batches = run_.train_data
    steps = [0, 1, 2, 5, 6]
    seen = record_backward_inputs(monkeypatch)
    runs = []
    for ahead in (True, False):
        t = trainer.Trainer(run_, config, params, Local())
        for step in steps:
            if not ahead:
                t.prepared = None  # as if nothing was prepared: load and plan at the step's start
            t.launch(batches, step, 1e-3)  # as TrainLoop.steps does with nothing run ahead
            t.prepare(batches, step + 1)
            t.collect(step)
            assert t.prepared == step + 1
        runs.append(seen[:])
        seen.clear()
    want = expected_inputs(data["train_tokens"], 4, 8, config.channels, steps, 3)
    assert_same_inputs(runs[0], want)
    assert_same_inputs(runs[1], want)


@pytest.mark.parametrize("grace, shown", [(None, True), ("30", False)])
def test_under_open_mpi_a_checkpointing_run_says_how_to_give_ranks_time_to_stop(monkeypatch, grace, shown):
    """mpirun kills an interrupted job's ranks 1 s after its SIGTERM unless told otherwise."""
    notes = []
    ui = types.SimpleNamespace(note=notes.append)
    program = types.SimpleNamespace(shard_elems=10, num_params=10, world=2, calls=[], fused=(), precision="fp32")
    t = types.SimpleNamespace(program=program, promoted=Promoted(), backend=types.SimpleNamespace(fallbacks={}))
    run_ = types.SimpleNamespace(opts=TrainOptions(checkpoint_every=5), resume=None,
                                 launch=Launch(world=2, rank=0, launcher="OMPI_COMM_WORLD_SIZE"))
    if grace is None:
        monkeypatch.delenv("OMPI_MCA_odls_base_sigkill_timeout", raising=False)
    else:
        monkeypatch.setenv("OMPI_MCA_odls_base_sigkill_timeout", grace)
    trainer._notes(t, run_, ui)
    assert any("odls_base_sigkill_timeout 30" in n for n in notes) == shown

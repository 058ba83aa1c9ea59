"""The side stream's ordering (train/streams.py), without a GPU.

Each planned step of a real Program, with the launch steps of the versions train/kernels/ has
promoted, is replaced by a recorder: it notes which stream it went to, what it waited for (the
stream's order, the events it was made to wait on) and which slices it reads and writes (its
buffers, from the version's header, as workbench/launch.py's Plan says). The test then checks
the property that makes the side stream safe: every two launches that touch one slice, one of
them writing, are ordered the way the program orders them, whichever way the GPU interleaves
the two streams. And that the weight gradients do leave the main stream's order.
"""

from __future__ import annotations

import pytest

from train.backends import PromotedSet
from train.config import preset
from train.model import FUSED, AllGather, AllReduce, Call, Join, Program, Reduce, Slice, Zero
from train.streams import SideStream
from workbench import library_calls


class Recorder:
    def __init__(self):
        self.nodes: list[tuple[frozenset[int], tuple[int, int], list, list, str]] = []
        self.streams: list[Stream] = []


class Stream:
    def __init__(self, rec: Recorder):
        self.rec, self.last, self.waits = rec, None, set()
        rec.streams.append(self)

    def wait_for_event(self, event) -> None:
        self.waits |= event.nodes

    def launch(self, position, reads, writes, label) -> None:
        deps = frozenset(self.waits | ({self.last} if self.last is not None else set()))
        self.rec.nodes.append((deps, position, reads, writes, label))
        self.last, self.waits = len(self.rec.nodes) - 1, set()


class Event:
    def record(self, stream: Stream) -> None:
        self.nodes = frozenset(stream.waits | ({stream.last} if stream.last is not None else set()))


class Plan:
    def __init__(self, ops, touched, steps):
        self.ops, self.touched, self.steps = ops, touched, steps


class Planned:
    def __init__(self, run):
        self.run = run


def planned_items(program: Program, items, promoted: PromotedSet, outputs) -> list[Planned]:
    out = []
    for k, item in enumerate(items):
        if isinstance(item, Call):
            v = promoted.version(item.family, item.precision, item.variant)
            names = set(item.args) | {s.name for s in v.scratch}
            ops, touched, steps = [], [], []
            for i, step in enumerate(v.steps):
                t = step.buffers(names)
                # a family's scratch is shared by its calls: a slice of its own
                sl = {n: item.args.get(n, Slice(f"scratch {item.family} {n}", 0, 1)) for n in t}
                reads = list(sl.values())
                writes = [sl[n] for n in t if n in outputs(item) or n not in item.args]
                ops.append(step.name if step.kind == "library" else step.kind)
                touched.append(t)
                label = f"{item.label} step {i}"
                steps.append(lambda s, p=(k, i), r=reads, w=writes, lab=label: s.launch(p, r, w, lab))
            out.append(Planned(Plan(ops, touched, steps)))
        else:
            if isinstance(item, Zero):
                reads, writes = [], [item.ref]
            elif isinstance(item, Reduce):
                reads = writes = [ref for ref, _ in item.pieces]
            elif isinstance(item, AllReduce):
                reads = writes = [item.ref]
            elif isinstance(item, AllGather):
                reads, writes = [], [Slice(item.buffer, 0, program.buffers[item.buffer].elems)]
            else:
                assert isinstance(item, Join)
                reads, writes = [], []
            out.append(Planned(lambda s, p=(k, 0), r=reads, w=writes, lab=item.label: s.launch(p, r, w, lab)))
    return out


def record(program: Program, items, promoted: PromotedSet) -> tuple[Recorder, SideStream]:
    rec = Recorder()

    def outputs(call):
        return frozenset(a.name for a in promoted.project.family(call.family).args_for(call.precision) if a.is_output)
    side = SideStream(lambda: Stream(rec), Event, lambda s: None, library_calls.STREAM_SAFE)
    main = Stream(rec)
    side.run(items, planned_items(program, items, promoted, outputs), outputs, main)
    return rec, side


def reachability(rec: Recorder) -> list[int]:
    reach = []
    for deps, *_ in rec.nodes:  # nodes are made in an order their dependencies respect
        r = 0
        for d in deps:
            r |= (1 << d) | reach[d]
        reach.append(r)
    return reach


def unordered_conflicts(rec: Recorder) -> list[str]:
    reach, nodes, bad = reachability(rec), rec.nodes, []
    for b, (_, pos_b, reads_b, writes_b, label_b) in enumerate(nodes):
        for a, (_, pos_a, reads_a, writes_a, label_a) in enumerate(nodes):
            if pos_a >= pos_b:
                continue
            conflict = any(w.overlaps(x) for w in writes_a for x in reads_b + writes_b) or \
                any(r.overlaps(w) for r in reads_a for w in writes_b)
            if conflict and not (reach[b] >> a) & 1:
                bad.append(f"{label_a} -> {label_b}")
    return bad


@pytest.fixture(scope="module")
def promoted():
    return PromotedSet()


def whole_step(p: Program, reduced: bool = False) -> list:
    return p.zero_grads + p.forward + p.loss + (p.reduced_backward if reduced else p.backward) + p.update


@pytest.mark.parametrize("recompute", [0, 2])
@pytest.mark.parametrize("attention", ["cudnn", "flash"])
def test_every_conflicting_pair_of_launches_keeps_the_programs_order(promoted, recompute, attention):
    p = Program(preset("micro"), 2, 8, attention, precision="bf16", fused=FUSED, recompute=recompute)
    rec, side = record(p, whole_step(p), promoted)
    assert unordered_conflicts(rec) == []
    L = p.config.num_layers
    # the weight gradients of fcproj (in the dgelu call), fc, attproj, qkv and the lm head; every bias
    # gradient comes out of a fused call on the main stream (qkv's: qkv_bias_backward, not a side call)
    assert side.moved == 4 * L + 1
    assert not [c for c in p.backward if isinstance(c, Call) and c.family == "matmul_backward_bias"]
    reach = reachability(rec)
    last = len(rec.nodes) - 1
    assert all((reach[last] >> n) & 1 for n in range(last))  # everything joins before the step ends


def test_the_weight_gradients_run_beside_the_attention_backward(promoted):
    p = Program(preset("micro"), 2, 8, "cudnn", precision="bf16", fused=FUSED)
    rec, _ = record(p, whole_step(p), promoted)
    reach = reachability(rec)
    label = {n[4]: i for i, n in enumerate(rec.nodes)}
    attproj_dw = next(i for lab, i in label.items() if lab.startswith("layer 1 attproj") and lab.endswith("step 1"))
    attention = next(i for lab, i in label.items() if lab.startswith("layer 1 attention step"))
    # unordered: neither waits for the other
    assert not (reach[attention] >> attproj_dw) & 1 and not (reach[attproj_dw] >> attention) & 1


def test_a_reduced_backward_waits_for_the_weight_gradients_it_reduces(promoted):
    p = Program(preset("micro"), 2, 8, "cudnn", precision="bf16", fused=FUSED, world=2, rank=1, zero=1,
                bucket_elems=64)
    rec, side = record(p, whole_step(p, reduced=True), promoted)
    assert side.moved and unordered_conflicts(rec) == []


def test_fp32_moves_only_the_bias_gradients(promoted):
    p = Program(preset("micro"), 2, 8, "softmax")  # matmul_backward 1: cuBLAS, one workspace per process
    rec, side = record(p, whole_step(p), promoted)
    bias = [c for c in p.backward if isinstance(c, Call) and c.family == "matmul_backward_bias"]
    steps = len(promoted.version("matmul_backward_bias").steps)
    assert len(bias) == 4 * p.config.num_layers and side.moved == len(bias) * steps
    assert unordered_conflicts(rec) == []

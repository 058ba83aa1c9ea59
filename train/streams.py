"""The side stream: the weight-gradient GEMMs beside the rest of the backward.

A weight gradient (matmul_backward's `dweight += dout^T @ inp`, and the same GEMM inside the fused
dgelu call) writes only its own slice of `grads`, which nothing reads before the update or a
gradient reduction. So it need not hold up the calls after it: `SideStream` issues those launches
on a second stream, forked from the main stream where their call stands, and makes the main stream
wait for them only where it must:

* before a call (or a Zero, a Reduce) that writes a slice a pending side launch reads or writes
  (dresidual, dfch, dqkv are one buffer for every layer: the next layer rewrites them), or that
  reads a slice a side launch writes (the update, a reduction, encoder_backward's += into wte's
  gradient, which the lm head's weight gradient also writes);
* before any other collective, and at the end of the calls (a captured graph must join its streams).

The stream is in order, so waiting for the latest pending launch a hazard names covers the ones
before it. Which launches may move: a library op of `library_calls.STREAM_SAFE` (gemm_lt: each
stream has its own cuBLASLt workspace) of a family in SIDE_OUTPUTS whose buffers are all the call's
arguments (no shared scratch) and that writes only the arguments named there; and every launch of
the families in SIDE_CALLS (the bias gradients). The result is the same bits: the same kernels on
the same operands, only their order on the GPU changes.

`workbench train --side-stream` turns it on; it is off by default because it has not paid
reliably. On H100s at bf16 B=32 (results/h100-session21-2026-12-06): 0.38 ms a step faster on one
machine (the GEMMs alone, medians of 4 and 5 runs), no faster on another (one stream, the GEMMs
alone, and the GEMMs with the bias gradients: 55.57, 55.57, 55.68 ms, three runs each). A likely
reason, not measured: cuBLASLt's kernels there are persistent (a block per SM, held to the end),
so the other stream's kernels get SMs only in their tails.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .model import AllGather, AllReduce, Call, Join, Reduce, Slice, Zero

# family -> the contract outputs whose launches may run on the side stream
SIDE_OUTPUTS = {"matmul_backward": frozenset({"dweight"}), "matmul_backward_dgelu": frozenset({"dweight"})}
# Families whose calls run on the side stream whole, every launch of every call: a bias gradient
# (column sums into partials, then their reduce) writes only its slice of `grads`. Their scratch is
# the family's, shared by its calls; all of them are on the side stream, in order, so nothing else
# touches it.
SIDE_CALLS = frozenset({"matmul_backward_bias"})


def side_steps(call: Call, plan, outputs: frozenset[str], stream_safe: frozenset[str]) -> list[int]:
    """The indexes of the plan's steps (workbench/launch.py's Plan) that may run on the side stream."""
    if call.family in SIDE_CALLS:
        return list(range(len(plan.steps)))
    allowed = SIDE_OUTPUTS.get(call.family)
    if not allowed:
        return []
    out = []
    for i, (op, touched) in enumerate(zip(plan.ops, plan.touched)):
        writes = touched & outputs
        others = set().union(*(t for j, t in enumerate(plan.touched) if j != i))
        # its own outputs, which no other step of the call touches; every other buffer an input
        if op in stream_safe and touched <= set(call.args) and writes and writes <= allowed and not writes & others:
            out.append(i)
    return out


class SideStream:
    """Runs a backend's planned calls on its main stream and a side stream (see the module's doc).

    make_stream() and make_event() make a stream and an event (pycuda's, or stand-ins in a test);
    own_workspace(stream) gives the side stream its cuBLASLt workspace."""

    def __init__(self, make_stream: Callable[[], Any], make_event: Callable[[], Any],
                 own_workspace: Callable[[Any], None], stream_safe: frozenset[str]):
        self.stream = make_stream()
        own_workspace(self.stream)
        self.make_event = make_event
        self.stream_safe = stream_safe
        self.moved = 0  # side launches issued, over every run

    def run(self, items: Sequence[Any], planned: Sequence[Any], outputs: Callable[[Call], frozenset[str]],
            main) -> None:
        """items: the program's steps; planned: each one's PlannedCall (a Call's .run is its Plan);
        outputs(call): the contract arguments the call writes."""
        pending: list[tuple[Any, list[Slice], list[Slice]]] = []  # (event after it, reads, writes)
        for item, p in zip(items, planned):
            if isinstance(item, Call):
                plan, outs = p.run, outputs(item)
                moved = side_steps(item, plan, outs, self.stream_safe)
                if moved:
                    fork = self.make_event()
                    fork.record(main)
                    self.stream.wait_for_event(fork)
                    for i in moved:
                        plan.steps[i](self.stream)
                        done = self.make_event()
                        done.record(self.stream)
                        names = plan.touched[i] & set(item.args)  # a SIDE_CALLS family's scratch is the side stream's
                        pending.append((done, [item.args[n] for n in names], [item.args[n] for n in names & outs]))
                        self.moved += 1
                rest = [i for i in range(len(plan.steps)) if i not in moved]
                if rest:  # they touch any argument but the outputs only the moved launches write
                    names = set(item.args) - set().union(*(plan.touched[i] & outs for i in moved))
                    self._wait(pending, [item.args[n] for n in names], [item.args[n] for n in names & outs], main)
                for i in rest:
                    plan.steps[i](main)
            elif isinstance(item, Zero):
                self._wait(pending, [], [item.ref], main)
                p.run(main)
            elif isinstance(item, Reduce):  # sums the slices in place
                pieces = [ref for ref, _ in item.pieces]
                self._wait(pending, pieces, pieces, main)
                p.run(main)
            else:
                assert isinstance(item, (Join, AllReduce, AllGather)), item
                self._wait(pending, None, None, main)
                p.run(main)
        self._wait(pending, None, None, main)

    @staticmethod
    def _wait(pending: list, reads: list[Slice] | None, writes: list[Slice] | None, main) -> None:
        """Make `main` wait for the latest pending side launch that conflicts with reading `reads`
        and writing `writes` (None: with everything), and forget it and those before it."""
        last = -1
        for j, (_, side_reads, side_writes) in enumerate(pending):
            if reads is None or any(w.overlaps(s) for w in writes for s in side_reads + side_writes) \
                    or any(r.overlaps(s) for r in reads for s in side_writes):
                last = j
        if last >= 0:
            main.wait_for_event(pending[last][0])
            del pending[:last + 1]

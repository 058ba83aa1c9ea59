"""Backward of the token + position embedding, accumulated (+=) into dwte and dwpe:
every position (b, t) adds its dout row to wte's row inp[b, t] and to wpe's row t."""

import numpy as np


def encoder_backward(dwte, dwpe, dout, inp):
    C = dout.shape[-1]
    dwte = dwte.copy()
    np.add.at(dwte, inp.reshape(-1), dout.reshape(-1, C))  # repeated tokens add up
    dwpe = dwpe + dout.sum(axis=0)
    return {"dwte": dwte, "dwpe": dwpe}


def torch_encoder_backward(dwte, dwpe, dout, inp):
    """The PyTorch baseline: index_add_ (atomics on the GPU) plus a sum over the batch, in place."""
    C = dout.shape[-1]
    dwte.index_add_(0, inp.reshape(-1), dout.reshape(-1, C))
    dwpe.add_(dout.sum(0))
    return dwte, dwpe


# -- the plan: which position adds which dwte row (version 12) ------------------------------------
# A version that is given the plan needs no scan of the token ids: the host (or the trainer's data
# loader) sorts the batch's ids once, as llm.c's trainer does on its CPU, and the kernel reads, for
# each position, what to do with its dwte row. `role[n]`:
#   -1          position n is alone with its token: it adds its dout row into dwte itself;
#   -2          another position adds n's row (n belongs to a group and does not lead it);
#   0 <= r < N  n leads a pair: it adds its row and position r's;
#   r >= N      n leads a segment described at plan[r - N] (a group of three or more positions, or
#               SEGMENT positions of a longer group).
# `plan`: first the counters (zeros: a long group's last segment to finish, the one that draws
# the last ticket, adds all the segments' partial sums), then a record per segment, 16-byte aligned:
#   [others, counters, slot, first_slot, segments, 0, 0, 0, position, position, ...]
# `others` positions follow the header (the leader's own is not listed), padded to a multiple of 4;
# `counters` is -1 for a group of one segment (its leader updates dwte directly), otherwise the
# offset in `plan` of the group's cdiv(C, 8) tickets, one per 16-byte unit of the row; `slot` is
# the row of the partial sums (a scratch of C floats per slot) this segment writes, and the group's
# slots are first_slot .. first_slot + segments - 1. A group longer than SEGMENT positions is split
# into ceil(k / SEGMENT) segments of near-equal size (each at least SEGMENT // 2 positions).
SEGMENT = 16


def plan_words(N: int, C: int) -> int:
    """The plan's size in ints for any ids: counters for at most N // (SEGMENT + 1) long groups,
    and per segment (at least 3 positions) 8 header words and its others padded to a multiple of 4."""
    return 8 * N + (N // (SEGMENT + 1)) * (-(-C // 8)) + 8


def partial_slots(N: int) -> int:
    """Rows of partial sums the long groups need at most: a group of k > SEGMENT positions in
    s = ceil(k / SEGMENT) segments gives each at least floor(k / s) >= SEGMENT // 2 of them."""
    return N // (SEGMENT // 2) + 1


def encoder_backward_plan(inp, C):
    """(role, plan) for the ids `inp` (any shape, N positions) and rows of C channels; vectorised
    (a batch of 32K ids takes ~3 ms on the H100's host), as it runs on the host once per micro-step."""
    ids = np.asarray(inp).reshape(-1).astype(np.int64)
    N, CU = ids.size, -(-C // 8)
    role = np.full(N, -1, dtype=np.int32)
    plan = np.zeros(plan_words(N, C), dtype=np.int32)
    if N == 0:
        return role, plan
    order = np.argsort(ids, kind="stable")  # positions by token, in order of position within one
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    counts = np.diff(np.r_[starts, N])
    role[order[np.repeat(counts > 1, counts)]] = -2
    pairs = starts[counts == 2]
    role[order[pairs]] = order[pairs + 1]
    big = counts >= 3
    if not big.any():
        return role, plan
    g_start, g_count = starts[big], counts[big]
    g_segs = -(-g_count // SEGMENT)
    long_group = g_segs > 1
    n_long = int(long_group.sum())
    counter_of = np.full(g_start.size, -1, dtype=np.int64)
    counter_of[long_group] = np.arange(n_long) * CU
    # segments: segment i of a group of k in s segments holds [k * i // s, k * (i + 1) // s)
    seg_group = np.repeat(np.arange(g_start.size), g_segs)
    seg_index = np.arange(seg_group.size) - np.repeat(np.cumsum(g_segs) - g_segs, g_segs)
    k, s = g_count[seg_group], g_segs[seg_group]
    seg_lo = g_start[seg_group] + k * seg_index // s
    seg_len = g_start[seg_group] + k * (seg_index + 1) // s - seg_lo
    others = seg_len - 1
    words = 8 + -(-others // 4) * 4
    header = n_long * CU + np.cumsum(words) - words
    header += (-(n_long * CU)) % 4  # records 16-byte aligned
    in_long = long_group[seg_group]
    slot = np.full(seg_group.size, -1, dtype=np.int64)
    slot[in_long] = np.arange(int(in_long.sum()))
    first_slot = np.where(in_long, slot - seg_index, -1)
    plan[header + 0] = others
    plan[header + 1] = counter_of[seg_group]
    plan[header + 2] = slot
    plan[header + 3] = first_slot
    plan[header + 4] = s
    role[order[seg_lo]] = header + N
    # the others of every segment, after its header
    member_seg = np.repeat(np.arange(seg_group.size), others)
    member_rank = np.arange(member_seg.size) - np.repeat(np.cumsum(others) - others, others)
    plan[header[member_seg] + 8 + member_rank] = order[seg_lo[member_seg] + 1 + member_rank]
    return role, plan


def prepare_plan(inp, C):
    """The family's derived inputs: the plan of the drawn ids (version 12 reads it; the others
    and the reference ignore it)."""
    role, plan = encoder_backward_plan(inp, C)
    return {"role": role, "plan": plan}


def apply_plan(dwte, dwpe, dout, inp, role, plan):
    """The plan executed in NumPy, in the order a kernel following it sums (a test of the plan:
    every position's row lands exactly once). Returns (dwte, dwpe) in float64."""
    C = dout.shape[-1]
    ids = np.asarray(inp).reshape(-1)
    rows = np.asarray(dout, dtype=np.float64).reshape(-1, C)
    N = ids.size
    dwte = np.array(dwte, dtype=np.float64)
    partial = {}
    pending = {}
    for n in range(N):
        r = int(role[n])
        if r == -1:
            dwte[ids[n]] += rows[n]
        elif r == -2:
            continue
        elif r < N:
            dwte[ids[n]] += rows[n] + rows[r]
        else:
            h = r - N
            others, counters, slot, first, segs = (int(x) for x in plan[h:h + 5])
            total = rows[n].copy()
            for p in plan[h + 8:h + 8 + others]:
                total += rows[p]
            if counters < 0:
                dwte[ids[n]] += total
            else:
                partial[slot] = total
                pending[counters] = pending.get(counters, 0) + 1
                if pending[counters] == segs:
                    dwte[ids[n]] += sum(partial[first + i] for i in range(segs))
    dwpe = np.asarray(dwpe, dtype=np.float64) + np.asarray(dout, dtype=np.float64).reshape(-1, dwpe.shape[0], C).sum(0)
    return dwte, dwpe

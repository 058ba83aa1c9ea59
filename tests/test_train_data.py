"""The trainer's data (train/data.py) and the re-sharding of a checkpoint's optimizer state, without
a GPU: shard sets from globs, the global batch of each step across shard boundaries, each rank's
part of it, the same tokens on any number of GPUs, and the one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from train import checkpoint, formats
from train.data import Shards, TrainData, ValData, window
from train.config import preset
from train.errors import TrainError
from train.params import num_parameters


def shards(tmp_path, sizes, name="s") -> tuple[str, np.ndarray]:
    """Shards of consecutive numbers (token i is i % 60000): every token says where it came from."""
    start, files = 0, []
    for i, n in enumerate(sizes):
        files.append(formats.write_tokens(tmp_path / f"{name}_{i:06d}.bin", np.arange(start, start + n) % 60000))
        start += n
    return str(tmp_path / f"{name}_*.bin"), np.arange(start) % 60000


def test_a_glob_is_its_files_in_sorted_order_and_a_path_is_a_set_of_one(tmp_path):
    pattern, _ = shards(tmp_path, [300, 200, 250])
    s = Shards(pattern)
    assert [sh.tokens for sh in s.shards] == [300, 200, 250] and s.tokens == 750
    assert s.shards[0].path.endswith("s_000000.bin") and "in 3 shards" in s.describe()
    one = Shards(str(tmp_path / "s_000001.bin"))
    assert len(one) == 1 and one.read(0, 5, 3).tolist() == [305, 306, 307]


def test_each_step_reads_one_global_batch_and_walks_the_shards_in_order(tmp_path):
    # global batch 2 * 8 * 2 GPUs = 32 tokens (+1): 9 in the first shard, 6 in the second, 7 in the third
    pattern, _ = shards(tmp_path, [300, 200, 250])
    data = TrainData(Shards(pattern), B=2, T=8, total_batch=32)
    assert data.per_shard == [9, 6, 7] and data.per_epoch == 22
    starts = []
    for step in range(2 * data.per_epoch):
        x, y = np.empty(16, np.int32), np.empty(16, np.int32)
        data.load(step, window(0, 0, 2), x, y)
        starts.append(int(x[0]))
        assert np.array_equal(y, x + 1)  # targets are the next tokens, also at a batch's last row
    first_epoch = [32 * i for i in range(9)] + [300 + 32 * i for i in range(6)] + [500 + 32 * i for i in range(7)]
    assert starts == first_epoch * 2  # the second epoch starts over at the first shard
    pos = data.position(9)
    assert (pos.shard, pos.offset, pos.as_dict()["file"]) == (1, 0, "s_000001.bin")


def test_the_ranks_and_micro_steps_split_a_global_batch_into_its_rows(tmp_path):
    pattern, tokens = shards(tmp_path, [400, 400])
    T, total = 4, 64  # 16 rows of 4 tokens a step
    layout = TrainData(Shards(pattern), 1, T, total)
    starts = {step: layout.position(step).shard * 400 + layout.position(step).offset for step in range(12)}
    want = {step: tokens[start:start + total + 1] for step, start in starts.items()}
    for world, B in ((1, 16), (1, 4), (2, 8), (2, 2), (4, 4), (4, 1)):  # micro-steps = 16 / (world * B)
        data = TrainData(Shards(pattern), B, T, total)
        micro = total // (B * T * world)
        for step in range(12):
            xs = [np.empty(B * T, np.int32) for _ in range(micro * world)]
            ys = [np.empty(B * T, np.int32) for _ in range(micro * world)]
            for k in range(micro):
                for r in range(world):
                    data.load(step, window(k, r, world), xs[window(k, r, world)], ys[window(k, r, world)])
            assert np.array_equal(np.concatenate(xs), want[step][:-1]), (world, B, step)
            assert np.array_equal(np.concatenate(ys), want[step][1:])


def test_validation_windows_run_through_the_shards(tmp_path):
    pattern, _ = shards(tmp_path, [50, 30, 41], name="v")
    val = ValData(Shards(pattern), B=1, T=10)
    assert val.per_shard == [4, 2, 4] and val.windows == 10
    firsts = []
    for i in range(11):
        x, y = np.empty(10, np.int32), np.empty(10, np.int32)
        val.load(i, x, y)
        firsts.append(int(x[0]))
    assert firsts == [0, 10, 20, 30, 50, 60, 80, 90, 100, 110, 0]


def test_bad_shard_sets_are_one_line(tmp_path):
    with pytest.raises(TrainError, match="matches no file"):
        Shards(str(tmp_path / "nothing_*.bin"))
    pattern, _ = shards(tmp_path, [300, 20, 250])
    with pytest.raises(TrainError, match=r"s_000001.bin: 20 tokens, shorter than one global batch of total batch \+ 1 = 33"):
        TrainData(Shards(pattern), 2, 8, 32)
    with pytest.raises(TrainError, match="is a folder"):
        Shards(str(tmp_path))
    # a uint32 (version 2) shard among version 1 ones
    header = np.zeros(256, "<i4")
    header[:3] = (formats.TOKENS_MAGIC, 2, 10)
    (tmp_path / "s_000003.bin").write_bytes(header.tobytes() + np.arange(10, dtype="<u4").tobytes())
    with pytest.raises(TrainError, match="mixed formats: .*s_000000.bin is a token file of version 1, .*s_000003.bin "
                                         "is a token file of version 2"):
        Shards(pattern)
    (tmp_path / "s_000003.bin").unlink()
    micro = preset("micro")
    formats.write_checkpoint(tmp_path / "s_000004.bin", micro, np.zeros(num_parameters(micro), np.float32))
    with pytest.raises(TrainError, match="mixed formats: .* is a model checkpoint"):
        Shards(pattern)


# -- the optimizer state, re-sharded for another number of GPUs --------------------------------------
def write_states(folder, step, num_params, world, zero, m, v):
    """The state files a run of `world` GPUs writes (ZeRO-1: each its shard; else rank 0 all)."""
    from train.model import shard_geometry
    shard, padded = shard_geometry(num_params, world, zero)
    paths = []
    for rank in range(world):
        lo = rank * shard if zero else 0
        holds = zero or rank == 0
        mm = np.zeros(shard, np.float32)
        vv = np.zeros(shard, np.float32)
        if holds:
            real = max(0, min(lo + shard, num_params) - lo)
            mm[:real], vv[:real] = m[lo:lo + real], v[lo:lo + real]
        else:
            mm = vv = np.empty(0, np.float32)
        state = formats.TrainState(step, world, rank, zero, 1, 4, 64, 256 * world, 0, num_params, lo if holds else 0,
                                   mm, vv, {"rng": {}, "options": {}})
        paths.append(formats.write_state(checkpoint.state_path(folder, step, rank), state))
    return checkpoint.Resume(step, checkpoint.model_path(folder, step), paths)


@pytest.mark.parametrize("before", [(1, 0), (2, 0), (2, 1), (4, 1)])
@pytest.mark.parametrize("after", [(1, 0), (2, 1), (4, 0), (4, 1)])
def test_any_sharding_of_the_moments_resumes_on_any_other(tmp_path, before, after):
    from train.model import shard_geometry
    P = 1000  # not a multiple of the shard alignment: the last ZeRO shard is part padding
    rng = np.random.default_rng(1)
    m, v = rng.standard_normal(P).astype(np.float32), rng.random(P).astype(np.float32)
    resume = write_states(tmp_path, 7, P, *before, m, v)
    world, zero = after
    shard, _ = shard_geometry(P, world, zero)
    got_m, got_v = [], []
    for rank in range(world):
        lo = rank * shard if zero else 0
        mm, vv = resume.moments(lo, lo + shard, P)
        assert mm.size == shard
        got_m.append(mm)
        got_v.append(vv)
        if not zero:
            break
    whole_m, whole_v = np.concatenate(got_m), np.concatenate(got_v)
    assert np.array_equal(whole_m[:P], m) and np.array_equal(whole_v[:P], v)
    assert not whole_m[P:].any() and not whole_v[P:].any()  # padding


def test_a_checkpoint_missing_part_of_its_moments_is_one_line(tmp_path):
    P = 1000
    m = np.ones(P, np.float32)
    resume = write_states(tmp_path, 3, P, 2, 1, m, m)
    resume.states = resume.states[:1]  # rank 1's shard lost
    with pytest.raises(TrainError, match="holds no optimizer state for parameter"):
        resume.moments(0, P, P)

"""Checkpoints without a GPU: the state file format, atomic writes, the `latest` pointer, --keep,
finding what to resume, and the data windows each rank and micro-step trains on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from train import checkpoint, formats, prepro
from train.config import preset
from train.distributed import Local
from train.errors import TrainError
from train.params import fresh_init

TINY = preset("tiny")


def a_state(step=100, rank=0, world=1, n=37, seed=5) -> formats.TrainState:
    rng = np.random.default_rng(seed)
    sampler = np.random.default_rng(1337)
    sampler.random(3)
    return formats.TrainState(step=step, world=world, rank=rank, zero=1, micro_steps=2, B=4, T=64, total_batch=512 * world,
                              seed=seed, num_params=1000, shard_offset=rank * n,
                              m=rng.standard_normal(n).astype(np.float32), v=rng.random(n).astype(np.float32),
                              info={"rng": {"sample": sampler.bit_generator.state}, "data": {"position": {"step": 100, "shard": 0, "file": "t.bin", "offset": 0}},
                                    "options": {"lr": 3e-4}})


def no_temp_files(folder) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_state_file_round_trip_is_exact(tmp_path):
    s = a_state()
    back = formats.read_state(formats.write_state(tmp_path / "s.bin", s))
    assert back.info == s.info and np.array_equal(back.m, s.m) and np.array_equal(back.v, s.v)
    assert {f: getattr(back, f) for f in formats.STATE_FIELDS} == {f: getattr(s, f) for f in formats.STATE_FIELDS}
    head = formats.read_state(tmp_path / "s.bin", moments=False)
    assert head.step == 100 and head.m.size == 0


def test_state_file_layout_is_the_documented_one(tmp_path):
    s = a_state(n=3)
    path = formats.write_state(tmp_path / "s.bin", s)
    header = np.fromfile(path, dtype="<i4", count=256)
    text = json.dumps(s.info, sort_keys=True).encode()
    assert list(header[:15]) == [20261122, 1, 100, 1, 0, 1, 2, 4, 64, 512, 5, 1000, 0, 3, len(text)]
    raw = path.read_bytes()
    assert len(raw) == 1024 + 8 * 3 + len(text) and raw[1024 + 24:] == text
    assert np.array_equal(np.frombuffer(raw[1024:1036], "<f4"), s.m)


def test_the_sampling_rng_continues_where_it_stopped(tmp_path):
    s = a_state()
    expected = np.random.default_rng(1337)
    expected.random(3)
    restored = np.random.default_rng(0)
    restored.bit_generator.state = formats.read_state(formats.write_state(tmp_path / "s.bin", s)).info["rng"]["sample"]
    assert np.array_equal(restored.random(5), expected.random(5))


def test_a_state_file_is_refused_for_what_it_is_not(tmp_path):
    model = formats.write_checkpoint(tmp_path / "m.bin", TINY, fresh_init(TINY, 0))
    with pytest.raises(TrainError, match="found magic 20240326 \\(a model checkpoint\\)"):
        formats.read_state(model)
    path = formats.write_state(tmp_path / "s.bin", a_state())
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(TrainError, match="truncated"):
        formats.read_state(path)


def test_an_interrupted_state_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = formats.write_state(tmp_path / "s.bin", a_state(seed=1))
    before = path.read_bytes()
    written = []

    def crash_after_two_parts(part):  # the kill, once the header and m are on disk
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(part)
        return memoryview(np.ascontiguousarray(part)).cast("B") if isinstance(part, np.ndarray) else memoryview(part)
    monkeypatch.setattr(formats, "_part_bytes", crash_after_two_parts)
    with pytest.raises(KeyboardInterrupt):
        formats.write_state(path, a_state(seed=2))
    assert path.read_bytes() == before and no_temp_files(tmp_path)


# -- the checkpoint folder -----------------------------------------------------------------------------
def save(folder, step, keep=0):
    return checkpoint.save(folder, step, a_state(step=step), Local(),
                           lambda p: formats.write_checkpoint(p, TINY, fresh_init(TINY, step)), keep)


def test_a_checkpoint_is_a_model_a_state_per_rank_and_the_latest_pointer(tmp_path):
    model = save(tmp_path, 100)
    assert model == tmp_path / "model_00000100.bin" and (tmp_path / "state_00000100_00000.bin").is_file()
    assert checkpoint.read_latest(tmp_path) == 100
    config, params = formats.read_checkpoint(model)  # an llm.c checkpoint: --init takes it
    assert config == TINY and np.array_equal(params, fresh_init(TINY, 100))
    found = checkpoint.find("latest", tmp_path)
    assert (found.step, found.model, found.states) == (100, model, [tmp_path / "state_00000100_00000.bin"])
    assert checkpoint.find(str(model), tmp_path / "elsewhere").step == 100
    assert checkpoint.find(str(tmp_path / "state_00000100_00000.bin"), tmp_path).step == 100


@pytest.mark.parametrize("keep, left", [(0, [2, 4, 6]), (1, [6]), (2, [4, 6])])
def test_keep_deletes_older_checkpoints_once_a_new_one_is_complete(tmp_path, keep, left):
    for step in (2, 4, 6):
        save(tmp_path, step, keep)
    assert checkpoint.steps_in(tmp_path) == left and checkpoint.read_latest(tmp_path) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["latest"] + [f"model_{s:08d}.bin" for s in left] + [f"state_{s:08d}_00000.bin" for s in left])


def test_a_half_written_checkpoint_is_never_the_latest(tmp_path):
    save(tmp_path, 4)
    # killed after step 8's state and model, before the pointer: and a temp file of a killed write
    formats.write_state(checkpoint.state_path(tmp_path, 8, 0), a_state(step=8))
    (tmp_path / ".model_00000008.bin.abc.tmp").write_bytes(b"half")
    assert checkpoint.find("latest", tmp_path).step == 4
    save(tmp_path, 12, keep=1)  # the next complete one cleans up
    assert checkpoint.steps_in(tmp_path) == [12] and no_temp_files(tmp_path)


def test_a_missing_rank_state_makes_the_checkpoint_incomplete(tmp_path):
    save(tmp_path, 4)
    two_ranks = a_state(step=4, world=2)
    formats.write_state(checkpoint.state_path(tmp_path, 4, 0), two_ranks)
    with pytest.raises(TrainError, match="state_00000004_00001.bin missing"):
        checkpoint.find("latest", tmp_path)


# -- prepro: never silently replace data -----------------------------------------------------------------
def test_prepro_writes_once_then_refuses_different_content_without_force(tmp_path):
    path = tmp_path / "t.bin"
    outputs = {path: (formats.tokens_parts(path, np.arange(10)), "ten tokens")}
    assert list(prepro.Written().write_all(outputs).files) == [path]
    again = prepro.Written().write_all(outputs)
    assert not again.files and again.notes == [f"{path} is up to date"]
    other = {path: (formats.tokens_parts(path, np.arange(11)), "eleven tokens")}
    with pytest.raises(TrainError, match="already exists with other content.*--force"):
        prepro.Written().write_all(other)
    assert formats.read_tokens(path).size == 10
    prepro.Written().write_all(other, force=True)
    assert formats.read_tokens(path).size == 11

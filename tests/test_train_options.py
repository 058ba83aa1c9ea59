"""`workbench train` refuses every bad option at once, in one line naming it, before any GPU work:
these run on a machine without PyCUDA, so reaching the "PyCUDA is not installed" error means every
check passed, and an option's error must come before it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from train import checkpoint, formats
from train.distributed import Launch
from train.errors import TrainError
from train.options import TrainOptions, prepare
from train.params import fresh_init
from workbench.cli import cli

NO_PYCUDA = importlib.util.find_spec("pycuda") is None


@pytest.fixture
def data(tmp_path):
    """A 2,000-token training file and a 600-token validation file: B=2, T=64 windows fit."""
    train, val = tmp_path / "train.bin", tmp_path / "val.bin"
    formats.write_tokens(train, np.arange(2000) % 50257)
    formats.write_tokens(val, np.arange(600) % 50257)
    return ["-i", str(train), "-j", str(val), "--init", "tiny", "-b", "2", "-t", "64"]


def invoke(*args):
    return CliRunner().invoke(cli, ["train", *map(str, args)])


def refused(result, option: str) -> str:
    """The run failed with one error line naming `option`, no traceback, no GPU reached."""
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0, result.output
    assert len(lines) == 1 and lines[0].startswith("error:") and option in lines[0], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "PyCUDA" not in result.output and "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("args, option", [
    (["-b", "0"], "--batch-size"), (["-b", "-4"], "--batch-size"), (["-t", "0"], "--seq-len"),
    (["-l", "-1"], "--lr"), (["-l", "nan"], "--lr"), (["-l", "inf"], "--lr"),
    (["--steps", "0"], "--steps"), (["--steps", "-2"], "--steps"), (["-m", "0"], "--val-batches"),
    (["-v", "-1"], "--val-every"), (["-g", "0"], "--gen-tokens"), (["--seed", "-1"], "--seed"),
    (["--beta1", "1"], "--beta1"), (["--beta2", "-0.1"], "--beta2"), (["--eps", "0"], "--eps"),
    (["--grad-clip", "-1"], "--grad-clip"), (["--weight-decay", "nan"], "--weight-decay"),
    (["--warmup", "-1"], "--warmup"), (["--final-lr-frac", "1.5"], "--final-lr-frac"),
    (["--decay-frac", "0"], "--decay-frac"), (["--lr-schedule", "step"], "--lr-schedule"),
    (["--total-batch", "0"], "--total-batch"), (["--zero", "2"], "--zero"), (["--keep", "-1"], "--keep"),
    (["--comm-timeout", "inf"], "--comm-timeout"), (["--recompute", "3"], "--recompute"),
])
def test_a_bad_value_is_one_line_naming_its_option(args, option):
    line = refused(invoke(*args), option)
    assert "Invalid value" in line


def test_steps_minus_one_means_one_epoch_in_the_help():
    assert "-1: one epoch" in invoke("--help").output


@pytest.mark.skipif(not NO_PYCUDA, reason="PyCUDA is installed: a valid command line would train")
def test_valid_options_get_past_every_check_to_the_gpu(data, tmp_path):
    result = invoke(*data, "--steps", "2", "--save", tmp_path / "a" / "b" / "m.bin", "-o", tmp_path / "logs" / "run.log",
                    "--json", tmp_path / "j" / "s.json", "--checkpoint-every", "1", "--checkpoint-dir", tmp_path / "ck",
                    "--total-batch", "256", "--lr-schedule", "wsd", "--decay-frac", "0.5", "--final-lr-frac", "0.1")
    assert result.exit_code == 3 and "PyCUDA is not installed" in result.output, result.output
    for folder in ("a", "logs", "j", "ck"):  # made when the run writes there: a run that never starts leaves none
        assert not (tmp_path / folder).exists()


def test_an_existing_output_is_replaced_only_with_force_or_by_its_own_resumed_run(data, tmp_path):
    for option in ("--save", "-o", "--json"):
        mine = tmp_path / f"precious{option}"
        mine.write_text("mine")
        assert "exists: pass --force" in refused(invoke(*data, option, mine), option)
        assert mine.read_text() == "mine"
        if NO_PYCUDA:
            assert "PyCUDA" in invoke(*data, option, mine, "--force").output


@pytest.mark.parametrize("option", ["--save", "-o", "--json"])
def test_an_unwritable_output_is_refused_up_front(data, tmp_path, option):
    refused(invoke(*data, option, "/proc/nope/out.bin"), option)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    refused(invoke(*data, option, blocker / "out.bin"), option)  # its folder would be a file
    refused(invoke(*data, option, tmp_path), option)              # a folder, not a file


def test_save_into_proc_fails_before_anything_else():
    """Even with no data here: the output is checked first."""
    refused(invoke("--save", "/proc/nope/m.bin"), "--save")


def test_an_unwritable_checkpoint_folder_is_refused(data):
    refused(invoke(*data, "--checkpoint-every", "5", "--checkpoint-dir", "/proc/nope"), "--checkpoint-dir")


def test_total_batch_must_be_a_multiple_of_a_micro_step(data):
    line = refused(invoke(*data, "--total-batch", "1000"), "--total-batch")
    assert "2*64*1 = 128" in line


def test_the_world_size_comes_from_the_mpi_environment(data, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    line = refused(invoke(*data, "--total-batch", "384"), "--total-batch")
    assert "2*64*2 = 256" in line


def test_missing_or_short_data_names_its_option(data, tmp_path):
    refused(invoke("-i", tmp_path / "nope.bin", "--init", "tiny", "-t", "64"), "'-i'")
    refused(invoke(*data, "-b", "64"), "'-i'")  # 2,000 tokens < 64*64+1
    refused(invoke(*data, "-j", tmp_path / "nope.bin"), "'-j'")
    assert "PyCUDA" in invoke(*data, "-j", tmp_path / "nope.bin", "-v", "0").output or not NO_PYCUDA


def test_a_sequence_longer_than_the_model_is_refused(data):
    refused(invoke(*data, "-t", "128"), "--seq-len")  # tiny: max T 64


def test_a_shard_shorter_than_one_global_batch_is_refused(data):
    line = refused(invoke(*data, "--total-batch", str(128 * 16)), "'-i'")  # 2,000 tokens, 2,049 a global batch
    assert "shorter than one global batch" in line


def test_an_empty_glob_or_mixed_shards_are_one_line_before_any_gpu_work(data, tmp_path):
    assert "matches no file" in refused(invoke(*data, "-i", tmp_path / "none_*.bin"), "'-i'")
    assert "matches no file" in refused(invoke(*data, "-j", tmp_path / "none_*.bin"), "'-j'")
    (tmp_path / "shards").mkdir()
    formats.write_tokens(tmp_path / "shards" / "a_000000.bin", np.arange(2000) % 50257)
    formats.write_tokens(tmp_path / "shards" / "a_000001.bin", np.arange(100))
    assert "a_000001.bin: 100 tokens" in refused(invoke(*data, "-i", tmp_path / "shards" / "a_*.bin"), "'-i'")
    header = np.zeros(256, "<i4")
    header[:3] = (formats.TOKENS_MAGIC, 2, 2000)
    (tmp_path / "shards" / "a_000001.bin").write_bytes(header.tobytes() + np.arange(2000, dtype="<u4").tobytes())
    assert "mixed formats" in refused(invoke(*data, "-i", tmp_path / "shards" / "a_*.bin"), "'-i'")


@pytest.mark.skipif(not NO_PYCUDA, reason="reaching the 'PyCUDA is not installed' line proves every check passed")
def test_a_glob_of_good_shards_passes_every_check(data, tmp_path):
    (tmp_path / "shards").mkdir()
    for i in range(3):
        formats.write_tokens(tmp_path / "shards" / f"a_{i:06d}.bin", np.arange(700 + i) % 50257)
    r = invoke(*data, "-i", tmp_path / "shards" / "a_*.bin", "-j", tmp_path / "shards" / "a_000000.bin")
    assert "PyCUDA" in r.output and r.exit_code != 0


def test_schedule_options_without_their_schedule_are_refused(data):
    refused(invoke(*data, "--final-lr-frac", "0.1"), "--final-lr-frac")
    refused(invoke(*data, "--lr-schedule", "cosine", "--decay-frac", "0.3"), "--decay-frac")


def test_resume_of_a_missing_file_or_empty_folder_is_refused(data, tmp_path):
    refused(invoke(*data, "--resume", tmp_path / "nope.bin"), "--resume")
    # latest with nothing to resume starts afresh, but only where it will write checkpoints itself
    assert "--checkpoint-every" in refused(invoke(*data, "--resume", "latest", "--checkpoint-dir", tmp_path / "none"),
                                           "--resume")
    (tmp_path / "empty").mkdir()
    refused(invoke(*data, "--resume", tmp_path / "empty"), "--resume")
    refused(invoke(*data, "--resume", tmp_path / "empty", "--init", "d12"), "--init")


# -- resume: a checkpoint's settings are kept ----------------------------------------------------------
def options(data_args: list[str], **changes) -> TrainOptions:
    it = iter(data_args)
    flags = dict(zip(it, it))
    return TrainOptions(**{"train_tokens": flags["-i"], "val_tokens": flags["-j"], "init": "tiny", "batch": 2, "seq": 64,
                           **changes})


def write_checkpoint_of(run, folder: Path, step: int) -> None:
    """A checkpoint as the trainer writes it, for `run`'s settings, without a GPU."""
    params = fresh_init(run.config, 0)
    n = params.size
    moments = np.zeros(n, np.float32)
    formats.write_state(checkpoint.state_path(folder, step, 0), formats.TrainState(
        step, 1, 0, 0, run.micro_steps, 2, 64, run.total_batch, 0, n, 0, moments, moments,
        {"options": run.settings(), "data": {}, "rng": {}}))
    formats.write_checkpoint(checkpoint.model_path(folder, step), run.config, params)
    checkpoint.write_latest(folder, step, 1)


@pytest.fixture
def folder(data, tmp_path) -> Path:
    """A checkpoint at step 4 of 10 (B=2, T=64, cosine from lr 1e-3)."""
    folder = tmp_path / "ck"
    folder.mkdir()
    write_checkpoint_of(prepare(options(data, lr=1e-3, steps=10, lr_schedule="cosine"), Launch()), folder, 4)
    return folder


def test_a_resume_keeps_the_checkpoints_settings(data, folder):
    first = prepare(options(data, lr=1e-3, steps=10, lr_schedule="cosine"), Launch())
    resumed = prepare(options(data, resume="latest", checkpoint_dir=str(folder), batch=7), Launch())
    assert (resumed.opts.lr, resumed.steps, resumed.opts.lr_schedule, resumed.opts.batch) == (1e-3, 10, "cosine", 2)
    assert resumed.resume.step == 4 and resumed.schedule(5) == first.schedule(5)


def test_a_resume_refuses_an_explicit_setting_that_differs(data, folder):
    with pytest.raises(TrainError, match="'--total-batch': 256 differs from the checkpoint's 128"):
        prepare(options(data, resume=str(folder), total_batch=256, explicit=frozenset({"total_batch"})), Launch())
    with pytest.raises(TrainError, match="'--lr': 0.01 differs from the checkpoint's 0.001"):
        prepare(options(data, resume=str(folder), lr=1e-2, explicit=frozenset({"lr"})), Launch())
    longer = prepare(options(data, resume=str(folder), steps=12, explicit=frozenset({"steps"})), Launch())
    assert longer.steps == 12
    with pytest.raises(TrainError, match="'--steps': the checkpoint is at step 4 of 4"):
        prepare(options(data, resume=str(folder), steps=4, explicit=frozenset({"steps"})), Launch())


def test_a_resume_refuses_an_incomplete_checkpoint(data, folder):
    checkpoint.model_path(folder, 4).unlink()
    with pytest.raises(TrainError, match="incomplete: .*model_00000004.bin is missing"):
        prepare(options(data, resume="latest", checkpoint_dir=str(folder)), Launch())


@pytest.mark.parametrize("args, option, says", [
    (["--attention", "cudnn"], "--attention", "cudnn needs --precision bf16"),
    (["--attention", "flash", "--no-tf32"], "--attention", "needs --tf32"),
    (["--precision", "fp16"], "--precision", "'fp16' is not one of"),
])
def test_a_precision_and_attention_that_do_not_go_together_are_refused_up_front(data, args, option, says):
    assert says in refused(invoke(*data, *args), option)


# -- resume on another number of GPUs; the retry loop ----------------------------------------------------
MPI2 = Launch(world=2, rank=1, local_rank=1, launcher="OMPI_COMM_WORLD_SIZE")


def test_a_resume_on_more_gpus_keeps_the_total_batch_and_splits_it_anew(data, tmp_path):
    folder = tmp_path / "ck4"
    folder.mkdir()
    first = prepare(options(data, steps=10, total_batch=4 * 64), Launch())  # 1 GPU, 2 micro-steps of B=2
    write_checkpoint_of(first, folder, 4)
    two = prepare(options(data, resume="latest", checkpoint_dir=str(folder)), MPI2)
    assert (two.total_batch, two.micro_steps, two.opts.batch, two.steps) == (256, 1, 2, 10)
    wide = prepare(options(data, resume="latest", checkpoint_dir=str(folder), batch=1, explicit=frozenset({"batch"})),
                   MPI2)
    assert (wide.total_batch, wide.micro_steps) == (256, 2)
    with pytest.raises(TrainError, match="'--total-batch': the checkpoint's total batch of 256 tokens is not a multiple"):
        prepare(options(data, resume="latest", checkpoint_dir=str(folder)),
                Launch(world=4, rank=0, launcher="OMPI_COMM_WORLD_SIZE"))


def test_resume_latest_starts_fresh_then_resumes_then_says_the_run_is_complete(data, tmp_path):
    from train.options import RunComplete
    folder = tmp_path / "loop"
    loop = dict(resume="latest", checkpoint_dir=str(folder), checkpoint_every=2, steps=6)
    fresh = prepare(options(data, **loop, explicit=frozenset({"resume", "checkpoint_every", "steps"})), Launch())
    assert fresh.resume is None and "starting a fresh run" in fresh.notes[0] and not folder.exists()
    folder.mkdir()  # (the run makes it when it first checkpoints)
    write_checkpoint_of(fresh, folder, 2)
    again = prepare(options(data, **loop, explicit=frozenset({"resume", "checkpoint_every", "steps"})), Launch())
    assert again.resume.step == 2
    write_checkpoint_of(fresh, folder, 6)
    with pytest.raises(RunComplete, match="the run is complete: .* step 6 of 6"):
        prepare(options(data, resume="latest", checkpoint_dir=str(folder)), Launch())
    with pytest.raises(RunComplete):  # the loop's own command line, --steps 6 and all
        prepare(options(data, **loop, explicit=frozenset({"resume", "checkpoint_every", "steps"})), Launch())
    with pytest.raises(TrainError, match="'--steps': the checkpoint is at step 6 of 5"):
        prepare(options(data, **{**loop, "steps": 5}, explicit=frozenset({"resume", "steps"})), Launch())


def test_the_retry_loop_on_the_command_line_exits_0_once_complete(data, tmp_path):
    folder = tmp_path / "done"
    folder.mkdir()
    write_checkpoint_of(prepare(options(data, steps=3), Launch()), folder, 3)
    r = invoke(*data, "--resume", "latest", "--checkpoint-dir", folder)
    assert r.exit_code == 0 and "the run is complete" in r.output and "PyCUDA" not in r.output


def test_a_resume_on_other_shards_is_refused(data, tmp_path):
    folder = tmp_path / "moved"
    folder.mkdir()
    run = prepare(options(data, steps=10), Launch())
    write_checkpoint_of(run, folder, 4)
    state = formats.read_state(checkpoint.state_path(folder, 4, 0))
    state.info["data"] = {"position": {"step": 4, "shard": 0, "file": "train.bin", "offset": 999}}
    formats.write_state(checkpoint.state_path(folder, 4, 0), state)
    with pytest.raises(TrainError, match="'-i': the checkpoint's run reads step 5 from token 999 of train.bin; these "
                                         "shards put it at token 512 of train.bin"):
        prepare(options(data, resume="latest", checkpoint_dir=str(folder)), Launch())


def test_the_command_line_is_made_from_the_one_description_of_the_options():
    """Every TrainOptions field but `explicit` is one `workbench train` option with the field's
    default; a resumed run's rules (KEPT, CARRIED) come from the same description."""
    import dataclasses
    from workbench.cli.trainer import train as command
    from train.options import CARRIED, KEPT
    params = {p.name: p for p in command.params}
    fields = {f.name: f for f in dataclasses.fields(TrainOptions) if f.name != "explicit"}
    assert set(params) == set(fields)
    for name, f in fields.items():
        assert params[name].default == f.default, name
    assert KEPT["total_batch"] == "--total-batch" and "batch" in CARRIED and not set(KEPT) & set(CARRIED)
    assert "recompute" in CARRIED  # it changes no numbers: a resumed run may change it


def test_the_default_attention_is_the_fastest_as_exact_as_the_runs_matmuls(monkeypatch):
    import importlib.util

    from train.backends import PromotedSet, default_attention
    promoted = PromotedSet()  # the project's train/kernels/: cuDNN's two entries are promoted
    assert promoted.serves("attention_forward", "bf16", "cudnn") and promoted.serves("attention_backward", "bf16", "cudnn")
    assert default_attention("fp32", True, promoted) == "flash"      # TF32 matmuls: TF32 attention
    assert default_attention("fp32", False, promoted) == "softmax"   # exact matmuls: exact attention
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "cudnn" else real(name, *a))
    assert default_attention("bf16", True, promoted) == "cudnn"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cudnn" else real(name, *a))
    assert default_attention("bf16", True, promoted) == "flash"      # no cuDNN frontend: our flash kernels
    promoted.manifest = {k: v for k, v in promoted.manifest.items() if "@cudnn" not in k}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "cudnn" else real(name, *a))
    assert default_attention("bf16", True, promoted) == "flash"      # cuDNN not promoted

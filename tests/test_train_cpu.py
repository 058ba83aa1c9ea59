"""The trainer's CPU side: model sizes, the flat parameter layout and GPT-2 init, the llm.c file
formats (round trips, and one clear error for every kind of bad file), preprocessing, and the
NumPy GPT-2 (chained from the family references) against finite differences and PyTorch."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from train import formats, prepro
from train.config import PRESETS, GPT2Config, preset
from train.params import PARAM_NAMES, fresh_init, layout, num_parameters
from workbench.cli import cli
from train.errors import TrainError

ROOT = Path(__file__).resolve().parent.parent
# The shared data folder beside the repository (developers and CI have it; users need not).
SHARED_DATA = Path(os.environ.get("WORKBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
TS_TEXT = SHARED_DATA / "tinyshakespeare" / "input.txt"

MICRO = preset("micro")  # V=11, Vp=16: small enough to differentiate numerically


def random_params(config: GPT2Config, seed: int, scale: float = 0.3) -> np.ndarray:
    """Every parameter random (not GPT-2's init, whose ones and zeros would hide mistakes),
    wte's padding rows included: the loss must not see them."""
    return np.random.default_rng(seed).normal(0, scale, num_parameters(config))


def random_batch(config: GPT2Config, B: int, T: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, config.vocab_size, (B, T)).astype(np.int32),
            rng.integers(0, config.vocab_size, (B, T)).astype(np.int32))


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture
def gpt2_enc(monkeypatch):
    """tiktoken's gpt2 encoding, offline from the shared cache when it is there; else skip."""
    pytest.importorskip("tiktoken")
    cache = SHARED_DATA / "tiktoken_cache"
    if cache.is_dir() and "TIKTOKEN_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    try:
        return prepro.gpt2_encoding()
    except TrainError as e:
        pytest.skip(str(e))


# -- sizes, layout, init --------------------------------------------------------------------------
def test_d12_has_124475904_parameters():
    assert num_parameters(PRESETS["d12"]) == 124_475_904
    assert 1024 + 4 * num_parameters(PRESETS["d12"]) == 497_904_640  # the v3 file, header included


def test_presets_pad_the_vocabulary_to_a_multiple_of_128():
    for name in ("d12", "d24", "d36", "d48", "tiny"):
        c = PRESETS[name]
        assert (c.vocab_size, c.padded_vocab_size, c.max_seq_len) == (50257, 50304, 64 if name == "tiny" else 1024)
    assert [(c.num_layers, c.num_heads, c.channels) for c in (PRESETS[n] for n in ("d12", "d24", "d36", "d48"))] == \
        [(12, 12, 768), (24, 16, 1024), (36, 20, 1280), (48, 25, 1600)]
    assert GPT2Config(8, 11, 1, 1, 4).padded_vocab_size == 128


def test_config_refuses_impossible_sizes():
    with pytest.raises(TrainError, match="multiple of num_heads"):
        GPT2Config(8, 11, 1, 3, 8)
    with pytest.raises(TrainError, match="smaller than vocab_size"):
        GPT2Config(8, 11, 1, 1, 8, padded_vocab_size=10)
    with pytest.raises(TrainError, match="unknown model preset"):
        preset("d13")


def test_layout_is_contiguous_in_checkpoint_order():
    lay = layout(PRESETS["d12"])
    assert [t.name for t in lay] == list(PARAM_NAMES)
    offset = 0
    for t in lay:
        assert t.offset == offset and t.size == math.prod(t.shape)
        offset = t.end
    assert offset == lay.total
    assert lay["qkvw"].shape == (12, 3 * 768, 768) and lay["fcprojw"].shape == (12, 768, 4 * 768)
    assert lay["wte"].shape == (50304, 768) and lay["wpe"].shape == (1024, 768)


def test_layout_views_share_the_flat_buffer():
    flat = np.zeros(num_parameters(MICRO), dtype=np.float32)
    views = layout(MICRO).views(flat)
    views["fcb"][1, 3] = 7.0
    assert flat[layout(MICRO)["fcb"].offset + 1 * 4 * MICRO.channels + 3] == 7.0
    assert np.array_equal(layout(MICRO).flatten(views), flat)


def test_fresh_init_follows_gpt2():
    config = PRESETS["tiny"].replace(num_layers=8)
    flat = fresh_init(config, seed=3)
    assert flat.dtype == np.float32 and flat.size == num_parameters(config)
    p = layout(config).views(flat)
    V = config.vocab_size
    assert abs(p["wte"][:V].std() - 0.02) < 1e-3 and not p["wte"][V:].any()
    for name in ("wpe", "qkvw", "fcw"):
        assert abs(p[name].std() - 0.02) < 2e-3, name
    for name in ("attprojw", "fcprojw"):
        assert abs(p[name].std() - 0.02 / math.sqrt(2 * 8)) < 5e-4, name
    for name in ("ln1w", "ln2w", "lnfw"):
        assert (p[name] == 1).all()
    for name in ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"):
        assert not p[name].any()
    assert np.array_equal(flat, fresh_init(config, seed=3))
    assert not np.array_equal(flat, fresh_init(config, seed=4))


# -- checkpoints ----------------------------------------------------------------------------------
def test_checkpoint_v3_round_trip_is_bit_exact(tmp_path):
    config = PRESETS["tiny"]
    params = fresh_init(config, seed=1)
    path = formats.write_checkpoint(tmp_path / "m.bin", config, params)
    assert path.stat().st_size == 1024 + 4 * params.size
    header = np.fromfile(path, dtype="<i4", count=8)
    assert list(header) == [20240326, 3, 64, 50257, 2, 2, 32, 50304]
    got_config, got = formats.read_checkpoint(path)
    assert got_config == config and got.dtype == np.float32
    assert np.array_equal(got, params)
    assert no_temp_files(tmp_path)


def test_checkpoint_v5_loads_bf16_as_fp32(tmp_path):
    # Written by hand (not by our writer): the header, then the top 16 bits of each fp32.
    config = MICRO
    params = random_params(config, 2).astype(np.float32)
    bf16 = (params.view(np.uint32) >> 16).astype("<u2")
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 5, config.max_seq_len, 11, 2, 2, 8, 16]
    path = tmp_path / "m_bf16.bin"
    path.write_bytes(header.tobytes() + bf16.tobytes())
    got_config, got = formats.read_checkpoint(path)
    assert got_config == config
    assert np.array_equal(got, (bf16.astype(np.uint32) << 16).view(np.float32))
    assert np.allclose(got, params, rtol=2**-7, atol=0)


def test_checkpoint_v5_write_rounds_to_nearest(tmp_path):
    params = random_params(MICRO, 3).astype(np.float32)
    formats.write_checkpoint(tmp_path / "m.bin", MICRO, params, version=5)
    assert (tmp_path / "m.bin").stat().st_size == 1024 + 2 * params.size
    _, got = formats.read_checkpoint(tmp_path / "m.bin")
    assert np.all(np.abs(got - params) <= 2**-8 * np.abs(params))  # half an ulp: 8 significant bits
    torch = pytest.importorskip("torch")
    expect = torch.from_numpy(params).to(torch.bfloat16).float().numpy()
    assert np.array_equal(got, expect)


# -- token files, tokenizer, debug state ----------------------------------------------------------
def test_token_file_round_trip(tmp_path):
    tokens = np.array([50256, 0, 65535, 15496, 995], dtype=np.int64)
    path = formats.write_tokens(tmp_path / "t.bin", tokens)
    assert path.stat().st_size == 1024 + 2 * 5
    assert list(np.fromfile(path, dtype="<i4", count=3)) == [20240520, 1, 5]
    assert formats.read_tokens(path).tolist() == tokens.tolist()
    assert formats.read_tokens(path, mmap=True).tolist() == tokens.tolist()


def test_tokenizer_round_trip_decodes_split_characters(tmp_path):
    tokens = [b"Hello", b" world", b"\xe2\x80", b"\x99", b"<|endoftext|>"]
    path = formats.write_tokenizer(tmp_path / "tok.bin", tokens, eot=4)
    assert list(np.fromfile(path, dtype="<i4", count=4)) == [20240328, 2, 5, 4]
    tok = formats.read_tokenizer(path)
    assert tok.tokens == tokens and tok.eot == 4
    assert tok.decode([0, 1, 2, 3]) == "Hello world\u2019"  # the ’ spans two tokens
    with pytest.raises(TrainError, match="outside the tokenizer's vocabulary"):
        tok.decode([5])


def test_gpt2_tokenizer_file_decodes_like_tiktoken(tmp_path, gpt2_enc):
    path = formats.write_tokenizer(tmp_path / prepro.TOKENIZER_FILE, prepro.tokenizer_bytes(gpt2_enc), gpt2_enc.eot_token)
    tok = formats.read_tokenizer(path)
    assert tok.vocab_size == 50257 and tok.eot == 50256 and tok[50256] == b"<|endoftext|>"
    assert gpt2_enc.encode("Hello world") == [15496, 995]
    text = "To be, or not to be — that is the question: ¿qué?"
    assert tok.decode(gpt2_enc.encode(text)) == text


def test_debug_state_round_trip(tmp_path):
    config = MICRO
    inputs, targets = random_batch(config, 2, 5, 0)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, config.padded_vocab_size)).astype(np.float32)
    grads = rng.normal(size=num_parameters(config)).astype(np.float32)
    path = formats.write_debug_state(tmp_path / "d.bin", config, inputs, targets, logits, 2.5, grads)
    assert path.stat().st_size == 1024 + 4 * (2 * 10 + 10 * 11 + 1 + grads.size)
    state = formats.read_debug_state(path, config)
    assert (state.B, state.T) == (2, 5)
    assert np.array_equal(state.inputs, inputs) and np.array_equal(state.targets, targets)
    assert np.array_equal(state.logits, logits[:, :, :11])  # stored unpadded
    assert state.loss == 2.5 and np.array_equal(state.grads, grads)


# -- bad files: one clear line, nothing written ---------------------------------------------------
def _good_files(folder: Path) -> dict[str, Path]:
    return {
        "checkpoint": formats.write_checkpoint(folder / "m.bin", MICRO, random_params(MICRO, 0)),
        "tokens": formats.write_tokens(folder / "t.bin", np.arange(100)),
        "tokenizer": formats.write_tokenizer(folder / "tok.bin", [b"a", b"bc", b"<eot>"], 2),
    }


def _read(kind: str, path: Path):
    return {"checkpoint": formats.read_checkpoint, "tokens": formats.read_tokens,
            "tokenizer": formats.read_tokenizer}[kind](path)


def _mutate(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[:-3]
    elif how == "short header":
        data = data[:100]
    elif how == "extra bytes":
        data += b"\0" * 8
    elif how == "wrong version":
        data[4:8] = (9).to_bytes(4, "little")
    elif how == "foreign magic":
        data[0:4] = (0x464C457F).to_bytes(4, "little")  # an ELF file's first bytes
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["checkpoint", "tokens", "tokenizer"])
@pytest.mark.parametrize("how, says", [
    ("truncated", "truncated"), ("short header", "truncated"), ("extra bytes", "size mismatch|too many"),
    ("wrong version", "version 9"), ("foreign magic", "not an llm.c file"),
])
def test_bad_files_give_one_clear_line(tmp_path, kind, how, says):
    path = _good_files(tmp_path)[kind]
    _mutate(path, how)
    with pytest.raises(TrainError, match=says) as e:
        _read(kind, path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path))
    assert "expected" in message or "needs" in message


def test_a_file_of_another_kind_is_named_as_such(tmp_path):
    files = _good_files(tmp_path)
    with pytest.raises(TrainError, match=r"expected a model checkpoint \(magic 20240326\), found magic 20240520 \(a token file\)"):
        formats.read_checkpoint(files["tokens"])
    with pytest.raises(TrainError, match="no such file"):
        formats.read_checkpoint(tmp_path / "missing.bin")


def test_a_checkpoint_header_with_impossible_sizes_is_refused(tmp_path):
    path = _good_files(tmp_path)["checkpoint"]
    data = bytearray(path.read_bytes())
    data[20:24] = (3).to_bytes(4, "little")  # NH=3 does not divide C=8
    path.write_bytes(bytes(data))
    with pytest.raises(TrainError, match="no valid GPT-2 size"):
        formats.read_checkpoint(path)


def test_debug_state_for_another_model_size_is_refused(tmp_path):
    inputs, targets = random_batch(MICRO, 1, 4, 0)
    path = formats.write_debug_state(tmp_path / "d.bin", MICRO, inputs, targets, np.zeros((1, 4, 11)), 1.0,
                                     np.zeros(num_parameters(MICRO)))
    with pytest.raises(TrainError, match="size mismatch|truncated"):
        formats.read_debug_state(path, MICRO.replace(channels=16))


def test_writers_check_before_writing(tmp_path):
    with pytest.raises(TrainError, match="not written"):
        formats.write_checkpoint(tmp_path / "m.bin", MICRO, np.zeros(5))
    with pytest.raises(TrainError, match="fit uint16"):
        formats.write_tokens(tmp_path / "t.bin", [1, 70000])
    with pytest.raises(TrainError, match="1..255 bytes"):
        formats.write_tokenizer(tmp_path / "tok.bin", [b"a", b""], 0)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_save_keeps_the_old_file(tmp_path):
    path = formats.write_tokens(tmp_path / "t.bin", np.arange(10))
    before = path.read_bytes()

    def parts():
        yield b"\0" * 100
        raise KeyboardInterrupt  # the crash, mid-write

    with pytest.raises(KeyboardInterrupt):
        formats.atomic_write(path, parts())
    assert path.read_bytes() == before and no_temp_files(tmp_path)


def test_cli_prints_a_bad_input_as_one_error_line(tmp_path):
    result = CliRunner().invoke(cli, ["prepro", "tinyshakespeare", "--input", str(tmp_path / "nope.txt"),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "nope.txt: no such file" in lines[0]
    assert not (tmp_path / "out").exists()


# -- preprocessing --------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", ["tinyshakespeare", "gpt2"])
def test_prepro_into_an_unwritable_folder_is_one_line(tmp_path, verb):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out in ("/proc/nope", str(blocker / "data")):
        result = CliRunner().invoke(cli, ["prepro", verb, "--out", out])
        lines = result.output.strip().splitlines()
        assert result.exit_code != 0 and len(lines) == 1 and "'--out'" in lines[0], result.output


def test_a_write_the_disk_refuses_is_one_error():
    with pytest.raises(TrainError, match="cannot write"):
        formats.write_tokens(Path("/proc/t.bin"), np.arange(3))


needs_shakespeare = pytest.mark.skipif(not TS_TEXT.is_file(), reason=f"no tiny Shakespeare at {TS_TEXT}")


@needs_shakespeare
def test_prepro_tinyshakespeare_makes_llmc_splits(tmp_path, gpt2_enc):
    result = CliRunner().invoke(cli, ["prepro", "tinyshakespeare", "--input", str(TS_TEXT), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    val = formats.read_tokens(tmp_path / "tiny_shakespeare_val.bin")
    train = formats.read_tokens(tmp_path / "tiny_shakespeare_train.bin")
    assert (val.size, train.size) == (32768, 305260)
    assert val[0] == 50256 and (val == 50256).sum() + (train == 50256).sum() == 7222  # one per piece
    tok = formats.read_tokenizer(tmp_path / "gpt2_tokenizer.bin")
    assert tok.decode(val[:4]) == "<|endoftext|>First Citizen:"
    assert tok.decode(np.concatenate([val, train])).replace("<|endoftext|>", "") == TS_TEXT.read_text()


@needs_shakespeare
def test_prepro_refuses_to_replace_the_data_with_another_texts_without_force(tmp_path, gpt2_enc):
    out = tmp_path / "data"
    canonical = ["prepro", "tinyshakespeare", "--input", str(TS_TEXT), "--out", str(out)]
    assert CliRunner().invoke(cli, canonical).exit_code == 0
    again = CliRunner().invoke(cli, canonical)
    assert again.exit_code == 0 and "up to date" in again.output
    before = (out / "tiny_shakespeare_train.bin").read_bytes()
    other = tmp_path / "other.txt"
    other.write_text(TS_TEXT.read_text().replace("Citizen", "Townsman"))
    refused = CliRunner().invoke(cli, ["prepro", "tinyshakespeare", "--input", str(other), "--out", str(out)])
    lines = refused.output.strip().splitlines()
    assert refused.exit_code == 1 and lines[-1].startswith("error:") and "--force" in lines[-1], refused.output
    assert (out / "tiny_shakespeare_train.bin").read_bytes() == before
    forced = CliRunner().invoke(cli, ["prepro", "tinyshakespeare", "--input", str(other), "--out", str(out), "--force"])
    assert forced.exit_code == 0 and (out / "tiny_shakespeare_train.bin").read_bytes() != before


@needs_shakespeare
def test_download_keeps_only_a_file_with_the_right_checksum(tmp_path):
    url = TS_TEXT.as_uri()
    seen = []
    got = prepro.download(url, tmp_path / "a.txt", prepro.TINYSHAKESPEARE_SHA256, lambda d, t: seen.append(d))
    assert got.read_bytes() == TS_TEXT.read_bytes() and seen[-1] == TS_TEXT.stat().st_size
    with pytest.raises(TrainError, match="checksum mismatch"):
        prepro.download(url, tmp_path / "b.txt", "0" * 64)
    with pytest.raises(TrainError, match="could not download"):
        prepro.download((tmp_path / "missing.txt").as_uri(), tmp_path / "c.txt", "0" * 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


@needs_shakespeare
def test_prepro_tinyshakespeare_downloads_when_given_no_input(tmp_path, gpt2_enc, monkeypatch):
    monkeypatch.setattr(prepro, "TINYSHAKESPEARE_URL", TS_TEXT.as_uri())
    written = prepro.prepro_tinyshakespeare(tmp_path)
    assert (tmp_path / "tiny_shakespeare.txt").read_bytes() == TS_TEXT.read_bytes()
    assert formats.read_tokens(tmp_path / "tiny_shakespeare_val.bin").size == 32768
    monkeypatch.setattr(prepro, "TINYSHAKESPEARE_URL", "file:///nowhere")  # the second run reuses the text
    again = prepro.prepro_tinyshakespeare(tmp_path)
    assert any("reused" in n for n in again.notes) and len(written.files) == 4


# -- the NumPy GPT-2 (train/gpt2_numpy.py) ---------------------------------------------------------
def test_numpy_gpt2_gradients_match_finite_differences():
    from train.gpt2_numpy import gpt2_backward, gpt2_forward, gpt2_loss
    config = MICRO
    params = random_params(config, 5)
    inputs, targets = random_batch(config, 2, 6, 5)  # T < maxT: wpe's last rows get no gradient
    fwd = gpt2_forward(params, config, inputs, targets)
    grads = gpt2_backward(params, config, fwd["acts"])
    rng = np.random.default_rng(0)
    h = 1e-5
    for t in layout(config):
        picks = list(rng.choice(t.size, size=min(6, t.size), replace=False))
        if t.name == "wte":
            picks += [int(inputs[0, 0]) * config.channels, (config.padded_vocab_size - 1) * config.channels]
        if t.name == "wpe":
            picks += [(config.max_seq_len - 1) * config.channels]
        for i in picks:
            k = t.offset + int(i)
            up, down = params.copy(), params.copy()
            up[k] += h
            down[k] -= h
            numeric = (gpt2_loss(up, config, inputs, targets) - gpt2_loss(down, config, inputs, targets)) / (2 * h)
            assert abs(grads[k] - numeric) <= 1e-7 + 1e-5 * abs(numeric), (t.name, i, grads[k], numeric)
    p = layout(config).views(grads)
    assert not p["wte"][config.vocab_size:].any() and not p["wpe"][6:].any()


@pytest.mark.parametrize("config_name, B, T", [("micro", 2, 8), ("micro", 3, 5), ("tiny", 2, 17)])
def test_numpy_gpt2_matches_torch(config_name, B, T):
    torch = pytest.importorskip("torch")
    from train.gpt2_numpy import gpt2_backward, gpt2_forward
    from train.gpt2_torch import GPT, forward_backward
    config = preset(config_name)
    params = random_params(config, 7, scale=0.1)
    inputs, targets = random_batch(config, B, T, 7)
    fwd = gpt2_forward(params, config, inputs, targets)
    grads = gpt2_backward(params, config, fwd["acts"])
    model = GPT.from_flat(config, params, dtype=torch.float64)
    logits, loss, tgrads = forward_backward(model, inputs, targets)
    assert logits.shape == (B, T, config.padded_vocab_size)
    np.testing.assert_allclose(fwd["logits"], logits, rtol=1e-10, atol=1e-12)
    assert fwd["loss"] == pytest.approx(loss, rel=1e-12)
    gv, tv = layout(config).views(grads), layout(config).views(tgrads)
    for name in PARAM_NAMES:
        scale = np.abs(tv[name]).max()
        np.testing.assert_allclose(gv[name], tv[name], rtol=1e-9, atol=1e-11 * max(scale, 1e-30), err_msg=name)
    assert np.array_equal(model.to_flat(), params)  # the layout survives the trip through torch


def test_torch_gpt2_sdpa_matches_explicit_attention():
    torch = pytest.importorskip("torch")
    from train.gpt2_torch import GPT
    params = random_params(MICRO, 8)
    inputs, targets = random_batch(MICRO, 2, 7, 8)
    a = GPT.from_flat(MICRO, params, dtype=torch.float64)(torch.from_numpy(inputs).long(), torch.from_numpy(targets).long())
    b = GPT.from_flat(MICRO, params, dtype=torch.float64, sdpa=True)(torch.from_numpy(inputs).long(),
                                                                     torch.from_numpy(targets).long())
    torch.testing.assert_close(a[0], b[0], rtol=1e-12, atol=1e-12)


# -- GPT-2 from Hugging Face (offline, on a tiny random model) -------------------------------------
@pytest.fixture
def tiny_hf_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import torch
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=50257, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg)
    folder = tmp_path / "hf_tiny"
    model.save_pretrained(folder)
    return model, folder


def test_prepro_gpt2_exports_weights_and_a_debug_state_our_models_reproduce(tmp_path, tiny_hf_model, gpt2_enc):
    import torch

    from train.gpt2_numpy import gpt2_backward, gpt2_forward
    from train.gpt2_torch import GPT, forward_backward
    hf, folder = tiny_hf_model
    out = tmp_path / "out"
    out.mkdir()
    tokens = np.random.default_rng(0).integers(0, 50257, 300)
    formats.write_tokens(out / "tiny_shakespeare_val.bin", tokens)
    result = CliRunner().invoke(cli, ["prepro", "gpt2", "--model", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    name = "gpt2_" + prepro.size_name(hf)
    config, params = formats.read_checkpoint(out / f"{name}.bin")
    assert config == PRESETS["tiny"]
    p = layout(config).views(params)
    sd = hf.state_dict()
    assert np.array_equal(p["wte"][:50257], sd["transformer.wte.weight"].numpy()) and not p["wte"][50257:].any()
    assert np.array_equal(p["qkvw"][1], sd["transformer.h.1.attn.c_attn.weight"].numpy().T)
    assert np.array_equal(p["fcprojw"][0], sd["transformer.h.0.mlp.c_proj.weight"].numpy().T)
    _, bf16 = formats.read_checkpoint(out / f"{name}_bf16.bin")
    assert np.array_equal(bf16, torch.from_numpy(params).to(torch.bfloat16).float().numpy())
    assert formats.read_tokenizer(out / "gpt2_tokenizer.bin").vocab_size == 50257

    state = formats.read_debug_state(out / f"{name}_debug_state.bin", config)
    assert (state.B, state.T) == (4, 64)
    assert np.array_equal(state.inputs.reshape(-1), tokens[:256]) and np.array_equal(state.targets.reshape(-1), tokens[1:257])
    fwd = gpt2_forward(params, config, state.inputs, state.targets)
    grads = gpt2_backward(params, config, fwd["acts"])
    logits, loss, tgrads = forward_backward(GPT.from_flat(config, params), state.inputs, state.targets)
    for ours_logits, ours_loss, ours_grads in ((fwd["logits"], fwd["loss"], grads), (logits, loss, tgrads)):
        np.testing.assert_allclose(ours_logits[:, :, :50257], state.logits, rtol=1e-4, atol=1e-5)
        assert ours_loss == pytest.approx(state.loss, rel=1e-6)
        gv, sv = layout(config).views(ours_grads), layout(config).views(state.grads)
        for n in PARAM_NAMES:
            np.testing.assert_allclose(gv[n], sv[n], rtol=1e-3, atol=1e-4 * np.abs(sv[n]).max() + 1e-12, err_msg=n)


def test_prepro_gpt2_without_a_token_file_says_what_to_run(tmp_path, tiny_hf_model):
    _, folder = tiny_hf_model
    with pytest.raises(TrainError, match="prepro tinyshakespeare"):
        prepro.prepro_gpt2(tmp_path, str(folder))
    assert list(tmp_path.iterdir()) == [folder]

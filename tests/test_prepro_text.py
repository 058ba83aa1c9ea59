"""`workbench prepro text`: a user's own UTF-8 files as GPT-2 token shards, with the real tiktoken
encoding (offline, from the shared cache beside the repository; skipped without it)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from train import formats, prepro
from train.config import EOT
from train.errors import TrainError
from workbench.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("WORKBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
TIKTOKEN_CACHE = SHARED_DATA / "tiktoken_cache"


@pytest.fixture
def enc(monkeypatch):
    """tiktoken's gpt2 encoding from the shared cache (never the network); skip where it is absent."""
    pytest.importorskip("tiktoken")
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"no tiktoken cache at {TIKTOKEN_CACHE}")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
    try:
        return prepro.gpt2_encoding()
    except TrainError as e:
        pytest.skip(str(e))


def invoke(*args):
    return CliRunner().invoke(cli, ["prepro", "text", *map(str, args)])


def one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output
    return lines[0]


def shards(out: Path, name: str, split: str) -> list[Path]:
    return sorted(out.glob(f"{name}_{split}_*.bin"))


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def text_of(n_lines: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    words = ["the", "quick", "brown", "fox", "jumps", "über", "lazy", "dog's", "42", "!!", "naïve", "  spaced"]
    lines = []
    for _ in range(n_lines):
        if rng.random() < 0.2:
            lines.append("")
        else:
            lines.append(" ".join(rng.choice(words, rng.integers(1, 9))))
    return "\n".join(lines) + "\n"


@pytest.fixture
def two_files(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(text_of(1500, 1), encoding="utf-8")
    b.write_text("Second document.\n\nIt has ünïcödé, 漢字 and emoji 🙂 too.\n" * 40, encoding="utf-8")
    return a, b


def expected_stream(enc, *files: Path) -> np.ndarray:
    out = []
    for f in files:
        out += [EOT] + enc.encode_ordinary(f.read_text(encoding="utf-8"))
    return np.asarray(out, dtype=np.uint16)


def split_sizes(total: int, size: int) -> list[int]:
    """Whole shards, then the rest: a shard of its own if it is at least half a shard (or the
    split's only one), else folded into the shard before it."""
    sizes = [size] * (total // size)
    rest = total % size
    if rest and sizes and rest < size // 2:
        sizes[-1] += rest
    elif rest:
        sizes.append(rest)
    return sizes


def test_a_short_rest_is_folded_into_the_last_whole_shard():
    assert split_sizes(9, 4) == [4, 5] and split_sizes(10, 4) == [4, 4, 2] and split_sizes(11, 4) == [4, 4, 3] and split_sizes(3, 4) == [3]


def test_two_files_become_val_then_train_shards_of_the_exact_stream(tmp_path, enc, two_files, monkeypatch):
    monkeypatch.chdir(tmp_path)  # short paths: the table fits the runner's 80 columns
    out = Path("data")
    stream = expected_stream(enc, *two_files)
    assert stream.size > 5 * 1024  # several shards
    r = invoke(*two_files, "--out", out, "--name", "mine", "--shard-size", 1024, "--val-tokens", 1600)
    assert r.exit_code == 0, r.output
    val, train = shards(out, "mine", "val"), shards(out, "mine", "train")
    assert [p.name for p in val] == ["mine_val_000000.bin", "mine_val_000001.bin"]
    assert [p.name for p in train][:2] == ["mine_train_000000.bin", "mine_train_000001.bin"]
    read = [formats.read_tokens(p) for p in val + train]
    assert all(t.dtype == np.uint16 for t in read)
    np.testing.assert_array_equal(np.concatenate(read), stream)
    val_sizes, train_sizes = [t.size for t in read[:len(val)]], [t.size for t in read[len(val):]]
    assert val_sizes == [1024, 1600 - 1024]
    assert train_sizes == split_sizes(stream.size - 1600, 1024)
    # the tokenizer beside them, which the trainer decodes samples with
    tok = formats.read_tokenizer(out / "gpt2_tokenizer.bin")
    assert tok.decode(stream[:3]).startswith("<|endoftext|>")
    assert tok.decode(stream).replace("<|endoftext|>", "") == "".join(f.read_text() for f in two_files)
    # the report: every shard with its tokens, the totals and the globs to train on
    assert "mine_train_000000.bin" in r.output and "1,024 training tokens" in r.output
    assert "576 validation tokens" in r.output  # the last validation shard
    assert f"{stream.size - 1600:,} training tokens in {len(train)} shards, 1,600 validation tokens in 2 shards" in r.output
    assert "workbench train -i 'data/mine_train_*.bin' -j 'data/mine_val_*.bin'" in r.output
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging or spill file left


def test_the_default_validation_split_is_a_tenth_of_the_tokens(tmp_path, enc, two_files):
    out = tmp_path / "data"
    written = prepro.prepro_text(two_files, out, shard_size=1024)
    stream = expected_stream(enc, *two_files)
    val = np.concatenate([formats.read_tokens(p) for p in shards(out, "text", "val")])
    train = np.concatenate([formats.read_tokens(p) for p in shards(out, "text", "train")])
    assert val.size == stream.size // 10 and written.tokens == {"val": val.size, "train": train.size}
    np.testing.assert_array_equal(np.concatenate([val, train]), stream)
    assert written.globs["train"] == f"{out}/text_train_*.bin"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_progress_reports_the_input_bytes(tmp_path, enc, two_files):
    seen = []
    prepro.prepro_text(two_files, tmp_path / "data", shard_size=1024, progress=lambda d, t: seen.append((d, t)))
    total = sum(f.stat().st_size for f in two_files)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_rerun_refuses_without_force_and_force_removes_stale_shards(tmp_path, enc, two_files):
    out = tmp_path / "data"
    args = [*two_files, "--out", out, "--shard-size", 1024, "--val-tokens", 1024]
    assert invoke(*args).exit_code == 0
    before = listing(out)
    assert len([n for n in before if n.startswith("text_train_")]) > 2
    again = invoke(*args)
    line = one_error_line(again)
    assert again.exit_code == 1 and "text_train_000000.bin" in line and "--force" in line
    assert f"and {len(before) - 2} more" in line  # every shard but the one named, less the tokenizer
    assert listing(out) == before  # untouched

    forced = invoke(*two_files, "--out", out, "--shard-size", 4096, "--val-tokens", 1024, "--force")
    assert forced.exit_code == 0, forced.output
    assert "removed" in forced.output and "stale" in forced.output
    stream = expected_stream(enc, *two_files)
    train = shards(out, "text", "train")
    assert len(train) == len(split_sizes(stream.size - 1024, 4096))  # only this run's shards are left for a glob
    assert [formats.token_count(p) for p in train[:-1]] == [4096] * (len(train) - 1)
    np.testing.assert_array_equal(np.concatenate([formats.read_tokens(p) for p in shards(out, "text", "val") + train]),
                                  stream)
    assert (out / "gpt2_tokenizer.bin").read_bytes() == before["gpt2_tokenizer.bin"]


def test_other_names_in_the_folder_are_left_alone(tmp_path, enc, two_files):
    out = tmp_path / "data"
    assert invoke(two_files[0], "--out", out, "--name", "a", "--shard-size", 1024).exit_code == 0
    a_files = {n: b for n, b in listing(out).items() if n.startswith("a_")}
    r = invoke(two_files[1], "--out", out, "--name", "b", "--shard-size", 1024, "--force")
    assert r.exit_code == 0, r.output
    assert {n: b for n, b in listing(out).items() if n.startswith("a_")} == a_files
    assert shards(out, "b", "train")


@pytest.mark.parametrize("case", ["missing", "folder", "not_utf8", "bad_name", "second_missing"])
def test_a_bad_input_is_one_line_and_writes_nothing(tmp_path, enc, two_files, case):
    out = tmp_path / "out"
    files, extra, expect = [two_files[0]], [], None
    if case == "missing":
        files, expect = [tmp_path / "nope.txt"], "nope.txt: no such file"
    elif case == "second_missing":  # checked before the first file is tokenized
        files, expect = [two_files[0], tmp_path / "nope.txt"], "nope.txt: no such file"
    elif case == "folder":
        (tmp_path / "dir").mkdir()
        files, expect = [two_files[0], tmp_path / "dir"], "dir: is a folder"
    elif case == "not_utf8":
        bad = tmp_path / "latin1.txt"
        bad.write_bytes("plain ascii first\n".encode() * 10 + "café\n".encode("latin-1"))
        files, expect = [two_files[0], bad], f"latin1.txt: expected UTF-8 text, found invalid byte 0xe9 at offset {18 * 10 + 3}"
    elif case == "bad_name":
        extra, expect = ["--name", "my/data"], "--name"
    r = invoke(*files, "--out", out, *extra)
    assert expect in one_error_line(r)
    assert not out.exists()


@pytest.mark.parametrize("args, expect", [
    (["--shard-size", "1000"], "--shard-size"),
    (["--val-tokens", "0"], "--val-tokens"),
    ([], "Missing argument"),
])
def test_bad_options_are_one_line(tmp_path, two_files, args, expect):
    files = [two_files[0]] if args else []
    r = invoke(*files, *args, "--out", tmp_path / "out")
    assert r.exit_code == 2 and expect in one_error_line(r)
    assert not (tmp_path / "out").exists()


def test_invalid_utf8_in_a_later_chunk_leaves_the_folder_as_it_was(tmp_path, enc, two_files, monkeypatch):
    monkeypatch.setattr(prepro, "TEXT_CHUNK_BYTES", 256)
    out = tmp_path / "data"
    out.mkdir()
    bad = tmp_path / "bad.txt"
    good = "a line of text\n" * 200
    bad.write_bytes(good.encode() + b"\xff\xfe tail\n")
    with pytest.raises(TrainError, match=f"bad.txt: expected UTF-8 text, found invalid byte 0xff at offset {len(good)}"):
        prepro.prepro_text([two_files[0], bad], out, shard_size=1024, val_tokens=10)  # shards were staged before it
    assert list(out.iterdir()) == []


def test_too_few_tokens_for_a_split_is_refused(tmp_path, enc):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("hi\n")
    r = invoke(tiny, "--out", tmp_path / "out")  # 3 tokens: 10% of them is none
    assert "no validation split" in one_error_line(r)
    r = invoke(tiny, "--out", tmp_path / "out", "--val-tokens", 3)
    assert "no training split" in one_error_line(r)
    assert not (tmp_path / "out").exists()


def test_a_leading_byte_order_mark_is_not_text(tmp_path, enc):
    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbfHello there.\n" * 50)
    prepro.prepro_text([f], tmp_path / "data", shard_size=1024, val_tokens=2)
    got = np.concatenate([formats.read_tokens(p) for p in sorted((tmp_path / "data").glob("text_*_*.bin"))[::-1]])
    text = "Hello there.\n" + "\ufeffHello there.\n" * 49  # only the file's first mark goes
    np.testing.assert_array_equal(got, [EOT] + enc.encode_ordinary(text))


# -- chunking --------------------------------------------------------------------------------------
def chunked_tokens(path: Path, enc) -> tuple[list[int], int]:
    pieces = [piece for piece, _ in prepro.text_chunks(path)]
    return [t for toks in enc.encode_ordinary_batch(pieces) for t in toks], len(pieces)


def test_chunks_tokenize_exactly_as_the_whole_text(tmp_path, enc, monkeypatch):
    monkeypatch.setattr(prepro, "TEXT_CHUNK_BYTES", 64)
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(2000):  # "word word" lines, blank lines (runs of them), and lines ending in spaces
        kind = rng.integers(0, 6)
        lines.append("" if kind == 0 else "word word  " if kind == 1 else "\n" if kind == 2 else "word word")
    text = "\n".join(lines) + "\n"
    path = tmp_path / "lines.txt"
    path.write_text(text, encoding="utf-8")
    assert path.stat().st_size > 100 * prepro.TEXT_CHUNK_BYTES
    tokens, n = chunked_tokens(path, enc)
    assert n > 100  # it was cut
    assert tokens == enc.encode_ordinary(text)
    assert "".join(p for p, _ in prepro.text_chunks(path)) == text


@pytest.mark.parametrize("text", [
    "word word\n\nword word\n" * 300,
    "word word\r\n\r\nword word\r\n" * 300,  # CRLF: cut before the \r
    "x" * 50 + " " + "y" * 50 + "  z" * 400,  # no line break at all: cut before a space
    "über naïve\n\n\n  漢字 🙂 \n" * 300,       # multi-byte characters across the reads
    "abcdefghij" * 100,                          # no whitespace: one piece
], ids=["blank-lines", "crlf", "one-line", "multibyte", "no-whitespace"])
def test_chunking_is_exact_for_awkward_texts(tmp_path, enc, monkeypatch, text):
    monkeypatch.setattr(prepro, "TEXT_CHUNK_BYTES", 37)
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    tokens, n = chunked_tokens(path, enc)
    assert tokens == enc.encode_ordinary(text)
    assert n > 1 if any(c.isspace() for c in text) else n == 1


def test_a_small_chunk_size_gives_the_same_shards(tmp_path, enc, two_files, monkeypatch):
    big = prepro.prepro_text(two_files, tmp_path / "big", shard_size=1024, val_tokens=100)
    monkeypatch.setattr(prepro, "TEXT_CHUNK_BYTES", 100)
    monkeypatch.setattr(prepro, "TEXT_BATCH", 3)
    small = prepro.prepro_text(two_files, tmp_path / "small", shard_size=1024, val_tokens=100)
    assert big.tokens == small.tokens
    for p in (tmp_path / "big").iterdir():
        assert (tmp_path / "small" / p.name).read_bytes() == p.read_bytes()

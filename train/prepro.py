"""Preparing the trainer's inputs in llm.c's formats: tiny Shakespeare as GPT-2 tokens, the GPT-2
tokenizer, and OpenAI's GPT-2 weights (from Hugging Face) with a debug state to check a trainer by.

Also: a user's own UTF-8 text files as GPT-2 token shards (prepro_text), streamed, for corpora
larger than memory.

Everything is computed in memory and checked before the first file is written. An output that
already holds exactly these bytes is left alone (up to date); one that holds anything else is
replaced only with force=True (`--force`), and that is decided for every output before any is
written: preprocessing another text never silently replaces the canonical data set.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from . import formats
from .config import EOT, GPT2_VOCAB, GPT2Config
from .errors import TrainError, bad_option
from .params import layout

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_TEXT = "tiny_shakespeare.txt"
TINYSHAKESPEARE_VAL = "tiny_shakespeare_val.bin"
TINYSHAKESPEARE_TRAIN = "tiny_shakespeare_train.bin"
TOKENIZER_FILE = "gpt2_tokenizer.bin"
VAL_TOKENS = 32768  # the first 32,768 tokens are the validation split, as in llm.c

DEBUG_B, DEBUG_T = 4, 64

Progress = Callable[[int, "int | None"], None]  # (bytes so far, total bytes or None)


@dataclass
class Written:
    """What a preprocessing step produced: path -> a one-line description."""
    files: dict[Path, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def write_all(self, outputs: dict[Path, tuple[list, str]], force: bool = False) -> "Written":
        """Write each path's parts (formats.*_parts) with its description, unless the file already
        holds them; refuse, before writing anything, to replace a file that differs without force."""
        differ = [p for p, (parts, _) in outputs.items() if p.exists() and not formats.same_content(p, parts)]
        if differ and not force:
            raise TrainError(f"{', '.join(map(str, differ))} already exist{'s' if len(differ) == 1 else ''} with other "
                             f"content than this would write; pass --force to replace {'it' if len(differ) == 1 else 'them'}")
        for path, (parts, description) in outputs.items():
            if path.exists() and path not in differ:
                self.notes.append(f"{path} is up to date")
            else:
                self.files[formats.atomic_write(path, parts)] = description
        return self


# -- download -------------------------------------------------------------------------------------
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, dest: str | os.PathLike, sha256: str, progress: Progress | None = None,
             timeout: float = 60.0) -> Path:
    """Fetch `url` to `dest`, keeping it only if its sha256 matches (else nothing is left behind)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    total = r.headers.get("Content-Length")
                    total = int(total) if total and total.isdigit() else None
                    done = 0
                    if progress:
                        progress(0, total)
                    for chunk in iter(lambda: r.read(1 << 16), b""):
                        f.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, total)
            except (urllib.error.URLError, OSError, ValueError) as e:
                reason = getattr(e, "reason", None) or e
                raise TrainError(f"could not download {url}: {reason}") from None
        if h.hexdigest() != sha256:
            raise TrainError(f"{url}: checksum mismatch: expected sha256 {sha256}, found {h.hexdigest()} "
                             "(nothing kept)")
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return dest


# -- tokenization ---------------------------------------------------------------------------------
def gpt2_encoding():
    """tiktoken's GPT-2 BPE (downloaded once by tiktoken, or from TIKTOKEN_CACHE_DIR offline)."""
    try:
        import tiktoken
    except ImportError:
        raise TrainError("GPT-2 tokenization needs tiktoken: pip install 'workbench[train]'") from None
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:
        reason = " ".join(str(e).split())[:120]
        raise TrainError(f"tiktoken could not load the gpt2 encoding ({type(e).__name__}: {reason}); it needs "
                         "the network once, or TIKTOKEN_CACHE_DIR naming a cache that holds it") from None
    if enc.n_vocab != GPT2_VOCAB or enc.eot_token != EOT:
        raise TrainError(f"tiktoken's gpt2 encoding has {enc.n_vocab} tokens and eot {enc.eot_token}, "
                         f"expected {GPT2_VOCAB} and {EOT}")
    return enc


def tokenize_tinyshakespeare(text: str, enc) -> np.ndarray:
    """llm.c's rule: each blank-line-separated piece becomes <|endoftext|> then the piece's tokens,
    with the "\\n\\n" that split it put back on every piece but the last."""
    pieces = text.split("\n\n")
    texts = [p + "\n\n" for p in pieces[:-1]] + [pieces[-1]]
    out: list[int] = []
    for toks in enc.encode_ordinary_batch(texts):
        out.append(EOT)
        out.extend(toks)
    return np.asarray(out, dtype=np.uint16)


def tokenizer_bytes(enc) -> list[bytes]:
    return [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]


def gpt2_tokenizer_output(out_dir: Path, enc) -> dict[Path, tuple[list, str]]:
    path = out_dir / TOKENIZER_FILE
    return {path: (formats.tokenizer_parts(path, tokenizer_bytes(enc), enc.eot_token),
                   f"GPT-2 tokenizer, {enc.n_vocab:,} tokens")}


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise TrainError(f"{path}: no such file (expected the tiny Shakespeare text)") from None
    except UnicodeDecodeError as e:
        raise TrainError(f"{path}: expected UTF-8 text, found invalid byte at offset {e.start}") from None
    except OSError as e:
        raise TrainError(f"{path}: cannot read ({e.strerror})") from None


def prepro_tinyshakespeare(out_dir: str | os.PathLike, input_path: str | os.PathLike | None = None,
                           progress: Progress | None = None, force: bool = False) -> Written:
    """Tokenize tiny Shakespeare into OUT/tiny_shakespeare_{val,train}.bin and write
    OUT/gpt2_tokenizer.bin. Without `input_path` the text is downloaded (checksum-checked) to
    OUT/tiny_shakespeare.txt, or reused from there when it is already present and intact.
    Existing outputs with other content are replaced only with `force`."""
    out_dir = Path(out_dir)
    written = Written()
    if input_path is not None:
        source = Path(input_path)
        text = _read_text(source)
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != TINYSHAKESPEARE_SHA256:
            written.notes.append(f"{source} is not the canonical tiny Shakespeare (sha256 differs): "
                                 f"the split sizes will differ from 32,768 / 305,260")
    enc = gpt2_encoding()  # a missing tokenizer fails before anything is downloaded
    if input_path is None:
        source = out_dir / TINYSHAKESPEARE_TEXT
        if source.is_file() and sha256_of(source) == TINYSHAKESPEARE_SHA256:
            written.notes.append(f"reused {source} (checksum ok)")
        else:
            download(TINYSHAKESPEARE_URL, source, TINYSHAKESPEARE_SHA256, progress)
            written.files[source] = "tiny Shakespeare text (sha256 checked)"
        text = _read_text(source)
    tokens = tokenize_tinyshakespeare(text, enc)
    if tokens.size <= VAL_TOKENS:
        raise TrainError(f"{source}: too short: {tokens.size} tokens, the validation split alone takes {VAL_TOKENS}")
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    out_dir.mkdir(parents=True, exist_ok=True)
    val_path, train_path = out_dir / TINYSHAKESPEARE_VAL, out_dir / TINYSHAKESPEARE_TRAIN
    return written.write_all({val_path: (formats.tokens_parts(val_path, val), f"{val.size:,} validation tokens"),
                              train_path: (formats.tokens_parts(train_path, train), f"{train.size:,} training tokens"),
                              **gpt2_tokenizer_output(out_dir, enc)}, force)


# -- GPT-2 weights from Hugging Face --------------------------------------------------------------
def _transformers():
    try:
        import torch
        import transformers
    except ImportError:
        raise TrainError("workbench prepro gpt2 needs transformers and torch: pip install 'workbench[hf]'") from None
    return torch, transformers


def load_hf_model(name: str):
    """GPT2LMHeadModel.from_pretrained(name): a hub id (gpt2, gpt2-medium, ...) or a local folder."""
    _, transformers = _transformers()
    try:
        return transformers.GPT2LMHeadModel.from_pretrained(name, attn_implementation="eager")
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TrainError(f"could not load the Hugging Face model {name!r}: {first}") from None


def hf_config(model) -> GPT2Config:
    """Our config for a transformers GPT-2, refusing variants our trainer does not compute."""
    c = model.config
    problems = []
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        problems.append(f"activation {c.activation_function} (expected the tanh GELU)")
    if abs(c.layer_norm_epsilon - 1e-5) > 1e-12:
        problems.append(f"layer_norm_epsilon {c.layer_norm_epsilon} (expected 1e-5)")
    if getattr(c, "n_inner", None) not in (None, 4 * c.n_embd):
        problems.append(f"n_inner {c.n_inner} (expected 4 * n_embd)")
    if getattr(c, "scale_attn_by_inverse_layer_idx", False) or getattr(c, "reorder_and_upcast_attn", False):
        problems.append("attention scaling variants")
    if not getattr(c, "scale_attn_weights", True):
        problems.append("unscaled attention")
    if getattr(c, "tie_word_embeddings", True) is False:
        problems.append("untied lm_head")
    if problems:
        raise TrainError("this GPT-2 differs from the one the trainer computes: " + "; ".join(problems))
    return GPT2Config(max_seq_len=c.n_positions, vocab_size=c.vocab_size, num_layers=c.n_layer,
                      num_heads=c.n_head, channels=c.n_embd)


def hf_to_flat(model, config: GPT2Config, grads: bool = False) -> np.ndarray:
    """The model's weights (or, with grads=True, their .grad) as one flat fp32 buffer in checkpoint
    layout: Conv1D weights transposed to (out, in), wte padded with zero rows to Vp."""
    named = dict(model.named_parameters(remove_duplicate=False))

    def get(name: str) -> np.ndarray:
        p = named[name]
        t = p.grad if grads else p
        if t is None:
            return np.zeros(tuple(p.shape), dtype=np.float32)
        return t.detach().to("cpu").float().numpy()

    L, h = config.num_layers, "transformer.h"

    def stack(suffix: str, transpose: bool = False) -> np.ndarray:
        return np.stack([get(f"{h}.{i}.{suffix}").T if transpose else get(f"{h}.{i}.{suffix}") for i in range(L)])

    wte = np.zeros((config.padded_vocab_size, config.channels), dtype=np.float32)
    wte[:config.vocab_size] = get("transformer.wte.weight")
    tensors = {
        "wte": wte, "wpe": get("transformer.wpe.weight"),
        "ln1w": stack("ln_1.weight"), "ln1b": stack("ln_1.bias"),
        "qkvw": stack("attn.c_attn.weight", True), "qkvb": stack("attn.c_attn.bias"),
        "attprojw": stack("attn.c_proj.weight", True), "attprojb": stack("attn.c_proj.bias"),
        "ln2w": stack("ln_2.weight"), "ln2b": stack("ln_2.bias"),
        "fcw": stack("mlp.c_fc.weight", True), "fcb": stack("mlp.c_fc.bias"),
        "fcprojw": stack("mlp.c_proj.weight", True), "fcprojb": stack("mlp.c_proj.bias"),
        "lnfw": get("transformer.ln_f.weight"), "lnfb": get("transformer.ln_f.bias"),
    }
    return layout(config).flatten(tensors)


def size_name(model) -> str:
    """llm.c's size label from the parameter count: 124M, 355M, 774M, 1558M."""
    n = sum(p.numel() for p in model.parameters())
    return f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def debug_batch(tokens: np.ndarray, B: int, T: int, source: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """The first B*T+1 tokens as (inputs, targets), as llm.c's first batch."""
    if tokens.size < B * T + 1:
        raise TrainError(f"{source}: {tokens.size} tokens, a B={B} T={T} debug batch needs {B * T + 1}")
    chunk = np.asarray(tokens[:B * T + 1], dtype=np.int64)
    return chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)


def torch_debug_state(model, config: GPT2Config, inputs: np.ndarray, targets: np.ndarray):
    """Logits, mean loss and the gradients of every parameter (checkpoint layout), by PyTorch in
    fp32, on the transformers model itself."""
    torch, _ = _transformers()
    model.eval()  # dropout off
    model.zero_grad(set_to_none=True)
    x, y = torch.from_numpy(inputs), torch.from_numpy(targets)
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
    loss.backward()
    grads = hf_to_flat(model, config, grads=True)
    model.zero_grad(set_to_none=True)
    return logits.detach().float().numpy(), float(loss.item()), grads


def export_gpt2(model, out_dir: str | os.PathLike, tokens: np.ndarray, tokens_source: Path | str = "tokens",
                name: str | None = None, enc=None, B: int = DEBUG_B, T: int = DEBUG_T, force: bool = False) -> Written:
    """Write OUT/gpt2_<size>.bin (v3), gpt2_<size>_bf16.bin (v5), gpt2_<size>_debug_state.bin and
    gpt2_tokenizer.bin for a transformers GPT2LMHeadModel. `tokens` feed the debug batch. Existing
    outputs with other content are replaced only with `force`."""
    out_dir = Path(out_dir)
    torch, _ = _transformers()
    config = hf_config(model)
    if T > config.max_seq_len:
        raise TrainError(f"debug batch T={T} exceeds the model's n_positions {config.max_seq_len}")
    inputs, targets = debug_batch(tokens, B, T, tokens_source)
    if inputs.max() >= config.vocab_size:
        raise TrainError(f"{tokens_source}: token {inputs.max()} is outside the model's vocabulary of {config.vocab_size}")
    enc = enc if enc is not None else gpt2_encoding()
    name = name or f"gpt2_{size_name(model)}"
    model = model.float()
    with torch.no_grad():
        params = hf_to_flat(model, config)
    with torch.enable_grad():
        logits, loss, grads = torch_debug_state(model, config, inputs, targets)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = params.size
    v3, v5, debug = out_dir / f"{name}.bin", out_dir / f"{name}_bf16.bin", out_dir / f"{name}_debug_state.bin"
    return Written().write_all({
        v3: (formats.checkpoint_parts(v3, config, params), f"v3 fp32 checkpoint, {n:,} parameters"),
        v5: (formats.checkpoint_parts(v5, config, params, formats.MODEL_BF16), f"v5 bf16 checkpoint, {n:,} parameters"),
        **gpt2_tokenizer_output(out_dir, enc),
        debug: (formats.debug_state_parts(debug, config, inputs, targets, logits, loss, grads),
                f"debug state B={B} T={T}, loss {loss:.6f}")}, force)


def prepro_gpt2(out_dir: str | os.PathLike, model_name: str = "gpt2", tokens_path: str | os.PathLike | None = None,
                name: str | None = None, force: bool = False) -> Written:
    """Export a Hugging Face GPT-2 (hub id or local folder) with a debug state whose batch is the
    start of tokens_path (default OUT/tiny_shakespeare_val.bin, made by prepro_tinyshakespeare)."""
    out_dir = Path(out_dir)
    _transformers()
    tokens_path = Path(tokens_path) if tokens_path else out_dir / TINYSHAKESPEARE_VAL
    if not tokens_path.exists():
        raise TrainError(f"{tokens_path}: no such file (expected the token file whose first batch makes the "
                         f"debug state; run `workbench prepro tinyshakespeare --out {out_dir}` first)")
    tokens = formats.read_tokens(tokens_path)
    enc = gpt2_encoding()
    model = load_hf_model(model_name)
    return export_gpt2(model, out_dir, tokens, tokens_path, name=name, enc=enc, force=force)


# -- your own text: GPT-2 token shards ------------------------------------------------------------
TEXT_SHARD_TOKENS = 100_000_000  # tokens per shard (every shard but the last of each split)
MIN_SHARD_TOKENS = 1024
TEXT_CHUNK_BYTES = 4 << 20       # a file is read, and tokenized, about this much at a time
TEXT_BATCH = min(8, os.cpu_count() or 1)  # chunks tokenized together, on tiktoken's threads
SPILL_TOKENS = 1 << 24           # tokens read back at a time from the spill file
TEXT_NAME = re.compile(r"[A-Za-z0-9_-]+")
SPLITS = ("val", "train")


def shard_name(name: str, split: str, index: int) -> str:
    return f"{name}_{split}_{index:06d}.bin"


def shard_glob(out_dir: str | os.PathLike, name: str, split: str) -> str:
    """The glob that names a split's shards, as `workbench train -i/-j` takes it."""
    return str(Path(out_dir) / f"{name}_{split}_*.bin")


def existing_shards(out_dir: str | os.PathLike, name: str) -> list[Path]:
    """Whatever the two globs of NAME match in OUT (what `workbench train -i/-j` would pick up)."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    return sorted(p for split in SPLITS for p in out_dir.glob(Path(shard_glob("", name, split)).name)
                  if not p.is_dir())


def text_cut(text: str, start: int = 0) -> int:
    """The last i >= max(start, 1) where `text` can be cut into text[:i] and text[i:] without
    changing its GPT-2 tokens; 0 where there is none.

    BPE never merges across GPT-2's pre-tokens (tiktoken's regex), and that regex always ends a
    pre-token between a non-whitespace character and a line break, space or tab that follows it:
    no pattern takes whitespace after a non-whitespace character, and none looks behind. So i is a
    line break (else a space or tab) right after a non-whitespace character. A cut after a newline
    followed by text is not enough: "a\\n\\nb" cut after its blank line makes "\\n\\n" one token
    instead of two. (str.isspace() holds for every character the regex's \\s matches.)"""
    lo = max(start, 1)
    for sep in ("\n", "\r", " ", "\t"):
        i = text.rfind(sep, lo)
        while i >= lo:
            if not text[i - 1].isspace():
                return i
            i = text.rfind(sep, lo, i)
    return 0


def text_chunks(path: Path) -> Iterator[tuple[str, int]]:
    """A UTF-8 file's text in pieces of about TEXT_CHUNK_BYTES, cut where the GPT-2 tokens do not
    change (text_cut; a text with no such place stays whole), each with the bytes read so far.
    A leading byte-order mark is dropped. Invalid UTF-8 is one TrainError naming its byte offset."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    text, read, first = "", 0, True
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TrainError(f"{path}: cannot read ({e.strerror})") from None
    with f:
        while True:
            try:
                raw = f.read(TEXT_CHUNK_BYTES)
            except OSError as e:
                raise TrainError(f"{path}: cannot read ({e.strerror})") from None
            held = len(decoder.getstate()[0])  # the start of a character cut off by the last read
            try:
                new = decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                offset = read - held + e.start
                raise TrainError(f"{path}: expected UTF-8 text, found invalid byte 0x{e.object[e.start]:02x} "
                                 f"at offset {offset}") from None
            read += len(raw)
            if first and new:
                new, first = new.removeprefix("\ufeff"), False
            searched = len(text)
            text += new
            if not raw:
                if text:
                    yield text, read
                return
            cut = text_cut(text, searched)
            if cut:
                yield text[:cut], read
                text = text[cut:]


def _encode(enc, pieces: list[str]) -> Iterator[np.ndarray]:
    batches = [enc.encode_ordinary(pieces[0])] if len(pieces) == 1 else \
        enc.encode_ordinary_batch(pieces, num_threads=len(pieces))
    for i, tokens in enumerate(batches):
        batches[i] = None  # a list of Python ints takes 18x the memory of its array: let each go once copied
        yield np.asarray(tokens, dtype=np.uint16)


def text_tokens(paths: list[Path], enc, progress: Progress | None = None) -> Iterator[np.ndarray]:
    """The files' tokens as one stream: for each file <|endoftext|> then its text's tokens
    (encode_ordinary), streamed a few chunks at a time; progress(bytes done, total bytes)."""
    sizes = [p.stat().st_size for p in paths]
    total, done = sum(sizes), 0
    eot = np.array([EOT], dtype=np.uint16)
    if progress:
        progress(0, total)
    for path, size in zip(paths, sizes):
        yield eot
        pieces = []
        for piece, read in text_chunks(path):
            pieces.append(piece)
            if len(pieces) == TEXT_BATCH:
                yield from _encode(enc, pieces)
                pieces = []
                if progress:
                    progress(min(done + read, total), total)
        if pieces:
            yield from _encode(enc, pieces)
        done += size
        if progress:
            progress(min(done, total), total)


class _Shards:
    """A token stream cut into shards as it comes: its first `val` tokens the validation split,
    the rest the training split, every shard `size` tokens but the last of its split (see flush). Each shard
    is written (formats.write_tokens) as soon as it is full, under a hidden staging name beside
    its own that no glob of the trainer matches; commit() renames them all into place."""

    def __init__(self, out_dir: Path, name: str, size: int, val: int):
        self.out_dir, self.name = out_dir, name
        self.buf = np.empty(size, dtype=np.uint16)
        self.n = 0
        self.split = "val"
        self.val_left = val
        self.staged: list[tuple[Path, Path, str, int]] = []  # (staging path, final path, split, tokens)
        self.tokens = {split: 0 for split in SPLITS}
        self.count = {split: 0 for split in SPLITS}

    def add(self, tokens: np.ndarray) -> None:
        pos = 0
        while pos < tokens.size:
            take = min(self.buf.size - self.n, tokens.size - pos)
            if self.split == "val":
                take = min(take, self.val_left)
            self.buf[self.n:self.n + take] = tokens[pos:pos + take]
            self.n += take
            pos += take
            if self.split == "val":
                self.val_left -= take
                if self.val_left == 0:
                    self.flush(last=True)
                    self.split = "train"
                    continue
            if self.n == self.buf.size:
                self.flush()

    def flush(self, last: bool = False) -> None:
        """Write the buffered tokens as the split's next shard; the `last` of a split, when under
        half a shard, is folded into the shard before it instead (which then holds up to 1.5
        shards), so that no shard is much shorter than the others: the trainer needs a whole
        global batch in every shard."""
        if not self.n:
            return
        prev = self.staged[-1] if self.staged else None
        if last and self.n < self.buf.size // 2 and prev is not None and prev[2] == self.split:
            staging, final, split, n = prev
            formats.write_tokens(staging, np.concatenate([formats.read_tokens(staging), self.buf[:self.n]]))
            self.staged[-1] = (staging, final, split, n + self.n)
            self.tokens[self.split] += self.n
            self.n = 0
            return
        final = self.out_dir / shard_name(self.name, self.split, self.count[self.split])
        staging = final.with_name(f".{final.name}.staged")
        self.staged.append((staging, final, self.split, self.n))  # before writing: discard() finds it
        formats.write_tokens(staging, self.buf[:self.n])
        self.tokens[self.split] += self.n
        self.count[self.split] += 1
        self.n = 0

    def commit(self) -> dict[Path, tuple[str, int]]:
        """Rename every staged shard into place: {path: (split, tokens)}."""
        out = {}
        for staging, final, split, n in self.staged:
            try:
                os.replace(staging, final)
            except OSError as e:
                raise TrainError(f"{final}: cannot write ({e.strerror})") from None
            out[final] = (split, n)
        self.staged = []
        return out

    def discard(self) -> None:
        for staging, *_ in self.staged:
            staging.unlink(missing_ok=True)
        self.staged = []


def _spill(stream: Iterable[np.ndarray], folder: Path, name: str) -> tuple[Path, int]:
    """Write a token stream to a hidden raw file in `folder`: (its path, how many tokens)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}_tokens.", suffix=".tmp")
    n = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for tokens in stream:
                f.write(tokens.astype("<u2", copy=False).tobytes())
                n += tokens.size
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise TrainError(f"{folder}: cannot write the token stream ({e.strerror or e})") from None
        raise
    return Path(tmp), n


def _unspill(path: Path) -> Iterator[np.ndarray]:
    with open(path, "rb") as f:
        while True:
            tokens = np.fromfile(f, dtype="<u2", count=SPILL_TOKENS)
            if not tokens.size:
                return
            yield tokens.astype(np.uint16, copy=False)


def _check_text_inputs(paths: list[Path]) -> None:
    if not paths:
        raise TrainError("no text files given")
    for path in paths:
        if path.is_dir():
            raise TrainError(f"{path}: is a folder (expected a UTF-8 text file)")
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            raise TrainError(f"{path}: no such file (expected a UTF-8 text file)") from None
        except OSError as e:
            raise TrainError(f"{path}: cannot read ({e.strerror})") from None


def _make_folder(folder: Path) -> list[Path]:
    """mkdir -p: the folders it made, deepest first (for an undo)."""
    made, p = [], folder
    while not p.exists() and p.parent != p:
        made.append(p)
        p = p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrainError(f"{folder}: cannot create ({e.strerror or e})") from None
    return made


@dataclass
class TextShards(Written):
    """What prepro_text wrote, and the two globs that name its splits."""
    tokens: dict[str, int] = field(default_factory=dict)  # split -> tokens
    shards: dict[str, int] = field(default_factory=dict)  # split -> shards
    globs: dict[str, str] = field(default_factory=dict)   # split -> glob for -i (train) / -j (val)


def _check_text_run(paths: list[Path], out_dir: Path, name: str, shard_size: int, val_tokens: int | None,
                    force: bool) -> list[Path]:
    """Every check prepro_text makes before it tokenizes: the options, the inputs, and NAME's
    existing shards (a refusal without force). Returns those shards."""
    if not TEXT_NAME.fullmatch(name):
        raise bad_option("--name", f"{name!r}: use letters, digits, _ and - only")
    if not MIN_SHARD_TOKENS <= shard_size <= np.iinfo(np.int32).max:
        raise bad_option("--shard-size", f"{shard_size} is not in the range {MIN_SHARD_TOKENS}<=x<={np.iinfo(np.int32).max}")
    if val_tokens is not None and val_tokens < 1:
        raise bad_option("--val-tokens", f"{val_tokens} is not >= 1")
    _check_text_inputs(paths)
    existing = existing_shards(out_dir, name)
    if existing and not force:
        more = f" and {len(existing) - 1} more of {name}'s shards" if len(existing) > 1 else ""
        raise TrainError(f"{existing[0]}{more} already exist{'' if more else 's'}; pass --force to replace "
                         f"{'them' if more else 'it'} (and remove any this run does not write)")
    return existing


def _remove_stale(stale: list[Path], name: str, written: "TextShards") -> None:
    """Delete NAME's shards of an earlier run that this one did not write (a glob would read them)."""
    for p in stale:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise TrainError(f"{p}: cannot remove this stale shard ({e.strerror}); `workbench train` would read it "
                             "with the new ones") from None
    if stale:
        written.notes.append(f"removed {len(stale)} stale file{'s' if len(stale) > 1 else ''} of {name}'s earlier "
                             f"shards: {', '.join(map(str, stale[:3]))}{', ...' if len(stale) > 3 else ''}")


def prepro_text(paths: Iterable[str | os.PathLike], out_dir: str | os.PathLike = "data", name: str = "text",
                shard_size: int = TEXT_SHARD_TOKENS, val_tokens: int | None = None,
                progress: Progress | None = None, force: bool = False) -> TextShards:
    """Tokenize UTF-8 text files with GPT-2's BPE into llm.c token shards (version 1, uint16):
    each file is a document, <|endoftext|> then encode_ordinary(its text), in the order given; the
    stream's first `val_tokens` tokens (None: 10% of all, rounded down) are the validation split
    OUT/NAME_val_000000.bin, ..., the rest the training split OUT/NAME_train_000000.bin, ..., each
    shard `shard_size` tokens but the last of its split, which holds the rest (a rest under half a
    shard is folded into the shard before it); and OUT/gpt2_tokenizer.bin.

    Streamed: files are read a few MB at a time and each shard is written once full, so a corpus
    need not fit in memory (with val_tokens=None the stream is first spilled to a hidden file in
    OUT, as the split point is known only at its end). Every input, option and existing output is
    checked before any tokenizing; shards are staged under hidden names and renamed into place only
    once all of them are written, so a failure or an interruption leaves OUT as it was. Existing
    shards of NAME are a refusal without `force`; with it, those this run did not write are removed."""
    out_dir, paths = Path(out_dir), [Path(p) for p in paths]
    existing = _check_text_run(paths, out_dir, name, shard_size, val_tokens, force)
    enc = gpt2_encoding()
    tokenizer = gpt2_tokenizer_output(out_dir, enc)
    differ = [p for p, (parts, _) in tokenizer.items() if p.exists() and not formats.same_content(p, parts)]
    if differ and not force:
        raise TrainError(f"{differ[0]} already exists with other content than this would write; pass --force to "
                         "replace it")
    made = _make_folder(out_dir)
    spill = None
    shards = None
    try:
        stream = text_tokens(paths, enc, progress)
        if val_tokens is None:
            spill, total = _spill(stream, out_dir, name)
            val = total // 10
            if val == 0:
                raise TrainError(f"the files make {total} tokens: 10% of them (rounded down) leaves no validation "
                                 "split; give more text, or --val-tokens")
            stream = _unspill(spill)
        else:
            val = val_tokens
        shards = _Shards(out_dir, name, shard_size, val)
        for tokens in stream:
            shards.add(tokens)
        shards.flush(last=True)
        if shards.tokens["train"] == 0:
            raise TrainError(f"the files make {shards.tokens['val']:,} tokens: --val-tokens {val:,} leaves no "
                             "training split")
        written = TextShards()
        written.write_all(tokenizer, force)
        for path, (split, n) in shards.commit().items():
            written.files[path] = f"{n:,} {'validation' if split == 'val' else 'training'} tokens"
    except BaseException:
        if shards is not None:
            shards.discard()
        if spill is not None:
            spill.unlink(missing_ok=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    if spill is not None:
        spill.unlink(missing_ok=True)
    tokenizer_path = next(iter(tokenizer))
    if tokenizer_path in written.files:  # the table lists the shards first
        written.files[tokenizer_path] = written.files.pop(tokenizer_path)
    _remove_stale([p for p in existing if p not in written.files], name, written)
    written.tokens, written.shards = dict(shards.tokens), dict(shards.count)
    written.globs = {split: shard_glob(out_dir, name, split) for split in SPLITS}
    return written

"""Preparing the trainer's inputs in llm.c's formats: tiny Shakespeare as GPT-2 tokens, the GPT-2
tokenizer, and OpenAI's GPT-2 weights (from Hugging Face) with a debug state to check a trainer by.

Everything is computed in memory and checked before the first file is written. An output that
already holds exactly these bytes is left alone (up to date); one that holds anything else is
replaced only with force=True (`--force`), and that is decided for every output before any is
written: preprocessing another text never silently replaces the canonical data set.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import formats
from .config import EOT, GPT2_VOCAB, GPT2Config
from .errors import TrainError
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

"""The llm.c file formats: model checkpoints (v3 fp32, v5 bf16), token data, the tokenizer and the
debug state; and our own trainer state file (optimizer state, data position, RNG), which llm.c's
readers never see. Little-endian throughout; every file opens with a 256 x int32 header.

Readers check everything they can (magic, version, header sanity, exact file size) and fail with
one TrainError line naming the file, what was expected and what was found. Writers check their
arguments before touching the disk, write to a temporary file beside the target and os.replace it
in, so an interrupted save leaves the old file (or none), never half of a new one. Each writer is
a `*_parts` function (check, then the bytes to write) and atomic_write, so `prepro` can compare
what it would write with what is on disk before replacing anything.

Trainer state file (ours: magic 20261122, version 1; `workbench train --checkpoint-every`, one per
rank beside the llm.c model checkpoint of the same step). Header int32 slots:

    0 magic 20261122        5 ZeRO stage              10 seed
    1 version 1             6 micro-steps per step    11 parameters (unpadded)
    2 step (completed)      7 B                       12 shard offset: m[0] is parameter number ...
    3 world size            8 T                       13 n: elements of m and of v in this file
    4 rank                  9 total batch (tokens)    14 bytes of the JSON part

then m (n float32), v (n float32), then the JSON part (UTF-8): {"data": this rank's next data
window, "rng": RNG states (numpy bit_generator.state), "schedule": the learning-rate schedule,
"options": the settings a resume keeps: B, T, total batch, ZeRO stage, attention, TF32, the
optimizer's (lr, betas, eps, weight decay, grad clip), the schedule's, seed, steps}. With
ZeRO-1 each rank's file holds its own shard of m and v; without it the ranks' m and v are equal,
so rank 0's file holds them and the others have n = 0. File size: 1024 + 8 n + JSON bytes.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .config import GPT2Config
from .errors import TrainError
from .params import num_parameters

HEADER_INTS = 256
HEADER_BYTES = 4 * HEADER_INTS

MODEL_MAGIC = 20240326
DEBUG_MAGIC = 20240327
TOKENIZER_MAGIC = 20240328
TOKENS_MAGIC = 20240520
STATE_MAGIC = 20261122  # ours: not llm.c's 20240527 (its state file has another layout)

MODEL_FP32 = 3
MODEL_BF16 = 5
DEBUG_VERSION = 2
TOKENIZER_VERSION = 2
TOKENS_VERSION = 1
STATE_VERSION = 1

KNOWN_MAGICS = {
    MODEL_MAGIC: "a model checkpoint",
    DEBUG_MAGIC: "a debug state",
    TOKENIZER_MAGIC: "a tokenizer",
    TOKENS_MAGIC: "a token file",
    STATE_MAGIC: "a workbench trainer state",
}


# -- helpers --------------------------------------------------------------------------------------
def _found_magic(magic: int) -> str:
    what = KNOWN_MAGICS.get(magic)
    return f"magic {magic} ({what})" if what else f"magic {magic} (not an llm.c file)"


def _read_header(path: Path, magic: int, what: str) -> tuple[np.ndarray, int]:
    """The header as int32, and the file's size, after the checks every format shares."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except FileNotFoundError:
        raise TrainError(f"{path}: no such file (expected {what})") from None
    except IsADirectoryError:
        raise TrainError(f"{path}: is a folder (expected {what})") from None
    except OSError as e:
        raise TrainError(f"{path}: cannot read ({e.strerror}); expected {what}") from None
    if len(raw) < HEADER_BYTES:
        raise TrainError(f"{path}: truncated: expected {what} with a {HEADER_BYTES}-byte header, "
                         f"found a {size}-byte file")
    header = np.frombuffer(raw, dtype="<i4").astype(np.int64)
    if header[0] != magic:
        raise TrainError(f"{path}: expected {what} (magic {magic}), found {_found_magic(int(header[0]))}")
    return header, size


def _check_size(path: Path, what: str, expected: int, found: int, detail: str) -> None:
    if found < expected:
        raise TrainError(f"{path}: truncated: {what} with {detail} needs {expected} bytes, found {found}")
    if found > expected:
        raise TrainError(f"{path}: size mismatch: {what} with {detail} needs {expected} bytes, "
                         f"found {found} ({found - expected} too many)")


def _header(*values: int) -> np.ndarray:
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:len(values)] = values
    return h


def atomic_write(path: str | os.PathLike, parts: Iterable[bytes | np.ndarray]) -> Path:
    """Write `parts` (bytes, or arrays written in their own dtype) to `path` through a temporary
    file in the same folder and os.replace, so `path` is either the old file or the complete new
    one. The folder must exist; a failing disk (full, read-only, no permission) is one TrainError."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise TrainError(f"{path}: cannot write: folder {folder} does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(_part_bytes(part))
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise TrainError(f"{path}: cannot write ({e.strerror or e})") from None
        raise
    return path


def _part_bytes(part) -> memoryview:
    if isinstance(part, np.ndarray):
        return memoryview(np.ascontiguousarray(part)).cast("B")
    return memoryview(part)


def same_content(path: str | os.PathLike, parts: Iterable[bytes | np.ndarray]) -> bool:
    """Whether the file at `path` holds exactly the bytes `parts` would write."""
    path = Path(path)
    parts = [_part_bytes(p) for p in parts]
    try:
        if path.stat().st_size != sum(len(p) for p in parts):
            return False
        with open(path, "rb") as f:
            for part in parts:
                for start in range(0, len(part), 1 << 24):
                    chunk = part[start:start + (1 << 24)]
                    if f.read(len(chunk)) != chunk:
                        return False
    except OSError:
        return False
    return True


# -- bf16 -----------------------------------------------------------------------------------------
def bf16_to_fp32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) to float32: bf16 is the top half of an fp32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def fp32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bit patterns, rounding to nearest even (as torch does); NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    # uint32 wraps only for negative NaNs, which the next lines replace anyway
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # keep it a quiet NaN
    return rounded


# -- model checkpoints ----------------------------------------------------------------------------
def _config_from_header(path: Path, header: np.ndarray) -> GPT2Config:
    maxT, V, L, NH, C, Vp = (int(v) for v in header[2:8])
    try:
        return GPT2Config(max_seq_len=maxT, vocab_size=V, num_layers=L, num_heads=NH, channels=C,
                          padded_vocab_size=Vp if Vp > 0 else -1)
    except Exception:
        raise TrainError(f"{path}: header holds no valid GPT-2 size: maxT={maxT} V={V} L={L} NH={NH} "
                         f"C={C} Vp={Vp}") from None


def checkpoint_config(path: str | os.PathLike) -> tuple[GPT2Config, int]:
    """The model size and version (3 or 5) a checkpoint holds, reading only its header."""
    path = Path(path)
    header, size = _read_header(path, MODEL_MAGIC, "a model checkpoint")
    version = int(header[1])
    if version not in (MODEL_FP32, MODEL_BF16):
        raise TrainError(f"{path}: expected checkpoint version {MODEL_FP32} (fp32) or {MODEL_BF16} (bf16), "
                         f"found version {version}")
    config = _config_from_header(path, header)
    n = num_parameters(config)
    itemsize = 4 if version == MODEL_FP32 else 2
    _check_size(path, f"a v{version} checkpoint", HEADER_BYTES + n * itemsize, size,
                f"{config.describe()} ({n:,} parameters)")
    return config, version


def read_checkpoint(path: str | os.PathLike) -> tuple[GPT2Config, np.ndarray]:
    """A v3 (fp32) or v5 (bf16, widened exactly to fp32) checkpoint -> (config, flat fp32 params)."""
    path = Path(path)
    config, version = checkpoint_config(path)
    n = num_parameters(config)
    if version == MODEL_FP32:
        params = np.fromfile(path, dtype="<f4", count=n, offset=HEADER_BYTES).astype(np.float32, copy=False)
    else:
        params = bf16_to_fp32(np.fromfile(path, dtype="<u2", count=n, offset=HEADER_BYTES))
    return config, params


def write_checkpoint(path: str | os.PathLike, config: GPT2Config, params: np.ndarray,
                     version: int = MODEL_FP32) -> Path:
    """Save a flat parameter buffer as a v3 (fp32, the default) or v5 (bf16) checkpoint."""
    return atomic_write(path, checkpoint_parts(path, config, params, version))


def checkpoint_parts(path: str | os.PathLike, config: GPT2Config, params: np.ndarray,
                     version: int = MODEL_FP32) -> list:
    path = Path(path)
    if version not in (MODEL_FP32, MODEL_BF16):
        raise TrainError(f"{path}: cannot write checkpoint version {version} (only {MODEL_FP32} and {MODEL_BF16})")
    params = np.asarray(params)
    n = num_parameters(config)
    if params.ndim != 1 or params.size != n:
        raise TrainError(f"{path}: not written: {config.describe()} has {n:,} parameters, "
                         f"the buffer has shape {params.shape}")
    header = _header(MODEL_MAGIC, version, config.max_seq_len, config.vocab_size, config.num_layers,
                     config.num_heads, config.channels, config.padded_vocab_size)
    body = params.astype("<f4", copy=False) if version == MODEL_FP32 else fp32_to_bf16(params).astype("<u2", copy=False)
    return [header, body]


# -- token data -----------------------------------------------------------------------------------
def token_count(path: str | os.PathLike) -> int:
    """The number of tokens a token file holds, from its header (version and file size checked)."""
    path = Path(path)
    header, size = _read_header(path, TOKENS_MAGIC, "a token file")
    version = int(header[1])
    if version != TOKENS_VERSION:
        extra = " (uint32 tokens, as for LLaMA 3; GPT-2 uses version 1)" if version == 2 else ""
        raise TrainError(f"{path}: expected token file version {TOKENS_VERSION} (uint16 GPT-2 tokens), "
                         f"found version {version}{extra}")
    ntok = int(header[2])
    if ntok < 0:
        raise TrainError(f"{path}: header says {ntok} tokens")
    _check_size(path, "a token file", HEADER_BYTES + 2 * ntok, size, f"{ntok:,} tokens")
    return ntok


def read_tokens(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """A token file -> its uint16 tokens (memory-mapped, read-only, when mmap=True)."""
    path = Path(path)
    ntok = token_count(path)
    if mmap:
        return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(ntok,))
    return np.fromfile(path, dtype="<u2", count=ntok, offset=HEADER_BYTES).astype(np.uint16, copy=False)


def write_tokens(path: str | os.PathLike, tokens) -> Path:
    return atomic_write(path, tokens_parts(path, tokens))


def tokens_parts(path: str | os.PathLike, tokens) -> list:
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise TrainError(f"{path}: not written: tokens must be a 1-D integer array, found {tokens.dtype} {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFF):
        raise TrainError(f"{path}: not written: tokens must fit uint16, found range "
                         f"[{tokens.min()}, {tokens.max()}]")
    if tokens.size > np.iinfo(np.int32).max:
        raise TrainError(f"{path}: not written: {tokens.size} tokens do not fit the header's int32 count")
    return [_header(TOKENS_MAGIC, TOKENS_VERSION, tokens.size), tokens.astype("<u2")]


# -- tokenizer ------------------------------------------------------------------------------------
class Tokenizer:
    """GPT-2 token id -> its bytes, as the tokenizer file stores them."""

    def __init__(self, tokens: list[bytes], eot: int | None):
        self.tokens = tokens
        self.eot = eot

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token_id: int) -> bytes:
        return self.tokens[token_id]

    def decode_bytes(self, ids) -> bytes:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.tokens):
                raise TrainError(f"token id {i} is outside the tokenizer's vocabulary of {len(self.tokens)}")
            out.append(self.tokens[i])
        return b"".join(out)

    def decode(self, ids) -> str:
        # A token may be half of a multi-byte character: decode the joined bytes, not each token.
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def write_tokenizer(path: str | os.PathLike, tokens: list[bytes], eot: int) -> Path:
    return atomic_write(path, tokenizer_parts(path, tokens, eot))


def tokenizer_parts(path: str | os.PathLike, tokens: list[bytes], eot: int) -> list:
    path = Path(path)
    for i, t in enumerate(tokens):
        if not isinstance(t, (bytes, bytearray)) or not 1 <= len(t) <= 255:
            raise TrainError(f"{path}: not written: token {i} must be 1..255 bytes, found {t!r:.40}")
    if not 0 <= eot < len(tokens):
        raise TrainError(f"{path}: not written: eot {eot} is outside the vocabulary of {len(tokens)}")
    body = b"".join(bytes([len(t)]) + bytes(t) for t in tokens)
    return [_header(TOKENIZER_MAGIC, TOKENIZER_VERSION, len(tokens), eot), body]


def read_tokenizer(path: str | os.PathLike) -> Tokenizer:
    path = Path(path)
    header, size = _read_header(path, TOKENIZER_MAGIC, "a tokenizer")
    version = int(header[1])
    if version not in (1, 2):
        raise TrainError(f"{path}: expected tokenizer version 1 or 2, found version {version}")
    n = int(header[2])
    eot = int(header[3]) if version == 2 else None
    if n <= 0 or (eot is not None and not 0 <= eot < n):
        raise TrainError(f"{path}: header holds no valid vocabulary: {n} tokens, eot {eot}")
    data = path.read_bytes()[HEADER_BYTES:]
    tokens, pos = [], 0
    for i in range(n):
        if pos >= len(data):
            raise TrainError(f"{path}: truncated: expected {n} tokens, the file ends after {i}")
        length = data[pos]
        if length == 0:
            raise TrainError(f"{path}: token {i} has length 0 (expected 1..255 bytes)")
        if pos + 1 + length > len(data):
            raise TrainError(f"{path}: truncated: token {i} of {n} needs {length} bytes, the file ends first")
        tokens.append(data[pos + 1:pos + 1 + length])
        pos += 1 + length
    if pos != len(data):
        raise TrainError(f"{path}: size mismatch: expected {n} tokens ending at byte {HEADER_BYTES + pos}, "
                         f"found a {size}-byte file")
    return Tokenizer(tokens, eot)


# -- debug state ----------------------------------------------------------------------------------
@dataclass
class DebugState:
    """One batch with PyTorch's answers: the trainer's first step must reproduce these."""
    inputs: np.ndarray   # (B, T) int32
    targets: np.ndarray  # (B, T) int32
    logits: np.ndarray   # (B, T, V) float32, unpadded
    loss: float
    grads: np.ndarray    # flat float32, checkpoint layout

    @property
    def B(self) -> int:
        return self.inputs.shape[0]

    @property
    def T(self) -> int:
        return self.inputs.shape[1]


def write_debug_state(path: str | os.PathLike, config: GPT2Config, inputs, targets, logits, loss,
                      grads) -> Path:
    """Logits may be (B,T,V) or (B,T,Vp); the file stores the first V columns."""
    return atomic_write(path, debug_state_parts(path, config, inputs, targets, logits, loss, grads))


def debug_state_parts(path: str | os.PathLike, config: GPT2Config, inputs, targets, logits, loss, grads) -> list:
    path = Path(path)
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    logits, grads = np.asarray(logits), np.asarray(grads)
    V, Vp = config.vocab_size, config.padded_vocab_size
    if inputs.ndim != 2 or targets.shape != inputs.shape:
        raise TrainError(f"{path}: not written: inputs {inputs.shape} and targets {targets.shape} must be "
                         "the same (B, T)")
    B, T = inputs.shape
    if logits.shape not in ((B, T, V), (B, T, Vp)):
        raise TrainError(f"{path}: not written: logits must be ({B}, {T}, {V}) or ({B}, {T}, {Vp}), found {logits.shape}")
    n = num_parameters(config)
    if grads.ndim != 1 or grads.size != n:
        raise TrainError(f"{path}: not written: {config.describe()} has {n:,} parameters, the gradient "
                         f"buffer has shape {grads.shape}")
    return [
        _header(DEBUG_MAGIC, DEBUG_VERSION, B, T),
        inputs.astype("<i4"), targets.astype("<i4"),
        np.ascontiguousarray(logits[:, :, :V], dtype="<f4"),
        np.asarray([loss], dtype="<f4"),
        grads.astype("<f4", copy=False),
    ]


def read_debug_state(path: str | os.PathLike, config: GPT2Config) -> DebugState:
    """The debug state for a model of size `config` (the file does not record the model size)."""
    path = Path(path)
    header, size = _read_header(path, DEBUG_MAGIC, "a debug state")
    version = int(header[1])
    if version != DEBUG_VERSION:
        raise TrainError(f"{path}: expected debug state version {DEBUG_VERSION}, found version {version}")
    B, T = int(header[2]), int(header[3])
    if B <= 0 or T <= 0:
        raise TrainError(f"{path}: header holds no valid batch: B={B} T={T}")
    if T > config.max_seq_len:
        raise TrainError(f"{path}: T={T} exceeds the model's max_seq_len {config.max_seq_len}")
    V, n = config.vocab_size, num_parameters(config)
    _check_size(path, "a debug state", HEADER_BYTES + 4 * (2 * B * T + B * T * V + 1 + n), size,
                f"B={B} T={T} for {config.describe()} ({n:,} parameters)")
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        inputs = np.fromfile(f, dtype="<i4", count=B * T).reshape(B, T)
        targets = np.fromfile(f, dtype="<i4", count=B * T).reshape(B, T)
        logits = np.fromfile(f, dtype="<f4", count=B * T * V).reshape(B, T, V)
        loss = float(np.fromfile(f, dtype="<f4", count=1)[0])
        grads = np.fromfile(f, dtype="<f4", count=n)
    for name, a in (("inputs", inputs), ("targets", targets)):
        if a.size and (a.min() < 0 or a.max() >= V):
            raise TrainError(f"{path}: {name} hold token ids outside [0, {V}): found [{a.min()}, {a.max()}]")
    return DebugState(inputs.astype(np.int32), targets.astype(np.int32), logits.astype(np.float32), loss,
                      grads.astype(np.float32))


# -- trainer state (ours; the layout is in the module docstring) ----------------------------------
STATE_FIELDS = ("step", "world", "rank", "zero", "micro_steps", "B", "T", "total_batch", "seed",
                "num_params", "shard_offset")


@dataclass
class TrainState:
    """One rank's part of a checkpoint: where the run is, its optimizer moments, the rest as JSON."""
    step: int
    world: int
    rank: int
    zero: int
    micro_steps: int
    B: int
    T: int
    total_batch: int
    seed: int
    num_params: int
    shard_offset: int
    m: np.ndarray
    v: np.ndarray
    info: dict


def write_state(path: str | os.PathLike, state: TrainState) -> Path:
    path = Path(path)
    values = [int(getattr(state, name)) for name in STATE_FIELDS]
    if any(not 0 <= x < 2**31 for x in values):
        raise TrainError(f"{path}: not written: a header value does not fit an int32: "
                         f"{dict(zip(STATE_FIELDS, values))}")
    m, v = np.asarray(state.m), np.asarray(state.v)
    if m.ndim != 1 or m.shape != v.shape:
        raise TrainError(f"{path}: not written: m {m.shape} and v {v.shape} must be equal 1-D arrays")
    text = json.dumps(state.info, sort_keys=True).encode("utf-8")
    header = _header(STATE_MAGIC, STATE_VERSION, *values, m.size, len(text))
    return atomic_write(path, [header, m.astype("<f4", copy=False), v.astype("<f4", copy=False), text])


def read_state(path: str | os.PathLike, moments: bool = True) -> TrainState:
    """A trainer state file; with moments=False m and v are left out (empty), for checks."""
    path = Path(path)
    header, size = _read_header(path, STATE_MAGIC, "a workbench trainer state")
    if int(header[1]) != STATE_VERSION:
        raise TrainError(f"{path}: expected trainer state version {STATE_VERSION}, found version {int(header[1])}")
    fields = {name: int(header[2 + i]) for i, name in enumerate(STATE_FIELDS)}
    n, njson = int(header[2 + len(STATE_FIELDS)]), int(header[3 + len(STATE_FIELDS)])
    if n < 0 or njson <= 0 or fields["world"] < 1 or not 0 <= fields["rank"] < fields["world"]:
        raise TrainError(f"{path}: header holds no valid state: n={n} json={njson} world={fields['world']} "
                         f"rank={fields['rank']}")
    _check_size(path, "a trainer state", HEADER_BYTES + 8 * n + njson, size, f"{n:,} moments and {njson} JSON bytes")
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES + 8 * n)
        try:
            info = json.loads(f.read(njson).decode("utf-8"))
        except ValueError as e:
            raise TrainError(f"{path}: the JSON part is malformed ({e})") from None
    if moments:
        m = np.fromfile(path, dtype="<f4", count=n, offset=HEADER_BYTES).astype(np.float32, copy=False)
        v = np.fromfile(path, dtype="<f4", count=n, offset=HEADER_BYTES + 4 * n).astype(np.float32, copy=False)
    else:
        m = v = np.empty(0, dtype=np.float32)
    return TrainState(**fields, m=m, v=v, info=info)


def read_state_moments(path: str | os.PathLike, lo: int, hi: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The part of a state file's m and v that covers parameters [lo, hi): (the first parameter
    it covers, m, v); empty arrays where the file's shard does not meet [lo, hi)."""
    path = Path(path)
    state = read_state(path, moments=False)
    header, _ = _read_header(path, STATE_MAGIC, "a workbench trainer state")
    n = int(header[2 + len(STATE_FIELDS)])
    start, end = max(lo, state.shard_offset), min(hi, state.shard_offset + n)
    if start >= end:
        empty = np.empty(0, np.float32)
        return lo, empty, empty
    skip, count = start - state.shard_offset, end - start
    m = np.fromfile(path, dtype="<f4", count=count, offset=HEADER_BYTES + 4 * skip)
    v = np.fromfile(path, dtype="<f4", count=count, offset=HEADER_BYTES + 4 * (n + skip))
    return start, m.astype(np.float32, copy=False), v.astype(np.float32, copy=False)

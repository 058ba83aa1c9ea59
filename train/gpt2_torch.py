"""GPT-2 in PyTorch, nanoGPT-style, loaded from (and read back to) our flat checkpoint layout: the
independent answer the NumPy chain and the CUDA trainer are both checked against.

Exactly the trainer's model: tanh GELU, LayerNorm eps 1e-5, causal attention scaled by
1/sqrt(HS), wte tied to lm_head, logits over the padded vocabulary Vp with the loss (mean
cross-entropy over B*T) reading only the first V columns. Attention is written out (scores,
mask, softmax) by default so it is the same arithmetic on every device and dtype; sdpa=True uses
F.scaled_dot_product_attention instead.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from train.config import GPT2Config
from train.params import layout

LN_EPS = 1e-5
SINGLE = ("wte", "wpe", "lnfw", "lnfb")  # the tensors not stacked over layers


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPT2Config, sdpa: bool = False):
        super().__init__()
        C = config.channels
        self.n_head = config.num_heads
        self.sdpa = sdpa
        self.c_attn = nn.Linear(C, 3 * C)  # qkv laid out (3, NH, HS) along its output
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        NH, HS = self.n_head, C // self.n_head
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(config.channels, 4 * config.channels)
        self.c_proj = nn.Linear(4 * config.channels, config.channels)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPT2Config, sdpa: bool = False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.channels, eps=LN_EPS)
        self.attn = CausalSelfAttention(config, sdpa)
        self.ln_2 = nn.LayerNorm(config.channels, eps=LN_EPS)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPT2Config, sdpa: bool = False):
        super().__init__()
        self.config = config
        C = config.channels
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.padded_vocab_size, C),
            wpe=nn.Embedding(config.max_seq_len, C),
            h=nn.ModuleList([Block(config, sdpa) for _ in range(config.num_layers)]),
            ln_f=nn.LayerNorm(C, eps=LN_EPS),
        ))
        self.lm_head = nn.Linear(C, config.padded_vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying, as in GPT-2

    def forward(self, idx, targets=None):
        """idx, targets: (B, T) token ids. Returns logits (B, T, Vp) and the mean loss (or None)."""
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            V = self.config.vocab_size
            loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long())
        return logits, loss

    # -- our flat layout <-> this module ---------------------------------------------------------
    def _tensors(self, name: str) -> list[torch.Tensor]:
        """The parameters that hold checkpoint tensor `name` (one per layer for stacked ones)."""
        t, h = self.transformer, self.transformer.h
        per_layer = {
            "ln1w": lambda b: b.ln_1.weight, "ln1b": lambda b: b.ln_1.bias,
            "qkvw": lambda b: b.attn.c_attn.weight, "qkvb": lambda b: b.attn.c_attn.bias,
            "attprojw": lambda b: b.attn.c_proj.weight, "attprojb": lambda b: b.attn.c_proj.bias,
            "ln2w": lambda b: b.ln_2.weight, "ln2b": lambda b: b.ln_2.bias,
            "fcw": lambda b: b.mlp.c_fc.weight, "fcb": lambda b: b.mlp.c_fc.bias,
            "fcprojw": lambda b: b.mlp.c_proj.weight, "fcprojb": lambda b: b.mlp.c_proj.bias,
        }
        if name in SINGLE:
            return [{"wte": t.wte.weight, "wpe": t.wpe.weight, "lnfw": t.ln_f.weight, "lnfb": t.ln_f.bias}[name]]
        return [per_layer[name](b) for b in h]

    @torch.no_grad()
    def load_flat(self, flat: np.ndarray) -> GPT:
        views = layout(self.config).views(np.asarray(flat))
        for name, arr in views.items():
            arrays = [arr] if name in SINGLE else list(arr)
            for p, a in zip(self._tensors(name), arrays, strict=True):
                p.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(p.dtype))
        return self

    def to_flat(self, grads: bool = False) -> np.ndarray:
        """The parameters (or, with grads=True, their gradients; zeros where none) as one flat
        float64 buffer in checkpoint layout."""
        lay = layout(self.config)
        flat = np.zeros(lay.total)
        views = lay.views(flat)
        for name in views:
            for i, p in enumerate(self._tensors(name)):
                t = p.grad if grads else p
                if t is None:
                    continue
                a = t.detach().to("cpu", torch.float64).numpy()
                if name in SINGLE:
                    views[name][...] = a
                else:
                    views[name][i] = a
        return flat

    @classmethod
    def from_flat(cls, config: GPT2Config, flat: np.ndarray, dtype=torch.float32, device="cpu",
                  sdpa: bool = False) -> GPT:
        model = cls(config, sdpa).to(device=device, dtype=dtype)
        return model.load_flat(flat)


def forward_backward(model: GPT, inputs, targets):
    """One step's numbers: logits (B, T, Vp), loss, and the flat float64 gradient (checkpoint
    layout) of the mean loss."""
    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    idx = torch.as_tensor(np.asarray(inputs), device=device).long()
    tgt = torch.as_tensor(np.asarray(targets), device=device).long()
    logits, loss = model(idx, tgt)
    loss.backward()
    grads = model.to_flat(grads=True)
    model.zero_grad(set_to_none=True)
    return logits.detach().cpu().double().numpy(), float(loss.item()), grads

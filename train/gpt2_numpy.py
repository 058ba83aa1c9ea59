"""GPT-2 forward and backward in NumPy (float64), chained from the family references: the
trainer's algorithm op for op, each step a call of the kernel family that computes it on the GPU.

Parameters and gradients are flat buffers in checkpoint layout (train/params.py). The forward runs
the fused classifier, as the trainer does, so the logits' gradient is ready for the backward.
"""

from __future__ import annotations

import numpy as np

from references.attention_backward import attention_backward
from references.attention_forward import attention_forward
from references.encoder_backward import encoder_backward
from references.encoder_forward import encoder_forward
from references.fused_classifier import fused_classifier
from references.gelu_backward import gelu_backward
from references.gelu_forward import gelu_forward
from references.layernorm_backward import layernorm_backward
from references.layernorm_forward import layernorm_forward
from references.matmul_backward import matmul_backward
from references.matmul_backward_bias import matmul_backward_bias
from references.matmul_forward import matmul_forward
from references.residual_forward import residual_forward
from train.config import GPT2Config
from train.params import layout


def gpt2_forward(params: np.ndarray, config: GPT2Config, inputs: np.ndarray, targets: np.ndarray | None = None,
                 dloss: float | None = None) -> dict:
    """inputs, targets: (B, T) token ids. Returns
    logits (B, T, Vp; the columns from V on are the padding rows' logits, which the loss ignores),
    loss (the mean cross-entropy over B*T, or None without targets), losses (B, T) and acts, the
    activations gpt2_backward needs (with dlogits = d(loss)/d(logits) scaled by dloss, default
    1/(B*T))."""
    p = layout(config).views(np.asarray(params, dtype=np.float64))
    inputs = np.asarray(inputs)
    B, T = inputs.shape
    V, Vp, NH = config.vocab_size, config.padded_vocab_size, config.num_heads
    if T > config.max_seq_len:
        raise ValueError(f"T={T} exceeds max_seq_len {config.max_seq_len}")

    x = encoder_forward(inputs, p["wte"], p["wpe"])["out"]
    acts = {"inputs": inputs, "encoded": x, "layers": []}
    for l in range(config.num_layers):
        a = {"residual": x}  # the layer's input on the residual stream
        ln1 = layernorm_forward(x, p["ln1w"][l], p["ln1b"][l])
        a["ln1"], a["ln1_mean"], a["ln1_rstd"] = ln1["out"], ln1["mean"], ln1["rstd"]
        a["qkv"] = matmul_forward(a["ln1"], p["qkvw"][l], p["qkvb"][l])["out"]
        att = attention_forward(a["qkv"], NH)
        a["atty"], a["lse"] = att["out"], att["lse"]
        attproj = matmul_forward(a["atty"], p["attprojw"][l], p["attprojb"][l])["out"]
        a["residual2"] = residual_forward(x, attproj)["out"]
        ln2 = layernorm_forward(a["residual2"], p["ln2w"][l], p["ln2b"][l])
        a["ln2"], a["ln2_mean"], a["ln2_rstd"] = ln2["out"], ln2["mean"], ln2["rstd"]
        a["fch"] = matmul_forward(a["ln2"], p["fcw"][l], p["fcb"][l])["out"]
        a["fch_gelu"] = gelu_forward(a["fch"])["out"]
        fcproj = matmul_forward(a["fch_gelu"], p["fcprojw"][l], p["fcprojb"][l])["out"]
        x = residual_forward(a["residual2"], fcproj)["out"]
        acts["layers"].append(a)
    acts["residual_out"] = x
    lnf = layernorm_forward(x, p["lnfw"], p["lnfb"])
    acts["lnf"], acts["lnf_mean"], acts["lnf_rstd"] = lnf["out"], lnf["mean"], lnf["rstd"]
    # The classifier shares wte (weight tying) and has no bias.
    logits = matmul_forward(acts["lnf"], p["wte"], np.zeros(Vp))["out"]

    loss = losses = None
    if targets is not None:
        targets = np.asarray(targets)
        cls = fused_classifier(logits.copy(), targets, V, 1.0 / (B * T) if dloss is None else dloss)
        losses = cls["losses"]
        loss = float(losses.mean())
        acts["targets"], acts["dlogits"] = targets, cls["logits"]
    return {"logits": logits, "loss": loss, "losses": losses, "acts": acts}


def gpt2_backward(params: np.ndarray, config: GPT2Config, acts: dict) -> np.ndarray:
    """The gradient of the forward's loss with respect to every parameter, as one flat float64
    buffer in checkpoint layout (wte's gradient sums its two uses: embedding and classifier)."""
    if "dlogits" not in acts:
        raise ValueError("the forward ran without targets: there is no loss to differentiate")
    lay = layout(config)
    p = lay.views(np.asarray(params, dtype=np.float64))
    grads = np.zeros(lay.total)
    g = lay.views(grads)
    NH = config.num_heads
    inputs = acts["inputs"]
    T = inputs.shape[1]

    mm = matmul_backward(g["wte"], acts["dlogits"], acts["lnf"], p["wte"])
    g["wte"][...] = mm["dweight"]
    ln = layernorm_backward(np.zeros_like(acts["residual_out"]), g["lnfw"], g["lnfb"], mm["dinp"],
                            acts["residual_out"], p["lnfw"], acts["lnf_mean"], acts["lnf_rstd"])
    g["lnfw"][...], g["lnfb"][...] = ln["dweight"], ln["dbias"]
    dres = ln["dinp"]  # gradient on the residual stream; each layer adds its branches' share

    for l in reversed(range(config.num_layers)):
        a = acts["layers"][l]
        # out = residual2 + fcproj(gelu(fc(ln2(residual2))))
        mm = matmul_backward(g["fcprojw"][l], dres, a["fch_gelu"], p["fcprojw"][l])
        g["fcprojw"][l] = mm["dweight"]
        g["fcprojb"][l] = matmul_backward_bias(g["fcprojb"][l], dres)["dbias"]
        dfch = gelu_backward(a["fch"], mm["dinp"])["dinp"]
        mm = matmul_backward(g["fcw"][l], dfch, a["ln2"], p["fcw"][l])
        g["fcw"][l] = mm["dweight"]
        g["fcb"][l] = matmul_backward_bias(g["fcb"][l], dfch)["dbias"]
        ln = layernorm_backward(dres, g["ln2w"][l], g["ln2b"][l], mm["dinp"], a["residual2"], p["ln2w"][l],
                                a["ln2_mean"], a["ln2_rstd"])
        g["ln2w"][l], g["ln2b"][l] = ln["dweight"], ln["dbias"]
        dres = ln["dinp"]
        # residual2 = residual + attproj(attention(qkv(ln1(residual))))
        mm = matmul_backward(g["attprojw"][l], dres, a["atty"], p["attprojw"][l])
        g["attprojw"][l] = mm["dweight"]
        g["attprojb"][l] = matmul_backward_bias(g["attprojb"][l], dres)["dbias"]
        dqkv = attention_backward(mm["dinp"], a["qkv"], a["atty"], a["lse"], NH)["dqkv"]
        mm = matmul_backward(g["qkvw"][l], dqkv, a["ln1"], p["qkvw"][l])
        g["qkvw"][l] = mm["dweight"]
        g["qkvb"][l] = matmul_backward_bias(g["qkvb"][l], dqkv)["dbias"]
        ln = layernorm_backward(dres, g["ln1w"][l], g["ln1b"][l], mm["dinp"], a["residual"], p["ln1w"][l],
                                a["ln1_mean"], a["ln1_rstd"])
        g["ln1w"][l], g["ln1b"][l] = ln["dweight"], ln["dbias"]
        dres = ln["dinp"]

    enc = encoder_backward(g["wte"], g["wpe"][:T], dres, inputs)
    g["wte"][...], g["wpe"][:T] = enc["dwte"], enc["dwpe"]
    return grads


def gpt2_loss(params: np.ndarray, config: GPT2Config, inputs: np.ndarray, targets: np.ndarray) -> float:
    return gpt2_forward(params, config, inputs, targets)["loss"]

"""GPT-2 as a program of kernel-family calls: forward, loss, backward, update, top to bottom.

Nothing here touches the GPU. `Program` lists, for a config and a batch shape, every buffer the
step needs and every call: which family, at which sizes, with which buffer slices bound to the
family contract's arguments. `train/backends.py` runs the calls with the promoted CUDA kernels (and
captures them in a CUDA graph); its NumPy twin runs them with the families' references, so the
wiring below is tested on a CPU against train/gpt2_numpy.py.

Gradient conventions (the families' contracts): parameter gradients accumulate (+=), so `grads`
is zeroed once per optimizer step (`zero_grads`) and gradient accumulation over micro-steps is
free: the classifier's dloss is 1/(B*T*micro_steps*world), so after the last micro-step (and the
sum over the ranks) `grads` holds the gradient of the mean loss over the whole optimizer step.
layernorm_backward adds into its dinp, which is how the residual stream's gradient `dresidual`
collects both branches.

Many GPUs: `reduced_backward` is the backward with `Reduce` items placed right after the call that
finishes each bucket of gradient slices (the backward runs from layer L-1 down to 0, so the last
layers' gradients are final first) and a `Join` at its end; the backend runs a Reduce on a second
stream while the backward goes on. With ZeRO-1 (`zero=1`) the parameter vector is padded to
`world` equal shards, each rank keeps m and v for its own shard only, reduces each gradient piece
to the rank that owns it, updates its shard, and all ranks then gather the parameters.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Any, Union

from references.encoder_backward import plan_words

from .config import GPT2Config
from .params import MATRICES, PER_LAYER, layout


@dataclass(frozen=True)
class Slice:
    """A slice of one of the program's buffers: `elems` elements from `offset`."""

    buffer: str
    offset: int
    elems: int

    def overlaps(self, other: "Slice") -> bool:
        """Whether the two slices share an element."""
        return (self.buffer == other.buffer and self.offset < other.offset + other.elems
                and other.offset < self.offset + self.elems)


@dataclass
class Call:
    family: str
    sizes: dict[str, int]
    args: dict[str, Slice]
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    precision: str = "fp32"       # which of the family's promoted versions serves it: fp32 or bf16
    variant: str | None = None    # a named alternative the run asked for ("tf32", "cudnn"), if any


@dataclass
class Zero:
    """Set a buffer slice to zero (gradients, accumulators)."""

    ref: Slice
    label: str = ""


@dataclass
class Reduce:
    """Sum these gradient slices over the ranks, on the communication stream, once the compute
    stream has reached this point. Each piece is (slice, root): root None sums onto every rank
    (all-reduce), a rank number onto that rank only (ZeRO-1: the owner of that part of the shard)."""

    pieces: list[tuple[Slice, int | None]]
    label: str = ""


@dataclass
class Join:
    """The compute stream waits here for every Reduce issued before."""

    label: str = "wait for the gradient reductions"


@dataclass
class AllReduce:
    """Sum a (small) slice over the ranks, in order on the compute stream."""

    ref: Slice
    label: str = ""


@dataclass
class AllGather:
    """Each rank's shard of `buffer` (`shard` elements from rank * shard) to every rank, in place."""

    buffer: str
    shard: int
    label: str = ""


Step = Union[Call, Zero, Reduce, Join, AllReduce, AllGather]

# ZeRO-1 shards start at multiples of this many elements (512 bytes): aligned for float4 kernels
# and for NCCL's fast paths.
SHARD_ALIGN = 128
# A Reduce is issued once this many gradient elements are final (about half a GPT-2 124M layer):
# large enough that NCCL runs at bandwidth, small enough to overlap most of the backward.
BUCKET_ELEMS = 1 << 22


def shard_geometry(num_params: int, world: int, zero: int) -> tuple[int, int]:
    """(elements of one rank's optimizer shard, padded length of params and grads). Without ZeRO
    every rank holds everything: (num_params, num_params)."""
    if not zero:
        return num_params, num_params
    shard = -(-num_params // (world * SHARD_ALIGN)) * SHARD_ALIGN
    return shard, shard * world


@dataclass(frozen=True)
class BufferDecl:
    name: str
    elems: int
    dtype: str = "f32"


ITEMSIZE = {"f32": 4, "i32": 4, "bf16": 2}
PRECISIONS = ("fp32", "bf16")

# --recompute: the per-layer activations a program does not keep for the backward, each mapped to
# the one buffer that holds whichever layer's value is current (at() hands it out for every layer).
# The forward writes each layer's value there and its next reader takes it at once; the backward
# refills it for layer l right before layer l's first reader (ProgramPasses._recomputing). 1:
# fch_gelu, the GELU of the kept pre-GELU fch (gelu_forward again: 4BTC per layer). 2: also the
# layernorm outputs, by re-running the forward call that wrote them (layernorm_forward for layer
# 0's ln1 and after a FUSED_RESIDUAL projection, fused_residual_forward for the others; their
# inputs are kept): the same kernel on the
# same inputs writes the same bits, so every setting gives the same step. ln1 lives in lnf, which
# only the lm head reads (forward: after the last layer's ln1 is consumed; backward: before the
# layers); ln2 has one buffer of its own.
RECOMPUTED = {0: {}, 1: {"fch_gelu": "fch_gelu"}, 2: {"fch_gelu": "fch_gelu", "ln1": "lnf", "ln2": "ln2"}}
# What each buffer holds, for the memory report (memory_groups); every other buffer is activations
# (their gradients, the batch and its plan, the small scalars included).
MEMORY_GROUPS = {"params": "parameters", "params_bf16": "parameters", "grads": "gradients", "m": "optimizer state",
                 "v": "optimizer state", "scratch (shared per family)": "scratch"}


def memory_groups(memory: dict[str, int]) -> dict[str, int]:
    """Bytes per buffer (a Program's or a backend's memory()) summed by what the buffers hold:
    parameters, gradients, optimizer state, activations (and scratch, where the backend has it)."""
    out = {"parameters": 0, "gradients": 0, "optimizer state": 0, "activations": 0}
    for name, nbytes in memory.items():
        group = MEMORY_GROUPS.get(name, "activations")
        out[group] = out.get(group, 0) + nbytes
    return out

# The families each attention kind uses.
ATTENTION = {"softmax": ("attention_forward", "attention_backward"),
             "flash": ("attention_forward", "attention_backward"),
             "cudnn": ("attention_forward", "attention_backward"),
             "relu": ("relu_attention_forward", "relu_attention_backward")}


def attention_variant(attention: str, precision: str) -> str | None:
    """Which promoted entry of the attention families a run uses. softmax: the family's promoted
    version at the run's precision (fp32: the CUDA-core flash kernel, exact); flash: our
    tensor-core flash attention (bf16: that is the bf16 entry; fp32: its TF32 variant); cudnn:
    cuDNN's fused attention (bf16 only). A combination that does not exist is a TrainError."""
    from .errors import TrainError
    if attention == "cudnn" and precision != "bf16":
        raise TrainError("--attention cudnn needs --precision bf16 (cuDNN's fused attention has no fp32 path)")
    if attention == "flash" and precision == "fp32":
        return "tf32"
    return "cudnn" if attention == "cudnn" else None


class ProgramBuffers:
    """The device buffers of a Program (Program below): their declarations, slices of them
    (`at`), the parameters and gradients as the passes read them, and the memory they take."""

    def _buf(self, name: str, elems: int, dtype: str = "f32", per_layer: bool = False) -> None:
        home = self.recomputed.get(name) if per_layer else None
        if home is not None and home != name:  # kept in another buffer (RECOMPUTED): nothing to declare
            return
        L = self.config.num_layers if per_layer and home is None else 1
        self.buffers[name] = BufferDecl(name, elems * L, dtype)

    def at(self, name: str, layer: int | None = None, elems: int | None = None) -> Slice:
        """A buffer, or one layer's slice of a per-layer buffer (a recomputed activation: the one
        buffer that holds every layer's value in turn)."""
        if name in self.recomputed:
            name, layer = self.recomputed[name], None
        spec = self.buffers[name]
        if layer is None:
            return Slice(name, 0, spec.elems if elems is None else elems)
        per = spec.elems // self.config.num_layers
        return Slice(name, layer * per, per)

    def param(self, name: str, layer: int | None = None, grads: bool = False) -> Slice:
        """A parameter tensor (one layer's slice of a per-layer one) as the forward and backward
        read it: the fp32 parameters, or at bf16 their bf16 copy (AdamW updates the fp32 master
        and rewrites the copy)."""
        t = self.layout[name]
        buf = "grads" if grads else self.compute_params
        if layer is None:
            return Slice(buf, t.offset, t.size)
        per = t.size // self.config.num_layers
        return Slice(buf, t.offset + layer * per, per)

    def grad(self, name: str, layer: int | None = None) -> Slice:
        return self.param(name, layer, grads=True)

    def _declare_buffers(self) -> None:
        cfg, B, T = self.config, self.B, self.T
        C, NH, Vp = cfg.channels, cfg.num_heads, cfg.padded_vocab_size
        BT, BTC = B * T, B * T * C
        bf = self.precision == "bf16"
        act = "bf16" if bf else "f32"  # activations, their gradients and the parameter gradients
        self.compute_params = "params_bf16" if bf else "params"
        self._buf("params", self.padded_params)  # fp32: the master weights AdamW updates
        if bf:
            self._buf("params_bf16", self.padded_params, "bf16")
        self._buf("grads", self.padded_params, act)
        for name in ("m", "v"):
            self._buf(name, self.shard_elems)
        self._buf("tokens", BT, "i32")
        self._buf("targets", BT, "i32")
        # The plan of the tokens for the embedding backward (references/encoder_backward.py): the
        # trainer makes it on the host per micro-step and uploads it beside the tokens.
        self._buf("eb_role", BT, "i32")
        self._buf("eb_plan", plan_words(BT, C), "i32")
        self._buf("optimizer_scalars", 6)  # [lr, beta1, beta2, eps, weight_decay, t]: adamw's hp
        if self.weight_decay:
            self._buf("optimizer_scalars_no_decay", 6)  # the same with weight_decay 0: for all but the matrices
        self._buf("norm2", 1)
        self._buf("zeros", Vp, act)  # the lm head has no bias (its call says so: zero_bias = 1)
        self._buf("encoded", BTC, act)
        stats = ("ln1_mean", "ln1_rstd", "ln2_mean", "ln2_rstd", "lse", "lnf_mean", "lnf_rstd", "losses")
        # With FUSED_RESIDUAL the projections add into the stream themselves: their own outputs
        # (attproj, fcproj) are never stored.
        unkept = {"attproj", "fcproj"} if FUSED_RESIDUAL in self.fused else set()
        for name, elems in (("ln1", BTC), ("ln1_mean", BT), ("ln1_rstd", BT), ("qkv", 3 * BTC),
                            ("atty", BTC), ("lse", B * NH * T), ("attproj", BTC), ("residual2", BTC),
                            ("ln2", BTC), ("ln2_mean", BT), ("ln2_rstd", BT), ("fch", 4 * BTC),
                            ("fch_gelu", 4 * BTC), ("fcproj", BTC), ("residual3", BTC)):
            if name in unkept:
                continue
            self._buf(name, elems, "f32" if name in stats else act, per_layer=True)
        for name, elems in (("lnf", BTC), ("lnf_mean", BT), ("lnf_rstd", BT), ("logits", BT * Vp),
                            ("losses", BT), ("dresidual", BTC), ("dln", BTC), ("datty", BTC),
                            ("dqkv", 3 * BTC), ("dfch", 4 * BTC), ("dfch_gelu", 4 * BTC)):
            self._buf(name, elems, "f32" if name in stats else act)

    def memory(self) -> dict[str, int]:
        return {name: spec.elems * ITEMSIZE[spec.dtype] for name, spec in self.buffers.items()}

    def memory_with(self, recompute: int) -> int:
        """The buffers' total bytes were this program built with another --recompute."""
        other = copy.copy(self)
        other.recomputed, other.buffers = RECOMPUTED[recompute], {}
        other._declare_buffers()
        return sum(other.memory().values())


class ProgramPasses:
    """The forward, loss and backward of a Program (Program below) as family calls, layer by layer."""

    @property
    def _bt(self) -> dict[str, int]:
        return {"B": self.B, "T": self.T}

    @property
    def _tf32(self) -> dict[str, int]:
        return {"tf32": int(self.tf32)}

    def _mm(self, out, inp, w, b, c, oc, label) -> Call:
        return Call("matmul_forward", {**self._bt, "C": c, "OC": oc}, {"out": out, "inp": inp, "weight": w, "bias": b},
                    self._tf32, label)

    def _residual_of(self, layer: int) -> Slice:
        """The residual stream entering `layer`."""
        return self.at("encoded") if layer == 0 else self.at("residual3", layer - 1)

    def _mm_back(self, dinp, dw, db, dout, inp, w, c, oc, label) -> list[Call]:
        bt = self._bt
        out = [Call("matmul_backward", {**bt, "C": c, "OC": oc},
                    {"dinp": dinp, "dweight": dw, "dout": dout, "inp": inp, "weight": w}, self._tf32, label)]
        if db is not None:
            out.append(Call("matmul_backward_bias", {**bt, "OC": oc}, {"dbias": db, "dout": dout}, label=label + " bias"))
        return out

    def _ln_back(self, dw, db, inp, w, mean, rstd, label, proj_bias: Slice | None = None) -> Call:
        """A layernorm's backward into dresidual. proj_bias: the bias gradient of the projection whose
        output gradient dresidual is once this call has added into it; with FUSED_LN in `fused` this
        call sums it too (and _proj_bias gives None), otherwise the projection's matmul_backward_bias does."""
        args = {"dinp": self.at("dresidual"), "dweight": dw, "dbias": db, "dout": self.at("dln"),
                "inp": inp, "weight": w, "mean": mean, "rstd": rstd}
        if proj_bias is not None and FUSED_LN in self.fused:
            return Call(FUSED_LN, {**self._bt, "C": self.config.channels}, {**args, "dproj_bias": proj_bias},
                        label=label + " (+ the projection's bias gradient)")
        return Call("layernorm_backward", {**self._bt, "C": self.config.channels}, args, label=label)

    def _proj_bias(self, name: str, layer: int) -> Slice | None:
        """The bias gradient a projection's matmul_backward_bias adds, or None where the layernorm
        backward before it (in the backward's order) sums it (FUSED_LN)."""
        return None if FUSED_LN in self.fused else self.grad(name, layer)

    def _build_forward(self) -> None:
        C, L, T, Vp = self.config.channels, self.config.num_layers, self.T, self.config.padded_vocab_size
        bt, f = self._bt, self.forward
        f.append(Call("encoder_forward", {**bt, "C": C, "V": Vp},
                      {"out": self.at("encoded"), "inp": self.at("tokens"), "wte": self.param("wte"),
                       "wpe": Slice(self.compute_params, self.layout["wpe"].offset, T * C)}, label="embed"))
        f.append(Call("layernorm_forward", {**bt, "C": C},
                      {"out": self.at("ln1", 0), "mean": self.at("ln1_mean", 0), "rstd": self.at("ln1_rstd", 0),
                       "inp": self.at("encoded"), "weight": self.param("ln1w", 0), "bias": self.param("ln1b", 0)},
                      label="layer 0 ln1"))
        for layer in range(L):
            f += self._forward_layer(layer)
        lm_head = self._mm(self.at("logits"), self.at("lnf"), self.param("wte"), self.at("zeros"), C, Vp, "lm head")
        f.append(replace(lm_head, params={**lm_head.params, "zero_bias": 1}))  # a version may skip the bias

    def _forward_layer(self, l: int) -> list[Call]:
        C, L, NH = self.config.channels, self.config.num_layers, self.config.num_heads
        bt, mm, at, param = self._bt, self._mm, self.at, self.param
        att_fwd, _ = ATTENTION[self.attention]
        f = [mm(at("qkv", l), at("ln1", l), param("qkvw", l), param("qkvb", l), C, 3 * C, f"layer {l} qkv")]
        att_args = {"out": at("atty", l), "qkv": at("qkv", l)}
        if self.attention != "relu":  # the softmax kinds keep the log-sum-exp for the backward
            att_args["lse"] = at("lse", l)
        f.append(Call(att_fwd, {**bt, "NH": NH, "HS": C // NH}, att_args, self._tf32, f"layer {l} attention"))
        ln2 = {"normed": at("ln2", l), "mean": at("ln2_mean", l), "rstd": at("ln2_rstd", l),
               "weight": param("ln2w", l), "bias": param("ln2b", l)}
        f += self._projection(at("residual2", l), self._residual_of(l), "attproj", at("atty", l), C, l, ln2, "ln2")
        f += self._fc_forward(l)
        last = l == L - 1
        nxt = ({"normed": at("lnf"), "mean": at("lnf_mean"), "rstd": at("lnf_rstd"),
                "weight": param("lnfw"), "bias": param("lnfb")} if last else
               {"normed": at("ln1", l + 1), "mean": at("ln1_mean", l + 1), "rstd": at("ln1_rstd", l + 1),
                "weight": param("ln1w", l + 1), "bias": param("ln1b", l + 1)})
        f += self._projection(at("residual3", l), at("residual2", l), "fcproj", at("fch_gelu", l), 4 * C, l, nxt,
                              "lnf" if last else f"layer {l + 1} ln1")
        return f

    def _projection(self, stream: Slice, entering: Slice, name: str, inp: Slice, c: int, l: int,
                    ln: dict[str, Slice], ln_label: str) -> list[Call]:
        """A block branch's end: the projection `name` of `inp`, added to the stream `entering` into
        `stream`, then the layernorm `ln` (its normed, mean, rstd, weight, bias) of the new stream.
        With FUSED_RESIDUAL the GEMM adds the stream itself and a plain layernorm follows;
        otherwise the projection's output is kept and fused_residual_forward adds and normalizes."""
        C, at, param = self.config.channels, self.at, self.param
        w, b = param(f"{name}w", l), param(f"{name}b", l)
        if FUSED_RESIDUAL in self.fused:
            return [Call(FUSED_RESIDUAL, {**self._bt, "C": c, "OC": C},
                         {"out": stream, "inp": inp, "weight": w, "bias": b, "residual": entering}, self._tf32,
                         f"layer {l} {name}+residual"),
                    Call("layernorm_forward", {**self._bt, "C": C},
                         {"out": ln["normed"], "mean": ln["mean"], "rstd": ln["rstd"], "inp": stream,
                          "weight": ln["weight"], "bias": ln["bias"]},
                         label=ln_label if ln_label.startswith("layer") else f"layer {l} {ln_label}")]
        return [self._mm(at(name, l), inp, w, b, c, C, f"layer {l} {name}"),
                Call("fused_residual_forward", {**self._bt, "C": C},
                     {"residual": stream, "inp1": entering, "inp2": at(name, l), **ln},
                     label=f"layer {l} residual+{ln_label}")]

    def _build_loss(self) -> None:
        """Softmax + cross-entropy + dlogits in one pass, written over the logits."""
        B, T, V, Vp = self.B, self.T, self.config.vocab_size, self.config.padded_vocab_size
        self.loss.append(Call("fused_classifier", {**self._bt, "V": V, "Vp": Vp},
                              {"logits": self.at("logits"), "losses": self.at("losses"), "targets": self.at("targets")},
                              {"dloss": 1.0 / (B * T * self.micro_steps * self.world)}, "classifier"))

    def _build_backward(self) -> None:
        """Parameter gradients add into `grads`, zeroed once per optimizer step."""
        C, L, T, Vp = self.config.channels, self.config.num_layers, self.T, self.config.padded_vocab_size
        at, param, grad = self.at, self.param, self.grad
        self.zero_grads.append(Zero(at("grads"), "zero grads"))
        b = self.backward
        b.append(Zero(at("dresidual"), "zero dresidual"))
        b += self._mm_back(at("dln"), grad("wte"), None, at("logits"), at("lnf"), param("wte"), C, Vp, "lm head")
        b.append(self._ln_back(grad("lnfw"), grad("lnfb"), at("residual3", L - 1), param("lnfw"), at("lnf_mean"),
                               at("lnf_rstd"), "lnf", proj_bias=grad("fcprojb", L - 1)))
        for layer in reversed(range(L)):
            b += self._recomputing(layer, self._backward_layer(layer))
        b.append(Call("encoder_backward", {**self._bt, "C": C, "V": Vp},
                      {"dwte": grad("wte"), "dwpe": Slice("grads", self.layout["wpe"].offset, T * C),
                       "dout": at("dresidual"), "inp": at("tokens"), "role": at("eb_role"), "plan": at("eb_plan")},
                      label="embed"))

    def _backward_layer(self, l: int) -> list[Call]:
        C, NH = self.config.channels, self.config.num_heads
        at, param, grad, mm_back, ln_back = self.at, self.param, self.grad, self._mm_back, self._ln_back
        _, att_bwd = ATTENTION[self.attention]
        # dresidual holds d(residual3[l]): the MLP branch
        b = self._mlp_backward(l)
        b.append(ln_back(grad("ln2w", l), grad("ln2b", l), at("residual2", l), param("ln2w", l), at("ln2_mean", l),
                         at("ln2_rstd", l), f"layer {l} ln2", proj_bias=grad("attprojb", l)))
        # now dresidual holds d(residual2[l]): the attention branch
        b += mm_back(at("datty"), grad("attprojw", l), self._proj_bias("attprojb", l), at("dresidual"),
                     at("atty", l), param("attprojw", l), C, C, f"layer {l} attproj")
        att_args = {"dqkv": at("dqkv"), "dout": at("datty"), "qkv": at("qkv", l)}
        if self.attention != "relu":  # the softmax kinds keep the log-sum-exp for the backward
            att_args.update(out=at("atty", l), lse=at("lse", l))
        b.append(Call(att_bwd, {**self._bt, "NH": NH, "HS": C // NH}, att_args, self._tf32, f"layer {l} attention"))
        fused_bias = FUSED_QKV_BIAS in self.fused  # the query third summed, the value third through attproj
        b += mm_back(at("dln"), grad("qkvw", l), None if fused_bias else grad("qkvb", l), at("dqkv"), at("ln1", l),
                     param("qkvw", l), C, 3 * C, f"layer {l} qkv")
        if fused_bias:
            b.append(Call(FUSED_QKV_BIAS, {**self._bt, "C": C},
                          {"dbias": grad("qkvb", l), "dqkv": at("dqkv"), "dproj_bias": grad("attprojb", l),
                           "proj_weight": param("attprojw", l)}, label=f"layer {l} qkv bias"))
        b.append(ln_back(grad("ln1w", l), grad("ln1b", l), self._residual_of(l), param("ln1w", l), at("ln1_mean", l),
                         at("ln1_rstd", l), f"layer {l} ln1", proj_bias=grad("fcprojb", l - 1) if l else None))
        # now dresidual holds d(residual entering layer l)
        return b

    def _recomputing(self, l: int, calls: list[Step]) -> list[Step]:
        """Layer l's backward with each activation the program does not keep (RECOMPUTED) refilled
        right before the first call that binds it."""
        refill = {self.at(name, l): name for name in self.recomputed}
        assert len(refill) == len(self.recomputed), "two recomputed activations share a buffer"
        out: list[Step] = []
        for call in calls:
            for ref in call.args.values() if isinstance(call, Call) else ():
                if ref in refill:
                    out.append(self._refill(refill.pop(ref), l))
            out.append(call)
        assert not refill, f"layer {l}'s backward never reads {', '.join(refill.values())}"
        return out

    def _refill(self, name: str, l: int) -> Call:
        """The call that recomputes layer l's `name` from what the forward kept."""
        label = f"layer {l} {name} (recomputed)"
        if name == "fch_gelu":  # from the kept pre-GELU fch, however the forward made its GELU
            return Call("gelu_forward", {**self._bt, "C": 4 * self.config.channels},
                        {"out": self.at("fch_gelu", l), "inp": self.at("fch", l)}, label=label)
        # a layernorm output: the forward call that wrote it (its mean and rstd are kept per layer), again
        mean = self.at(f"{name}_mean", l)
        (writer,) = [c for c in self.forward if isinstance(c, Call) and c.args.get("mean") == mean]
        return replace(writer, label=label)


# The fused families the MLP may run in place of matmul + GELU (forward) and matmul backward + GELU
# backward + the fc bias gradient (backward), and the layernorm backward that also takes the bias
# gradient of the projection below it (attproj's, the layer below's fcproj's) in place of that
# projection's matmul_backward_bias: Program(fused=...) names the ones to use.
FUSED_GELU = ("matmul_forward_gelu", "matmul_backward_dgelu")
FUSED_LN = "layernorm_backward_proj_bias"
# The projections' GEMMs adding into the residual stream themselves (their output never stored),
# each followed by a plain layernorm_forward in place of fused_residual_forward.
FUSED_RESIDUAL = "matmul_forward_residual"
# qkv's bias gradient from softmax attention's invariances (kernels/qkv_bias_backward/family.toml):
# the key third is zero, the value third is attproj's bias gradient times its weight, so only the
# query third of dqkv is summed. Not with ReLU attention, whose rows do not sum to one.
FUSED_QKV_BIAS = "qkv_bias_backward"
FUSED = FUSED_GELU + (FUSED_LN, FUSED_RESIDUAL, FUSED_QKV_BIAS)


def fused_for(attention: str, fused: tuple[str, ...] = FUSED) -> tuple[str, ...]:
    """The families of `fused` a Program with this attention can use: all of them but
    FUSED_QKV_BIAS under ReLU attention (the Program refuses that pair)."""
    return tuple(f for f in fused if not (f == FUSED_QKV_BIAS and attention == "relu"))


class ProgramMLP:
    """The MLP's fc layer and GELU (Program below): as separate calls, or, for the families named
    in `fused`, one call whose GEMM does the GELU (and its backward) in its epilogue. Either way
    fch holds the GELU's input, fch_gelu its output, dfch the gradient at fch."""

    def _fc_forward(self, l: int) -> list[Call]:
        C, at, param = self.config.channels, self.at, self.param
        if "matmul_forward_gelu" in self.fused:
            return [Call("matmul_forward_gelu", {**self._bt, "C": C, "OC": 4 * C},
                         {"out": at("fch_gelu", l), "pre": at("fch", l), "inp": at("ln2", l),
                          "weight": param("fcw", l), "bias": param("fcb", l)}, self._tf32, f"layer {l} fc+gelu")]
        return [self._mm(at("fch", l), at("ln2", l), param("fcw", l), param("fcb", l), C, 4 * C, f"layer {l} fc"),
                Call("gelu_forward", {**self._bt, "C": 4 * C}, {"out": at("fch_gelu", l), "inp": at("fch", l)},
                     label=f"layer {l} gelu")]

    def _mlp_backward(self, l: int) -> list[Call]:
        """From d(residual3[l]) in dresidual to dln: fcproj's gradients, the GELU's, fc's."""
        C, at, param, grad, mm_back = self.config.channels, self.at, self.param, self.grad, self._mm_back
        fc_back = mm_back(at("dln"), grad("fcw", l), grad("fcb", l), at("dfch"), at("ln2", l), param("fcw", l), C,
                          4 * C, f"layer {l} fc")
        if "matmul_backward_dgelu" in self.fused:  # fc's bias gradient comes out of the fused call
            fcproj = Call("matmul_backward_dgelu", {**self._bt, "C": 4 * C, "OC": C},
                         {"dpre": at("dfch"), "dpre_bias": grad("fcb", l), "dweight": grad("fcprojw", l),
                          "dout": at("dresidual"), "inp": at("fch_gelu", l), "pre": at("fch", l),
                          "weight": param("fcprojw", l)}, self._tf32, f"layer {l} fcproj+gelu")
            fcproj_bias = self._proj_bias("fcprojb", l)
            bias = [Call("matmul_backward_bias", {**self._bt, "OC": C}, {"dbias": fcproj_bias, "dout": at("dresidual")},
                         label=f"layer {l} fcproj bias")] if fcproj_bias is not None else []
            return [fcproj, *bias, fc_back[0]]  # fc_back[1], fc's bias gradient, is done
        b = mm_back(at("dfch_gelu"), grad("fcprojw", l), self._proj_bias("fcprojb", l), at("dresidual"), at("fch_gelu", l),
                    param("fcprojw", l), 4 * C, C, f"layer {l} fcproj")
        b.append(Call("gelu_backward", {**self._bt, "C": 4 * C},
                      {"dinp": at("dfch"), "inp": at("fch", l), "dout": at("dfch_gelu")}, label=f"layer {l} gelu"))
        return b + fc_back


class ProgramUpdate:
    """The optimizer step of a Program (Program below): AdamW with clipping by the global norm over
    this rank's shard, and on many GPUs the gradient reductions (bucketed, overlapped with the
    backward) and the gather of the updated parameters."""

    def _build_update(self) -> None:
        """Clip by the global norm inside AdamW, over this rank's shard of the real parameters."""
        P, (lo, hi) = self.num_params, self.shard
        u = self.update
        if self.grad_clip > 0:
            end = min(hi, P)
            if end > lo:
                u.append(Call("global_norm", {"N": end - lo}, {"norm2": self.at("norm2"),
                                                              "grads": Slice("grads", lo, end - lo)}, label="grad norm"))
            else:  # a shard of padding only: it adds nothing to the norm
                u.append(Zero(self.at("norm2"), "grad norm (padding only)"))
            if self.zero:
                u.append(AllReduce(self.at("norm2"), "sum the shards' squared norms"))
        max_norm = self.grad_clip if self.grad_clip > 0 else math.inf
        for start, end, decay in self.update_runs():
            n = end - start
            hp = "optimizer_scalars" if decay or not self.weight_decay else "optimizer_scalars_no_decay"
            args = {"params": Slice("params", start, n), "grads": Slice("grads", start, n),
                    "m": Slice("m", start - lo, n), "v": Slice("v", start - lo, n),
                    "hp": self.at(hp), "norm2": self.at("norm2")}
            if self.precision == "bf16":  # the mixed-precision AdamW also rewrites the bf16 copy
                args["params_bf16"] = Slice("params_bf16", start, n)
            u.append(Call("adamw", {"N": n}, args, {"max_norm": max_norm}, "adamw" + (" (decay)" if decay else "")))
        if self.zero:
            u.append(AllGather("params", self.shard_elems, "gather the updated shards"))
            if self.precision == "bf16":
                u.append(AllGather("params_bf16", self.shard_elems, "gather the updated shards' bf16 copies"))

    def update_runs(self) -> list[tuple[int, int, bool]]:
        """[start, end) runs of this rank's shard of the parameters, each with or without weight
        decay: one run over everything unless weight decay is on, then one per run of consecutive
        tensors that decay alike (only the 2-D weights do)."""
        runs: list[list] = []
        for t in self.layout:
            decay = self.weight_decay and t.name in MATRICES
            if runs and runs[-1][2] == decay:
                runs[-1][1] = t.end
            else:
                runs.append([t.offset, t.end, decay])
        lo, hi = self.shard
        return [(max(a, lo), min(b, hi), d) for a, b, d in runs if max(a, lo) < min(b, hi)]

    # -- gradient reduction over ranks --------------------------------------------------------------
    def grad_regions(self) -> list[Slice]:
        """The gradient buffer as the slices the backward finishes one at a time: each per-layer
        tensor's slice of one layer, and the other tensors whole. They cover the parameters once."""
        out = []
        for t in self.layout:
            if t.name in PER_LAYER:
                out += [self.grad(t.name, layer) for layer in range(self.config.num_layers)]
            else:
                out.append(self.grad(t.name))
        return out

    def _pieces(self, regions: list[Slice]) -> list[tuple[Slice, int | None]]:
        if not self.zero:
            return [(r, None) for r in regions]
        out, S = [], self.shard_elems
        for r in regions:  # split at shard boundaries: each piece goes to the rank that owns it
            start, end = r.offset, r.offset + r.elems
            while start < end:
                owner = start // S
                cut = min(end, (owner + 1) * S)
                out.append((Slice(r.buffer, start, cut - start), owner))
                start = cut
        return out

    def _reduced_backward(self) -> list[Step]:
        """The backward with a Reduce after each call that completes a bucket of gradient regions
        (a region is complete after the last call that writes into it), then a Join."""
        regions = self.grad_regions()
        last_writer = {r: len(self.backward) - 1 for r in regions}
        for i, call in enumerate(self.backward):
            if not isinstance(call, Call):
                continue
            for ref in call.args.values():
                if ref.buffer != "grads":
                    continue
                for r in regions:
                    if r.overlaps(ref):
                        last_writer[r] = i
        done_at: dict[int, list[Slice]] = {}
        for r in regions:
            done_at.setdefault(last_writer[r], []).append(r)
        final = max(done_at)
        out: list[Step] = []
        pending: list[Slice] = []
        for i, step in enumerate(self.backward):
            out.append(step)
            pending += done_at.get(i, [])
            if pending and (sum(r.elems for r in pending) >= self.bucket_elems or i == final):
                out.append(Reduce(self._pieces(pending), f"reduce {len(pending)} gradient slices after {step.label}"))
                pending = []
        out.append(Join())
        return out


class Program(ProgramBuffers, ProgramPasses, ProgramMLP, ProgramUpdate):
    """The calls of one training step of GPT-2 at (B, T): `zero_grads`, then per micro-step
    `forward`, `loss`, `backward` (`reduced_backward` on the last micro-step of a run on many
    GPUs), then `update`.

    micro_steps and world fold the mean over the optimizer step into the classifier's dloss;
    rank and zero place this rank's optimizer shard; weight_decay (a bool: the rate itself is a
    device scalar) splits the update so only the 2-D weights decay; grad_clip is AdamW's max_norm
    (0: no clipping, and no norm computed); fused names the families of FUSED the step uses (the
    MLP's, ProgramMLP; the layernorm backward's, _ln_back; the projections', _projection); recompute (0, 1, 2) which activations the backward recomputes instead of keeping
    them per layer (RECOMPUTED)."""

    def __init__(self, config: GPT2Config, B: int, T: int, attention: str = "softmax", tf32: bool = True, *,
                 micro_steps: int = 1, world: int = 1, rank: int = 0, zero: int = 0, weight_decay: bool = False,
                 grad_clip: float = 1.0, bucket_elems: int = BUCKET_ELEMS, precision: str = "fp32",
                 fused: tuple[str, ...] = (), recompute: int = 0):
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION)}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        unknown = sorted(set(fused) - set(FUSED))
        if unknown:
            raise ValueError(f"fused may name {', '.join(FUSED)}, not {', '.join(unknown)}")
        if refused := [f for f in fused if f not in fused_for(attention, fused)]:  # fused_for: the one rule
            raise ValueError(f"{', '.join(refused)} holds for softmax attention only, not --attention {attention}")
        if recompute not in RECOMPUTED:
            raise ValueError(f"recompute must be one of {', '.join(map(str, RECOMPUTED))}")
        self.precision, self.fused = precision, tuple(fused)
        self.recompute, self.recomputed = recompute, RECOMPUTED[recompute]
        self.attention_variant = attention_variant(attention, precision)
        if self.attention_variant == "tf32" and not tf32:
            from .errors import TrainError
            raise TrainError("--attention flash at fp32 runs on TF32 tensor cores: it needs --tf32 "
                             "(--attention softmax is the exact fp32 one)")
        if not (micro_steps >= 1 and world >= 1 and 0 <= rank < world and zero in (0, 1) and grad_clip >= 0):
            raise ValueError(f"bad step geometry: micro_steps={micro_steps} world={world} rank={rank} zero={zero} "
                             f"grad_clip={grad_clip}")
        self.config, self.B, self.T, self.attention, self.tf32 = config, B, T, attention, tf32
        self.micro_steps, self.world, self.rank, self.zero = micro_steps, world, rank, zero
        self.weight_decay, self.grad_clip, self.bucket_elems = weight_decay, grad_clip, bucket_elems
        self.layout = layout(config)
        self.num_params = self.layout.total
        self.shard_elems, self.padded_params = shard_geometry(self.num_params, world, zero)
        lo = rank * self.shard_elems if zero else 0
        self.shard = (lo, lo + self.shard_elems)  # this rank's part of the flat vector: its m and v
        self.buffers: dict[str, BufferDecl] = {}
        self.zero_grads: list[Step] = []
        self.forward: list[Step] = []
        self.loss: list[Step] = []
        self.backward: list[Step] = []
        self.update: list[Step] = []
        self._build()
        self.reduced_backward: list[Step] = self._reduced_backward()

    # -- the step ----------------------------------------------------------------------------
    def _build(self) -> None:
        self._declare_buffers()
        self._build_forward()
        self._build_loss()
        self._build_backward()
        self._build_update()
        # Every call runs at the program's precision; the attention calls in the variant asked for.
        att_fwd, att_bwd = ATTENTION[self.attention]
        for call in self.calls:
            call.precision = self.precision
            if call.family in (att_fwd, att_bwd):
                call.variant = self.attention_variant

    @property
    def calls(self) -> list[Call]:
        return [c for c in self.zero_grads + self.forward + self.loss + self.backward + self.update if isinstance(c, Call)]

    def family_sizes(self) -> dict[str, list[dict[str, int]]]:
        """The distinct sizes each family is called at: what `promote` re-checks a version at."""
        out: dict[str, list[dict[str, int]]] = {}
        for c in self.calls:
            if c.sizes not in out.setdefault(c.family, []):
                out[c.family].append(dict(c.sizes))
        return out

def flops_per_token(config: GPT2Config, T: int) -> int:
    """6N + 6LCT: the matmul FLOPs of forward + backward per token (attention included)."""
    return 6 * layout(config).total + 6 * config.num_layers * config.channels * T


# The shapes the promoted kernels are checked at before the trainer may use them: GPT-2 124M at
# the default batch (both attention kinds).
PROMOTION_SHAPES = {"config": "d12", "B": 4, "T": 1024}


def promotion_sizes(family_name: str, family_sizes: tuple[str, ...]) -> list[dict[str, int]]:
    """Every size set the trainer calls `family_name` at, in the family's own size names: what
    `workbench promote` re-checks a version at."""
    from .config import preset
    out: list[dict[str, int]] = []
    for kind in ("softmax", "relu"):  # the two sets of attention families (flash and cudnn: softmax's)
        program = Program(preset(PROMOTION_SHAPES["config"]), PROMOTION_SHAPES["B"], PROMOTION_SHAPES["T"], kind,
                          fused=fused_for(kind) if family_name in FUSED else ())
        for sizes in program.family_sizes().get(family_name, []):
            own = {k: v for k, v in sizes.items() if k in family_sizes}
            if own not in out:
                out.append(own)
    return out

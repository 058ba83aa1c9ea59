"""The trainer's program (train/model.py) run call by call through the family references
(train/backends.py's ReferenceBackend) equals the NumPy GPT-2: the wiring the GPU trainer uses is right."""

import numpy as np
import pytest

from references.adamw import adamw
from train.gpt2_numpy import gpt2_backward, gpt2_forward
from train.config import preset
from train.model import ATTENTION, Program
from train.backends import ReferenceBackend
from train.params import fresh_init


def run_step(config, B, T, seed=0):
    rng = np.random.default_rng(seed)
    params = fresh_init(config, seed)
    tokens = rng.integers(0, config.vocab_size, size=(B, T))
    targets = rng.integers(0, config.vocab_size, size=(B, T))
    program = Program(config, B, T)
    backend = ReferenceBackend(program)
    backend.host["params"][:] = params
    backend.host["tokens"][:] = tokens.ravel()
    backend.host["targets"][:] = targets.ravel()
    return program, backend, params, tokens, targets


@pytest.mark.parametrize("B, T", [(2, 8), (1, 5)])
def test_forward_loss_and_gradients_match_the_numpy_gpt2(B, T):
    config = preset("micro")
    program, backend, params, tokens, targets = run_step(config, B, T)
    backend.run(program.forward + program.loss + program.backward)
    want = gpt2_forward(params, config, tokens, targets)
    np.testing.assert_allclose(backend.host["losses"], want["losses"].ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(backend.host["grads"], gpt2_backward(params, config, want["acts"]), rtol=1e-10, atol=1e-12)


def test_the_update_is_clipped_adamw_on_the_flat_buffers():
    config = preset("micro")
    program, backend, params, tokens, targets = run_step(config, 2, 8)
    backend.host["optimizer_scalars"][:] = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    backend.run(program.forward + program.loss + program.backward)
    grads = backend.host["grads"].copy()
    backend.run(program.update)
    norm2 = float((grads ** 2).sum())
    assert backend.host["norm2"][0] == pytest.approx(norm2)
    want = adamw(params, grads, np.zeros_like(params), np.zeros_like(params), backend.host["optimizer_scalars"], np.array([norm2]), 1.0)
    np.testing.assert_allclose(backend.host["params"], want["params"], rtol=1e-12, atol=1e-15)
    assert not np.allclose(backend.host["params"], params)


def test_relu_attention_program_runs_and_differs():
    config = preset("micro")
    p1 = Program(config, 2, 8, "relu")
    assert {c.family for c in p1.calls} >= set(ATTENTION["relu"])
    backend = ReferenceBackend(p1)
    backend.host["params"][:] = fresh_init(config, 0)
    backend.host["tokens"][:] = 1
    backend.host["targets"][:] = 2
    backend.run(p1.forward + p1.loss + p1.backward)
    assert np.isfinite(backend.host["losses"]).all() and np.abs(backend.host["grads"]).sum() > 0


def test_the_trainer_calls_each_family_at_the_shapes_promote_checks():
    sizes = Program(preset("d12"), 4, 1024).family_sizes()
    assert {"B": 4, "T": 1024, "C": 768, "OC": 50304} in sizes["matmul_forward"]  # the lm head
    assert sizes["attention_forward"] == [{"B": 4, "T": 1024, "NH": 12, "HS": 64}]
    assert sizes["adamw"] == [{"N": 124_475_904}]


# -- optimizer steps: accumulation, weight decay, clipping, ranks, ZeRO-1 -----------------------------------
from references.adamw import clip_factor  # noqa: E402
from train.backends import COLLECTIVES  # noqa: E402
from train.model import AllGather, AllReduce, Join, Reduce  # noqa: E402
from train.params import MATRICES, layout  # noqa: E402

MICRO = preset("micro")
HP = (1e-2, 0.9, 0.999, 1e-8, 0.1, 1)


def backend_for(program, params):
    backend = ReferenceBackend(program)
    backend.host["params"][:params.size] = params
    backend.host["optimizer_scalars"][:] = HP
    if "optimizer_scalars_no_decay" in backend.host:
        backend.host["optimizer_scalars_no_decay"][:] = (*HP[:4], 0.0, HP[5])
    return backend


def collective(backends, items) -> None:
    """What NCCL does across the ranks, on the ranks' host buffers."""
    first = items[0]
    assert all(type(i) is type(first) for i in items)
    if isinstance(first, Reduce):
        for piece, root in first.pieces:
            total = sum(b.view(piece) for b in backends)
            for b in backends if root is None else [backends[root]]:
                b.view(piece)[:] = total
    elif isinstance(first, AllReduce):
        total = sum(b.view(first.ref) for b in backends)
        for b in backends:
            b.view(first.ref)[:] = total
    elif isinstance(first, AllGather):
        S = first.shard
        for r, src in enumerate(backends):
            for b in backends:
                b.host[first.buffer][r * S:(r + 1) * S] = src.host[first.buffer][r * S:(r + 1) * S]


def run_ranks(backends, lists) -> None:
    """Each rank's list up to its next collective, then the collective across the ranks."""
    its = [iter(items) for items in lists]
    while True:
        met = []
        for b, it in zip(backends, its):
            for item in it:
                if isinstance(item, COLLECTIVES):
                    met.append(item)
                    break
                b.run([item])
        if not met:
            return
        assert len(met) == len(backends), "the ranks' programs meet different collectives"
        collective(backends, met)


def one_optimizer_step(B, T, tokens, targets, params, world=1, micro_steps=1, zero=0, **kw):
    """Every rank's micro-steps on its windows (window = (micro * world + rank)), then the update."""
    programs = [Program(MICRO, B, T, micro_steps=micro_steps, world=world, rank=r, zero=zero, **kw) for r in range(world)]
    backends = [backend_for(p, params) for p in programs]
    lists = [[] for _ in programs]
    for r, (p, b) in enumerate(zip(programs, backends)):
        b.run(p.zero_grads)
    for k in range(micro_steps):
        last = k == micro_steps - 1
        for r, (p, b) in enumerate(zip(programs, backends)):
            i = k * world + r
            b.host["tokens"][:] = tokens[i * B:(i + 1) * B].ravel()
            b.host["targets"][:] = targets[i * B:(i + 1) * B].ravel()
            lists[r] = p.forward + p.loss + (p.reduced_backward if last and world > 1 else p.backward) + (p.update if last else [])
        run_ranks(backends, lists)
    return programs, backends


def batch(n, T=8, seed=3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, MICRO.vocab_size, (n, T)), rng.integers(0, MICRO.vocab_size, (n, T))


def test_the_classifier_folds_micro_steps_and_ranks_into_dloss():
    (call,) = Program(MICRO, 2, 8, micro_steps=4, world=3).loss
    assert call.params["dloss"] == 1.0 / (2 * 8 * 4 * 3)
    assert Program(MICRO, 2, 8).loss[0].params["dloss"] == 1.0 / (2 * 8)


def test_zero_grads_is_its_own_list_and_the_backward_only_accumulates():
    p = Program(MICRO, 2, 8)
    assert [z.ref.buffer for z in p.zero_grads] == ["grads"]
    assert not any(getattr(s, "ref", None) and s.ref.buffer == "grads" for s in p.backward)


def test_two_micro_steps_of_b_equal_one_step_of_2b():
    params = fresh_init(MICRO, 0) + np.random.default_rng(1).normal(0, 0.05, layout(MICRO).total)
    tokens, targets = batch(4)
    (pa,), (a,) = one_optimizer_step(2, 8, tokens, targets, params, micro_steps=2)
    (pb,), (b,) = one_optimizer_step(4, 8, tokens, targets, params)
    P = pa.num_params
    np.testing.assert_allclose(a.host["grads"], b.host["grads"], rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(a.host["norm2"], b.host["norm2"], rtol=1e-12)
    # AdamW's m / sqrt(v) divides rounding-level gradient differences by tiny gradients
    np.testing.assert_allclose(a.host["params"][:P], b.host["params"][:P], rtol=1e-9, atol=1e-13)
    assert not np.allclose(a.host["params"][:P], params)


def test_weight_decay_applies_to_the_2d_weights_only():
    params = fresh_init(MICRO, 0) + np.random.default_rng(2).normal(0, 0.05, layout(MICRO).total)
    tokens, targets = batch(2)
    program = Program(MICRO, 2, 8, weight_decay=True)
    backend = backend_for(program, params)
    backend.host["tokens"][:], backend.host["targets"][:] = tokens.ravel(), targets.ravel()
    backend.run(program.zero_grads + program.forward + program.loss + program.backward)
    grads = backend.host["grads"].copy()
    backend.run(program.update)
    norm2 = np.array([grads @ grads])
    for t in layout(MICRO):
        hp = np.array(HP) if t.name in MATRICES else np.array((*HP[:4], 0.0, HP[5]))
        want = adamw(params[t.offset:t.end], grads[t.offset:t.end], 0, 0, hp, norm2, 1.0)["params"]
        np.testing.assert_allclose(backend.host["params"][t.offset:t.end], want, rtol=1e-12, atol=1e-15, err_msg=t.name)
    assert len(program.update_runs()) == 10 and len(Program(MICRO, 2, 8).update_runs()) == 1


def test_grad_clip_zero_clips_nothing_and_skips_the_norm():
    program = Program(MICRO, 2, 8, grad_clip=0)
    assert "global_norm" not in {c.family for c in program.calls}
    assert program.update[0].params["max_norm"] == float("inf") and clip_factor(1e12, float("inf")) == 1.0


@pytest.mark.parametrize("world, micro_steps, zero", [(3, 1, 0), (3, 1, 1), (2, 2, 0), (2, 2, 1), (1, 1, 1)])
def test_a_step_over_ranks_equals_one_step_of_their_whole_batch(world, micro_steps, zero):
    """The collectives as NCCL would run them, on host buffers: ZeRO-1's shards, owner reductions,
    summed norm and gathered parameters give the single-process step of world*micro_steps*B."""
    params = fresh_init(MICRO, 0) + np.random.default_rng(4).normal(0, 0.05, layout(MICRO).total)
    n = world * micro_steps
    tokens, targets = batch(n)
    programs, backends = one_optimizer_step(1, 8, tokens, targets, params, world, micro_steps, zero, weight_decay=True)
    (single,), (one,) = one_optimizer_step(n, 8, tokens, targets, params, weight_decay=True)
    P = single.num_params
    for b in backends:
        np.testing.assert_allclose(b.host["params"][:P], one.host["params"][:P], rtol=1e-9, atol=1e-13)
    if zero:
        assert all(b.host["m"].size == programs[0].shard_elems for b in backends)
        assert programs[0].padded_params % (world * 128) == 0


@pytest.mark.parametrize("fused", [(), "all"], ids=["plain", "fused"])  # fused: FUSED_LN moves the proj biases' writers
def test_gradient_buckets_cover_every_parameter_once_after_its_last_writer(fused):
    from train.model import FUSED
    for zero, world in ((0, 1), (1, 3)):
        p = Program(preset("tiny"), 2, 8, zero=zero, world=world, bucket_elems=5_000, fused=FUSED if fused else ())
        covered = np.zeros(p.num_params, dtype=int)
        backward = p.reduced_backward
        assert isinstance(backward[-1], Join) and [s for s in backward if not isinstance(s, COLLECTIVES)] == p.backward
        written_at = {}
        for i, step in enumerate(backward):
            if isinstance(step, Reduce):
                for piece, root in step.pieces:
                    covered[piece.offset:piece.offset + piece.elems] += 1
                    if zero:
                        assert root == piece.offset // p.shard_elems == (piece.offset + piece.elems - 1) // p.shard_elems
                    assert all(written_at.get(j, -1) < i for j in range(piece.offset, piece.offset + piece.elems, 97))
            elif not isinstance(step, COLLECTIVES) and hasattr(step, "args"):
                for ref in step.args.values():
                    if ref.buffer == "grads":
                        for j in range(ref.offset, ref.offset + ref.elems, 97):
                            written_at[j] = i
        assert (covered == 1).all()
        assert sum(isinstance(s, Reduce) for s in backward) > 2  # the backward is split into buckets


def test_zero_1_shards_the_moments_and_the_update():
    P = layout(preset("tiny")).total
    covered = np.zeros(P, dtype=int)
    for rank in range(3):
        p = Program(preset("tiny"), 2, 8, zero=1, world=3, rank=rank, weight_decay=True)
        assert p.buffers["m"].elems == p.shard_elems == p.padded_params // 3 and p.shard_elems % 128 == 0
        for start, end, _ in p.update_runs():
            assert p.shard[0] <= start < end <= p.shard[1]
            covered[start:end] += 1
        assert isinstance(p.update[1], AllReduce) and isinstance(p.update[-1], AllGather)
    assert (covered == 1).all()


def test_the_bf16_program_binds_every_familys_bf16_contract_and_tracks_fp32():
    """At bf16 every call is wired to its family's bf16 contract (check_wiring would refuse a
    mismatched dtype or size), reads the bf16 copy of the weights, and a step through the
    references, with inputs rounded to bf16 where the GPU stores bf16, stays close to fp32."""
    config = preset("tiny")
    B, T = 2, 16
    rng = np.random.default_rng(0)
    params = fresh_init(config, 0)
    tokens, targets = (rng.integers(0, config.vocab_size, size=B * T) for _ in range(2))
    results = {}
    for precision in ("fp32", "bf16"):
        program = Program(config, B, T, "flash" if precision == "bf16" else "softmax", precision=precision)
        backend = ReferenceBackend(program)
        backend.host["params"][:program.num_params] = params
        if precision == "bf16":
            assert program.buffers["grads"].dtype == "bf16" and program.buffers["qkv"].dtype == "bf16"
            assert program.buffers["ln1_mean"].dtype == "f32" and program.buffers["m"].dtype == "f32"
            assert {c.precision for c in program.calls} == {"bf16"}
            assert all(ref.buffer != "params" for c in program.forward if hasattr(c, "args") for ref in c.args.values())
            backend.host["params_bf16"][:] = backend.host["params"]
        backend.host["tokens"][:] = tokens
        backend.host["targets"][:] = targets
        backend.host["optimizer_scalars"][:] = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
        backend.run(program.zero_grads + program.forward + program.loss + program.backward + program.update)
        results[precision] = backend
    fp, bf = results["fp32"], results["bf16"]
    assert abs(bf.host["losses"].mean() - fp.host["losses"].mean()) < 1e-2 * fp.host["losses"].mean()
    g32, g16 = fp.host["grads"], bf.host["grads"]
    assert np.abs(g16 - g32).max() < 0.1 * np.abs(g32).max()
    # the mixed-precision AdamW updated the fp32 master and wrote the same values into the bf16 copy
    np.testing.assert_allclose(bf.host["params_bf16"], bf.host["params"], rtol=0, atol=0)
    assert not np.allclose(bf.host["params"][:len(params)], params)


def test_attention_choices_that_do_not_exist_are_refused_before_any_gpu_work():
    from train.errors import TrainError
    config = preset("tiny")
    with pytest.raises(TrainError, match="cudnn needs --precision bf16"):
        Program(config, 1, 8, "cudnn")
    with pytest.raises(TrainError, match="needs --tf32"):
        Program(config, 1, 8, "flash", tf32=False)
    relu = Program(config, 1, 8, "relu", precision="bf16")  # the tensor-core ReLU versions, promoted at bf16
    assert {c.family for c in relu.calls if "attention" in c.family} == {"relu_attention_forward", "relu_attention_backward"}
    p = Program(config, 1, 8, "flash")
    assert {c.variant for c in p.calls if c.family.startswith("attention")} == {"tf32"}
    p = Program(config, 1, 8, "cudnn", precision="bf16")
    assert {c.variant for c in p.calls if c.family.startswith("attention")} == {"cudnn"}


@pytest.mark.parametrize("precision, B, T", [("fp32", 4, 1024), ("bf16", 16, 1024), ("fp32", 1, 5)])
def test_the_embedding_backward_reads_the_plan_from_buffers_of_its_contracts_sizes(precision, B, T):
    """role: one int per position; plan: plan_words(B*T, C) ints (the contract's P); both counted
    in the program's memory like any buffer, and accepted by check_wiring."""
    from references.encoder_backward import plan_words
    from train.backends import _family_sizes, check_wiring
    from train.model import Slice
    from workbench.family import Project
    config = preset("d12")
    p = Program(config, B, T, "flash" if precision == "bf16" else "softmax", precision=precision)
    (call,) = [c for c in p.calls if c.family == "encoder_backward"]
    words = plan_words(B * T, config.channels)
    assert call.args["inp"] == p.at("tokens")
    assert call.args["role"] == Slice("eb_role", 0, B * T) and call.args["plan"] == Slice("eb_plan", 0, words)
    assert p.buffers["eb_role"].dtype == p.buffers["eb_plan"].dtype == "i32"
    assert p.memory()["eb_role"] == 4 * B * T and p.memory()["eb_plan"] == 4 * words
    family = Project().family("encoder_backward")
    sizes = _family_sizes(family, call)
    assert family.env(sizes)["P"] == words
    check_wiring(family, call, sizes, {name: spec.dtype for name, spec in p.buffers.items()})


# -- the MLP's fc layer and GELU fused into their GEMMs' epilogues (Program(fused=FUSED_GELU)) -------------
from train.model import FUSED_GELU  # noqa: E402


def test_the_fused_mlp_makes_fewer_calls_over_the_same_buffers():
    """Fused: one call for fc + GELU (forward) and one for fcproj's input and weight gradients with
    the GELU's backward and fc's bias gradient (backward), 3 calls a layer fewer; the same buffers,
    bound with the same meaning (fch the GELU's input, fch_gelu its output, dfch the gradient at fch)."""
    plain, fused = Program(MICRO, 2, 8), Program(MICRO, 2, 8, fused=FUSED_GELU)
    L = MICRO.num_layers
    assert len(fused.forward) == len(plain.forward) - L and len(fused.backward) == len(plain.backward) - 2 * L
    assert fused.buffers == plain.buffers and fused.memory() == plain.memory()
    families = [c.family for c in fused.calls]
    assert families.count("matmul_forward_gelu") == families.count("matmul_backward_dgelu") == L
    assert "gelu_forward" not in families and "gelu_backward" not in families
    (fwd,) = [c for c in fused.forward if c.family == "matmul_forward_gelu" and c.label.startswith("layer 0")]
    assert (fwd.args["pre"], fwd.args["out"]) == (fused.at("fch", 0), fused.at("fch_gelu", 0))
    (bwd,) = [c for c in fused.calls if c.family == "matmul_backward_dgelu" and c.label.startswith("layer 0")]
    assert bwd.args["dpre"] == fused.at("dfch") and bwd.args["pre"] == fused.at("fch", 0)
    assert bwd.args["dpre_bias"] == fused.grad("fcb", 0) and bwd.args["dweight"] == fused.grad("fcprojw", 0)
    # fc's bias gradient is written by the fused call alone; fcproj's still by matmul_backward_bias
    writers = [c.family for c in fused.calls for ref in c.args.values() if ref == fused.grad("fcb", 0)]
    assert writers == ["matmul_backward_dgelu"]
    assert fused.family_sizes()["matmul_backward_dgelu"] == [{"B": 2, "T": 8, "C": 4 * MICRO.channels, "OC": MICRO.channels}]
    with pytest.raises(ValueError, match="fused may name"):
        Program(MICRO, 2, 8, fused=("gelu_forward",))


def run_plain_and_fused(fused, B=2, T=8, **kw):
    """One step (forward, loss, backward) through the references of the plain program and of
    Program(fused=fused, **kw), on the same parameters and batch: (the plain backend, the fused
    program, its backend, the NumPy GPT-2's gradients)."""
    plain, backend, params, tokens, targets = run_step(MICRO, B, T)
    program = Program(MICRO, B, T, fused=fused, **kw)
    fused_backend = ReferenceBackend(program)
    for name in ("params", "tokens", "targets"):
        fused_backend.host[name][:] = backend.host[name]
    backend.run(plain.forward + plain.loss + plain.backward)
    fused_backend.run(program.forward + program.loss + program.backward)
    want = gpt2_forward(params, MICRO, tokens, targets)
    return backend, program, fused_backend, gpt2_backward(params, MICRO, want["acts"])


@pytest.mark.parametrize("fused", [FUSED_GELU[:1], FUSED_GELU[1:], FUSED_GELU])
def test_the_fused_mlp_step_equals_the_numpy_gpt2(fused):
    """Through the references, the fused program computes the unfused one's step: the same
    activations and loss, every gradient equal to the NumPy GPT-2's."""
    backend, program, fused_backend, numpy_grads = run_plain_and_fused(fused)
    for name in ("fch", "fch_gelu", "residual3", "losses", "dfch", "dln", "grads"):
        np.testing.assert_allclose(fused_backend.host[name], backend.host[name], rtol=1e-12, atol=1e-14, err_msg=name)
    np.testing.assert_allclose(fused_backend.host["grads"], numpy_grads, rtol=1e-10, atol=1e-12)


def test_fused_two_micro_steps_of_b_equal_one_step_of_2b():
    """fc's bias gradient accumulates across micro-steps like every gradient, though cuBLASLt's
    epilogue writes its column sums: the fused family's contract adds them in (dpre_bias +=)."""
    params = fresh_init(MICRO, 0) + np.random.default_rng(1).normal(0, 0.05, layout(MICRO).total)
    tokens, targets = batch(4)
    (pa,), (a,) = one_optimizer_step(2, 8, tokens, targets, params, micro_steps=2, fused=FUSED_GELU)
    (pb,), (b,) = one_optimizer_step(4, 8, tokens, targets, params)
    fcb = pa.grad("fcb", 0)
    assert np.abs(a.view(fcb)).max() > 0
    np.testing.assert_allclose(a.host["grads"], b.host["grads"], rtol=1e-12, atol=1e-16)


# -- the projections' bias gradients summed by the layernorm backward before them (FUSED_LN) ----------------
from train.model import FUSED, FUSED_LN  # noqa: E402


@pytest.mark.parametrize("gelu", [(), FUSED_GELU])
def test_the_fused_layernorm_backward_takes_over_the_projections_bias_gradients(gelu):
    """With FUSED_LN, lnf's and every ln2's and ln1's backward but layer 0's ln1 (the embedding's
    gradient follows it, no projection) run the fused family, bound to the bias gradient of the
    projection below: attproj's of the same layer after ln2, fcproj's of the layer below after ln1,
    the last layer's fcproj after lnf. Those 2L matmul_backward_bias calls are gone, each of the
    2L bias gradients has exactly one writer, and the buffers are the same."""
    plain, fused = Program(MICRO, 2, 8, fused=gelu), Program(MICRO, 2, 8, fused=gelu + (FUSED_LN,))
    L = MICRO.num_layers
    assert len(fused.backward) == len(plain.backward) - 2 * L and fused.forward == plain.forward
    assert fused.buffers == plain.buffers
    lns = [c for c in fused.calls if c in fused.backward and c.family in ("layernorm_backward", FUSED_LN)]
    assert [c.family for c in lns] == [FUSED_LN] * (2 * L) + ["layernorm_backward"]
    assert lns[-1].label == "layer 0 ln1"
    want = [fused.grad("fcprojb", L - 1)] + [g for l in reversed(range(L))
                                             for g in (fused.grad("attprojb", l), fused.grad("fcprojb", l - 1))][:-1]
    assert [c.args["dproj_bias"] for c in lns[:-1]] == want
    for l in range(L):
        for name in ("attprojb", "fcprojb"):
            writers = [c.family for c in fused.calls for ref in c.args.values() if ref == fused.grad(name, l)]
            assert writers == [FUSED_LN], (name, l, writers)
    assert "matmul_backward_bias" in [c.family for c in fused.calls]  # qkv's bias keeps its own call
    with pytest.raises(ValueError, match="fused may name .*layernorm_backward_proj_bias"):
        Program(MICRO, 2, 8, fused=("layernorm_backward",))


@pytest.mark.parametrize("fused", [(FUSED_LN,), FUSED], ids=["ln", "all"])
def test_the_fused_layernorm_step_equals_the_numpy_gpt2(fused):
    """Through the references, the step with FUSED_LN computes the plain one's: every gradient
    equal to the NumPy GPT-2's, the projections' bias gradients among them."""
    backend, program, fused_backend, numpy_grads = run_plain_and_fused(fused)
    np.testing.assert_allclose(fused_backend.host["grads"], backend.host["grads"], rtol=1e-12, atol=1e-14)
    for name in ("attprojb", "fcprojb"):
        assert np.abs(fused_backend.view(program.grad(name, 0))).max() > 0, name
    np.testing.assert_allclose(fused_backend.host["grads"], numpy_grads, rtol=1e-10, atol=1e-12)


def test_fused_layernorm_two_ranks_equal_one_rank_of_2b():
    """On two ranks the bias gradients FUSED_LN sums are reduced like the rest (their buckets close
    after the layernorm backward that finishes them): both ranks' updated parameters are the one rank's."""
    params = fresh_init(MICRO, 0) + np.random.default_rng(1).normal(0, 0.05, layout(MICRO).total)
    tokens, targets = batch(4)
    programs, backends = one_optimizer_step(2, 8, tokens, targets, params, world=2, fused=FUSED)
    (single,), (one,) = one_optimizer_step(4, 8, tokens, targets, params)
    P = single.num_params
    for b in backends:
        np.testing.assert_allclose(b.host["params"][:P], one.host["params"][:P], rtol=1e-9, atol=1e-13)


def test_fused_layernorm_two_micro_steps_of_b_equal_one_step_of_2b():
    """The projections' bias gradients accumulate across micro-steps (dproj_bias +=)."""
    params = fresh_init(MICRO, 0) + np.random.default_rng(1).normal(0, 0.05, layout(MICRO).total)
    tokens, targets = batch(4)
    (pa,), (a,) = one_optimizer_step(2, 8, tokens, targets, params, micro_steps=2, fused=FUSED)
    (pb,), (b,) = one_optimizer_step(4, 8, tokens, targets, params)
    np.testing.assert_allclose(a.host["grads"], b.host["grads"], rtol=1e-12, atol=1e-16)


# -- the projections adding into the residual stream themselves (FUSED_RESIDUAL) ----------------------------
from train.model import FUSED_RESIDUAL  # noqa: E402


def test_the_fused_projections_write_the_stream_and_keep_no_output_of_their_own():
    """With FUSED_RESIDUAL each branch ends in one matmul_forward_residual call that adds the
    projection into the stream entering the branch, then a plain layernorm_forward of the new
    stream: no fused_residual_forward, no matmul_forward for attproj or fcproj, and the buffers
    attproj and fcproj (2 x L x B*T*C elements) are not declared. The backward is unchanged."""
    B, T, L, C = 2, 8, MICRO.num_layers, MICRO.channels
    plain, fused = Program(MICRO, B, T), Program(MICRO, B, T, fused=(FUSED_RESIDUAL,))
    assert len(fused.forward) == len(plain.forward) and fused.backward == plain.backward
    assert "fused_residual_forward" not in [c.family for c in fused.calls]
    assert set(plain.buffers) - set(fused.buffers) == {"attproj", "fcproj"}
    assert sum(plain.memory().values()) - sum(fused.memory().values()) == 2 * L * B * T * C * 4
    projections = [c for c in fused.forward if c.family == FUSED_RESIDUAL]
    assert len(projections) == 2 * L
    for l in range(L):
        att, fc = projections[2 * l], projections[2 * l + 1]
        entering = fused.at("encoded") if l == 0 else fused.at("residual3", l - 1)
        assert (att.args["out"], att.args["residual"], att.args["inp"]) == (fused.at("residual2", l), entering,
                                                                             fused.at("atty", l))
        assert (fc.args["out"], fc.args["residual"], fc.args["inp"]) == (fused.at("residual3", l),
                                                                        fused.at("residual2", l), fused.at("fch_gelu", l))
        assert att.sizes == {"B": B, "T": T, "C": C, "OC": C} and fc.sizes == {"B": B, "T": T, "C": 4 * C, "OC": C}
        # the call right after each projection normalizes the stream it wrote
        after = [fused.forward[fused.forward.index(c) + 1] for c in (att, fc)]
        assert [c.family for c in after] == ["layernorm_forward"] * 2
        assert [c.args["inp"] for c in after] == [att.args["out"], fc.args["out"]]
        assert after[0].args["out"] == fused.at("ln2", l)
        assert after[1].args["out"] == (fused.at("lnf") if l == L - 1 else fused.at("ln1", l + 1))


@pytest.mark.parametrize("recompute", [0, 2])
def test_the_fused_projections_step_equals_the_numpy_gpt2(recompute):
    """Through the references, the step with FUSED_RESIDUAL computes the plain one's: the same
    stream, layernorm outputs and loss, every gradient equal to the NumPy GPT-2's; with
    --recompute 2 the layernorm outputs are refilled from the stream the projections wrote."""
    backend, program, fused_backend, numpy_grads = run_plain_and_fused((FUSED_RESIDUAL,), recompute=recompute)
    # (under --recompute 2 lnf ends holding layer 0's refilled ln1: RECOMPUTED)
    for name in ("residual2", "residual3", "losses", "grads") + (("lnf",) if recompute == 0 else ()):
        np.testing.assert_allclose(fused_backend.host[name], backend.host[name], rtol=1e-12, atol=1e-14, err_msg=name)
    np.testing.assert_allclose(fused_backend.host["grads"], numpy_grads, rtol=1e-10, atol=1e-12)


def test_only_the_lm_head_promises_a_zero_bias_and_its_bias_is_the_zeros_buffer():
    """GPT-2's lm head has no bias: its matmul_forward call binds the `zeros` buffer and says so
    (zero_bias = 1, which lets a version leave the bias out); every other matmul_forward call adds
    its real bias. Through the references the step is the same either way."""
    p = Program(MICRO, 2, 8)
    calls = [c for c in p.forward if isinstance(c, Call) and c.family == "matmul_forward"]
    promised = [c for c in calls if c.params.get("zero_bias")]
    assert [c.label for c in promised] == ["lm head"] and promised[0].args["bias"] == p.at("zeros")
    assert all("zero_bias" not in c.params for c in calls if c is not promised[0])
    assert "zeros" not in {ref.buffer for c in p.calls for name, ref in c.args.items()
                           if c is not promised[0] or name != "bias"}


# -- qkv's bias gradient from attention's invariances (FUSED_QKV_BIAS) ------------------------------------
from train.model import FUSED_QKV_BIAS, Call  # noqa: E402


def test_the_qkv_bias_call_reads_the_query_third_and_attprojs_bias_gradient_of_its_layer():
    """With FUSED_QKV_BIAS each layer's qkv matmul_backward_bias is replaced, right after qkv's
    matmul_backward, by one qkv_bias_backward call bound to that layer's qkv bias gradient, dqkv,
    attproj's bias gradient and attproj's weight; nothing else changes. ReLU attention refuses it."""
    B, T, L, C = 2, 8, MICRO.num_layers, MICRO.channels
    plain, fused = Program(MICRO, B, T), Program(MICRO, B, T, fused=(FUSED_QKV_BIAS,))
    assert fused.forward == plain.forward and fused.buffers == plain.buffers
    assert len(fused.backward) == len(plain.backward)
    backward = [c for c in fused.backward if isinstance(c, Call)]
    calls = [c for c in backward if c.family == FUSED_QKV_BIAS]
    assert [c.label for c in calls] == [f"layer {l} qkv bias" for l in reversed(range(L))]
    for l, call in zip(reversed(range(L)), calls):
        assert call.sizes == {"B": B, "T": T, "C": C}
        assert call.args == {"dbias": fused.grad("qkvb", l), "dqkv": fused.at("dqkv"),
                             "dproj_bias": fused.grad("attprojb", l), "proj_weight": fused.param("attprojw", l)}
        before = fused.backward[fused.backward.index(call) - 1]
        assert (before.family, before.label) == ("matmul_backward", f"layer {l} qkv")
    writers = [c.family for c in backward for ref in c.args.values() if ref == fused.grad("qkvb", 0)]
    assert writers == [FUSED_QKV_BIAS]
    assert all(c.args["dout"] != fused.at("dqkv") for c in backward if c.family == "matmul_backward_bias")
    with pytest.raises(ValueError, match="softmax attention only"):
        Program(MICRO, B, T, "relu", fused=(FUSED_QKV_BIAS,))


def test_fused_for_gives_each_attention_the_families_its_program_accepts():
    """The trainer and promote ask fused_for which fused families an attention can use: every one
    but qkv_bias_backward under ReLU attention, and a Program takes what it gives."""
    from train.model import fused_for
    for attention in ATTENTION:
        got = fused_for(attention)
        assert got == (tuple(f for f in FUSED if f != FUSED_QKV_BIAS) if attention == "relu" else FUSED)
        Program(MICRO, 2, 8, attention, precision="bf16", fused=got)
    assert fused_for("relu", (FUSED_QKV_BIAS, FUSED_LN)) == (FUSED_LN,)


@pytest.mark.parametrize("fused", [(FUSED_QKV_BIAS,), FUSED], ids=["qkv_bias", "all"])
def test_the_qkv_bias_step_equals_the_numpy_gpt2(fused):
    """Through the references the step with FUSED_QKV_BIAS has the plain step's gradients: the key
    bias's is exactly zero (the NumPy GPT-2's is rounding noise), the value bias's attproj's bias
    gradient times its weight, the query bias's the same column sums."""
    backend, program, fused_backend, numpy_grads = run_plain_and_fused(fused)
    C = MICRO.channels
    for l in range(MICRO.num_layers):
        got = fused_backend.view(program.grad("qkvb", l))
        assert np.abs(got[:C]).max() > 0 and np.abs(got[2 * C:]).max() > 0
        np.testing.assert_array_equal(got[C:2 * C], 0.0)
    np.testing.assert_allclose(fused_backend.host["grads"], backend.host["grads"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(fused_backend.host["grads"], numpy_grads, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("world, micro_steps", [(2, 1), (1, 2), (2, 2)])
def test_the_qkv_bias_gradient_is_set_from_the_accumulated_and_unreduced_attproj_bias(world, micro_steps):
    """The value third is set (not added) from attproj's bias gradient as accumulated so far, so
    two micro-steps of B give one step of 2B; on many ranks the bucket holding attproj's bias
    gradient is reduced only after the qkv bias call has read it (else the value third would be
    the ranks' sum, reduced a second time): the reduced gradients equal one rank's at world x B."""
    params = fresh_init(MICRO, 0) + np.random.default_rng(1).normal(0, 0.05, layout(MICRO).total)
    n = world * micro_steps
    tokens, targets = batch(2 * n)
    programs, backends = one_optimizer_step(2, 8, tokens, targets, params, world=world, micro_steps=micro_steps,
                                            fused=(FUSED_QKV_BIAS,), bucket_elems=1)  # a Reduce after every call that completes a region
    (single,), (one,) = one_optimizer_step(2 * n, 8, tokens, targets, params)
    for b in backends:
        np.testing.assert_allclose(b.host["grads"], one.host["grads"], rtol=1e-10, atol=1e-14)
    if world > 1:
        steps = programs[0].reduced_backward
        for l in range(MICRO.num_layers):
            (call,) = [i for i, c in enumerate(steps) if isinstance(c, Call) and c.label == f"layer {l} qkv bias"]
            (reduce,) = [i for i, c in enumerate(steps) if isinstance(c, Reduce)
                         and any(r.overlaps(programs[0].grad("attprojb", l)) for r, _ in c.pieces)]
            assert reduce > call


# -- --recompute: activations refilled in the backward instead of kept per layer ---------------------------
from train.backends import GiB, HEADROOM, check_fits  # noqa: E402
from train.errors import TrainError  # noqa: E402
from train.model import RECOMPUTED, Call, memory_groups  # noqa: E402
from workbench.family import Project  # noqa: E402


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recompute_keeps_fewer_activation_bytes_and_nothing_else_changes(precision):
    config = preset("d12")
    B, T, L, C = 4, 1024, config.num_layers, config.channels
    size = 2 if precision == "bf16" else 4
    BTC = B * T * C * size
    attention = "flash" if precision == "bf16" else "softmax"
    p0, p1, p2 = (Program(config, B, T, attention, precision=precision, recompute=r) for r in (0, 1, 2))
    m0, m1, m2 = (p.memory() for p in (p0, p1, p2))
    assert m0["fch_gelu"] == L * 4 * BTC and m1["fch_gelu"] == m2["fch_gelu"] == 4 * BTC
    assert m1["ln1"] == m1["ln2"] == L * BTC
    assert "ln1" not in m2 and m2["ln2"] == BTC  # ln1 lives in lnf, ln2 in one layer's worth
    assert sum(m0.values()) - sum(m1.values()) == (L - 1) * 4 * BTC
    assert sum(m1.values()) - sum(m2.values()) == (2 * L - 1) * BTC
    g0, g2 = memory_groups(m0), memory_groups(m2)
    assert {k: v for k, v in g0.items() if k != "activations"} == {k: v for k, v in g2.items() if k != "activations"}
    assert g0["activations"] - g2["activations"] == sum(m0.values()) - sum(m2.values())
    assert [p0.memory_with(r) for r in (0, 1, 2)] == [sum(m.values()) for m in (m0, m1, m2)]
    assert [c.label for c in p2.forward] == [c.label for c in p0.forward]  # the forward is the same calls


def recompute_twin(program, kept, call):
    """The call of `kept` (the recompute=0 program) that computes what `call` of `program` does."""
    layer, name = call.label.split()[1], call.label.split()[2]
    return kept._refill(name, int(layer))


@pytest.mark.parametrize("recompute", [1, 2])
@pytest.mark.parametrize("attention, precision", [("softmax", "fp32"), ("relu", "fp32"), ("flash", "bf16")])
def test_every_read_of_a_recomputed_buffer_sees_the_value_the_keeping_program_reads(recompute, attention, precision):
    """Dataflow: walk forward, loss and backward; each write into a buffer that holds a recomputed
    activation records which value (the recompute=0 program's slice for it) the buffer now holds;
    each read must find there the value the recompute=0 program reads at that call. So every refill
    comes before its readers and nothing overwrites it while they need it."""
    config = preset("tiny")
    kept = Program(config, 2, 16, attention, precision=precision)
    p = Program(config, 2, 16, attention, precision=precision, recompute=recompute)
    calls = [c for c in p.forward + p.loss + p.backward if isinstance(c, Call)]
    refills = [c for c in calls if c.label.endswith("(recomputed)")]
    assert len(refills) == config.num_layers * len(RECOMPUTED[recompute])
    assert all(any(c is r for c in p.backward) for r in refills)
    others = [c for c in calls if not any(c is r for r in refills)]
    kept_calls = [c for c in kept.forward + kept.loss + kept.backward if isinstance(c, Call)]
    assert [c.label for c in others] == [c.label for c in kept_calls]
    twins = {id(c): k for c, k in zip(others, kept_calls)}
    twins.update({id(c): recompute_twin(p, kept, c) for c in refills})
    homes, project, holds, reads = set(p.recomputed.values()), Project(), {}, 0
    for call in calls:
        twin, args = twins[id(call)], project.family(call.family).args_for(call.precision)
        for a in args:
            ref = call.args[a.name]
            if a.is_input and ref.buffer in homes:
                assert holds.get(ref) == twin.args[a.name], f"{call.label} reads {a.name} from {ref.buffer} " \
                                                            f"holding {holds.get(ref)}, not {twin.args[a.name]}"
                reads += 1
        for a in args:
            if a.is_output and call.args[a.name].buffer in homes:
                holds[call.args[a.name]] = twin.args[a.name]
    assert reads >= 2 * config.num_layers * len(RECOMPUTED[recompute])  # the forward's reader and the backward's


def one_step(program, params, tokens, targets):
    backend = ReferenceBackend(program)
    backend.host["params"][:] = params
    if "params_bf16" in backend.host:
        backend.host["params_bf16"][:] = params
    backend.host["tokens"][:], backend.host["targets"][:] = tokens, targets
    backend.host["optimizer_scalars"][:] = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    backend.run(program.zero_grads + program.forward + program.loss + program.backward)
    out = {"losses": backend.host["losses"].copy(), "grads": backend.host["grads"].copy()}
    backend.run(program.update)
    out["params"] = backend.host["params"].copy()
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_through_the_references_is_identical_at_every_recompute(precision):
    """Losses, gradients and updated parameters equal bit for bit at --recompute 0, 1 and 2 (the
    refills re-run the forward's own computations on the same inputs); and leaving the refills out
    of the recompute=2 backward (stale buffers: the layer above's values) changes the gradients."""
    config, B, T = preset("tiny"), 2, 16
    rng = np.random.default_rng(5)
    params = fresh_init(config, 0) + rng.normal(0, 0.02, layout(config).total)
    tokens, targets = (rng.integers(0, config.vocab_size, B * T) for _ in range(2))
    attention = "flash" if precision == "bf16" else "softmax"
    runs = [one_step(Program(config, B, T, attention, precision=precision, recompute=r), params, tokens, targets)
            for r in (0, 1, 2)]
    for r, run in enumerate(runs[1:], 1):
        for key in ("losses", "grads", "params"):
            assert np.array_equal(run[key], runs[0][key]), f"--recompute {r}: {key} differ"
    stale = Program(config, B, T, attention, precision=precision, recompute=2)
    stale.backward = [c for c in stale.backward if not getattr(c, "label", "").endswith("(recomputed)")]
    assert not np.array_equal(one_step(stale, params, tokens, targets)["grads"], runs[0]["grads"])


def test_a_batch_that_does_not_fit_is_refused_before_allocating_with_what_would_fit():
    config, B, T = preset("d12"), 64, 1024
    p = Program(config, B, T, precision="fp32")
    need = {r: p.memory_with(r) + HEADROOM for r in (0, 1, 2)}
    check_fits(p, 0, need[0], 80 * 2**30)  # exactly enough: no error
    with pytest.raises(TrainError) as e:
        check_fits(p, 0, need[0] - 1, 80 * 2**30)
    line = str(e.value)
    assert "\n" not in line and "B=64, T=1024" in line and f"needs {need[0] / GiB:.1f} GiB" in line
    assert f"pass --recompute 1 (it needs {need[1] / GiB:.1f} GiB)" in line and "smaller -b" in line
    with pytest.raises(TrainError, match="pass --recompute 2"):
        check_fits(p, 0, need[2], 80 * 2**30)
    with pytest.raises(TrainError, match=r"give a smaller -b .*; --recompute 2 alone needs"):
        check_fits(p, 0, need[2] - 1, 80 * 2**30)
    p2 = Program(config, B, T, precision="fp32", recompute=2)
    with pytest.raises(TrainError) as e:
        check_fits(p2, 2**20, need[2], 80 * 2**30)  # the scratch counts too
    assert "--recompute 2 needs" in str(e.value) and "alone" not in str(e.value)

"""The CUDA trainer against the same GPT-2 in PyTorch (TF32 off), on the GPU (marked gpu).

Figures are printed (run with -s) so they can be quoted: max |error| of logits, loss and every
parameter gradient, and the losses of 10 AdamW steps side by side. The recompute test runs the
backend with its side stream (train/streams.py, `train --side-stream`).
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

B, T = 4, 64
LR = 1e-4


@pytest.fixture(scope="module")
def world():
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from train.config import preset
    from train.params import fresh_init
    config = preset("d12")
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, config.vocab_size, (B, T)), rng.integers(0, config.vocab_size, (B, T)))
               for _ in range(10)]
    return {"drv": drv, "torch": torch, "config": config, "params": fresh_init(config, 0), "batches": batches,
            "stream": drv.Stream()}


# The MLP's fc layer and GELU as separate calls, and fused into their GEMMs' epilogues; the
# projections adding into the residual stream themselves (where the fused families are promoted at
# fp32: the trainer uses them then).
FUSED = pytest.mark.parametrize("fused", [(), ("matmul_forward_gelu", "matmul_backward_dgelu"),
                                          ("matmul_forward_residual",)], ids=["unfused", "fused", "residual"])


def make_backend(world, params, fused=()):
    from train.model import Program
    from train.backends import KernelBackend, PromotedSet
    promoted = PromotedSet()
    missing = [f for f in fused if not promoted.serves(f)]
    if missing:
        pytest.skip(f"no fp32 version of {', '.join(missing)} is promoted")
    program = Program(world["config"], B, T, tf32=False, fused=fused)
    backend = KernelBackend(program, promoted)
    backend.upload("params", params.astype(np.float32))
    return program, backend


def feed(backend, x, y, step):
    from references.encoder_backward import encoder_backward_plan
    backend.upload("tokens", x.astype(np.int32).ravel())
    backend.upload("targets", y.astype(np.int32).ravel())
    role, plan = encoder_backward_plan(x, backend.program.config.channels)  # as the trainer does per micro-step
    backend.upload("eb_role", role)
    backend.upload("eb_plan", plan)
    backend.upload("optimizer_scalars", np.array([LR, 0.9, 0.999, 1e-8, 0.0, step + 1], dtype=np.float32))


@FUSED
def test_logits_loss_and_every_gradient_match_pytorch(world, fused):
    from train.gpt2_torch import GPT, forward_backward
    config, stream = world["config"], world["stream"]
    program, backend = make_backend(world, world["params"], fused)
    x, y = world["batches"][0]
    feed(backend, x, y, 0)
    backend.run(program.forward, stream)
    stream.synchronize()
    logits = backend.download("logits").reshape(B, T, config.padded_vocab_size)
    backend.run(program.zero_grads + program.loss + program.backward, stream)
    stream.synchronize()
    loss = float(backend.download("losses").astype(np.float64).mean())
    grads = backend.download("grads").astype(np.float64)

    model = GPT.from_flat(config, world["params"], device="cuda")
    t_logits, t_loss, t_grads = forward_backward(model, x, y)
    errors = {"logits": float(np.abs(logits - t_logits).max()), "loss": abs(loss - t_loss),
              "grads": float(np.abs(grads - t_grads).max())}
    from train.params import layout
    for name, t in layout(config).tensors.items():
        errors[f"grad {name}"] = float(np.abs(grads[t.offset:t.end] - t_grads[t.offset:t.end]).max())
    print("\nmax |ours - pytorch| (TF32 off):", {k: f"{v:.2e}" for k, v in errors.items()})
    assert errors["loss"] < 1e-2 and errors["logits"] < 1e-2 and errors["grads"] < 1e-2, errors


@FUSED
def test_ten_adamw_steps_give_the_same_losses(world, fused):
    from train.gpt2_torch import GPT
    torch, config, stream = world["torch"], world["config"], world["stream"]
    program, backend = make_backend(world, world["params"], fused)
    ours = []
    for step, (x, y) in enumerate(world["batches"]):
        feed(backend, x, y, step)
        backend.run(program.zero_grads + program.forward + program.loss + program.backward + program.update, stream)
        stream.synchronize()
        ours.append(float(backend.download("losses").astype(np.float64).mean()))
    model = GPT.from_flat(config, world["params"], device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    theirs = []
    for x, y in world["batches"]:
        opt.zero_grad(set_to_none=True)
        _, loss = model(torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        theirs.append(float(loss.item()))
    print("\nstep  ours        pytorch     |diff|")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{i + 1:4d}  {a:.6f}  {b:.6f}  {abs(a - b):.2e}")
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-2
    assert ours[-1] < ours[0], "ten steps on a repeating batch set should lower the loss"


def test_a_saved_and_reloaded_checkpoint_gives_the_identical_next_loss(world, tmp_path):
    from train import formats
    config, stream = world["config"], world["stream"]
    program, backend = make_backend(world, world["params"])
    for step in range(2):
        feed(backend, *world["batches"][step], step)
        backend.run(program.zero_grads + program.forward + program.loss + program.backward + program.update, stream)
    stream.synchronize()
    path = formats.write_checkpoint(tmp_path / "ckpt.bin", config, backend.download("params"))
    feed(backend, *world["batches"][2], 2)
    backend.run(program.forward + program.loss, stream)
    stream.synchronize()
    continued = backend.download("losses").copy()
    loaded_config, loaded = formats.read_checkpoint(path)
    assert loaded_config == config
    program2, ops2 = make_backend(world, loaded)
    feed(ops2, *world["batches"][2], 2)
    ops2.run(program2.forward + program2.loss, stream)
    stream.synchronize()
    assert np.array_equal(ops2.download("losses"), continued)


def test_the_step_graph_replays_the_same_step(world):
    """A captured graph computes exactly what the eager launches compute."""
    from train.backends import Graph
    stream = world["stream"]
    losses = []
    for use_graph in (False, True):
        program, backend = make_backend(world, world["params"])
        feed(backend, *world["batches"][0], 0)
        enqueue = lambda s: backend.run(program.forward + program.loss, s)
        if use_graph:
            Graph(stream, enqueue).launch(stream)
        else:
            enqueue(stream)
        stream.synchronize()
        losses.append(backend.download("losses"))
    assert np.array_equal(losses[0], losses[1])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recompute_gives_bit_identical_steps_in_fewer_bytes(world, precision):
    """--recompute 1 refills GELU's output in the backward with gelu_forward, 2 also the layernorm
    outputs with the forward's own layernorm calls: on the deterministic kernel set (the families
    that add with atomics replaced by their stand-ins), five AdamW steps give the same losses,
    gradients and parameters, bit for bit, at 0, 1 and 2."""
    from train.model import Program
    from train.backends import KernelBackend, PromotedSet
    stream, runs = world["stream"], {}
    attention = "flash" if precision == "bf16" else "softmax"
    for r in (0, 1, 2):
        program = Program(world["config"], B, T, attention, tf32=False, precision=precision, recompute=r)
        backend = KernelBackend(program, PromotedSet(deterministic=True), side_stream=True)
        backend.upload("params", world["params"].astype(np.float32))
        if precision == "bf16":
            backend.upload("params_bf16", world["params"].astype(np.float32))
        losses = []
        for step, (x, y) in enumerate(world["batches"][:5]):
            feed(backend, x, y, step)
            backend.run(program.zero_grads + program.forward + program.loss + program.backward + program.update, stream)
            stream.synchronize()
            losses.append(backend.download("losses"))
        runs[r] = {"losses": np.array(losses), "grads": backend.download("grads"), "params": backend.download("params"),
                   "bytes": sum(program.memory().values())}
        del backend
    print(f"\n{precision} mean loss per step at --recompute 0:", runs[0]["losses"].mean(axis=1).round(6).tolist())
    print("buffers (MiB) at 0, 1, 2:", [round(runs[r]["bytes"] / 2**20, 1) for r in (0, 1, 2)])
    for r in (1, 2):
        for key in ("losses", "grads", "params"):
            assert np.array_equal(runs[r][key], runs[0][key]), f"--recompute {r}: {key} differ"
    assert runs[0]["bytes"] > runs[1]["bytes"] > runs[2]["bytes"]


@pytest.mark.parametrize("attention", ["cudnn", "flash"])
def test_the_qkv_bias_gradient_through_attproj_matches_the_column_sums_of_dqkv_in_bf16(world, attention):
    """The bf16 step with qkv_bias_backward (FUSED_QKV_BIAS: the query third of dqkv summed, the key
    third zero, the value third attproj's bias gradient times its weight) against the same step with
    matmul_backward_bias summing all of dqkv, on the GPU's own attention backward: every layer's query
    third and value third within bf16's rounding, the key third exactly zero where the sums are
    rounding noise, and every other gradient the same within the atomics' last bits."""
    from train.model import FUSED, FUSED_QKV_BIAS, Program
    from train.backends import KernelBackend, PromotedSet
    promoted = PromotedSet()
    if not promoted.serves(FUSED_QKV_BIAS, "bf16"):
        pytest.skip("no bf16 version of qkv_bias_backward is promoted")
    config, stream, (x, y) = world["config"], world["stream"], world["batches"][0]
    C, grads = config.channels, {}
    for name in ("sums", "fused"):
        fused = tuple(f for f in FUSED if promoted.serves(f, "bf16") and (name == "fused" or f != FUSED_QKV_BIAS))
        program = Program(config, B, T, attention, precision="bf16", fused=fused)
        backend = KernelBackend(program, promoted)
        backend.upload("params", world["params"].astype(np.float32))
        backend.upload("params_bf16", world["params"].astype(np.float32))
        feed(backend, x, y, 0)
        backend.run(program.zero_grads + program.forward + program.loss + program.backward, stream)
        stream.synchronize()
        grads[name] = backend.download("grads").astype(np.float64)
        del backend
    sums, fused = grads["sums"], grads["fused"]
    rest = np.ones(sums.size, dtype=bool)
    for l in range(config.num_layers):
        s = program.grad("qkvb", l)
        a, b = sums[s.offset:s.offset + s.elems], fused[s.offset:s.offset + s.elems]
        rest[s.offset:s.offset + s.elems] = False
        q, v = np.abs(a[:C]).max(), np.abs(a[2 * C:]).max()
        if l in (0, config.num_layers - 1):
            print(f"\nlayer {l}: |query| {q:.3g} err {np.abs(b[:C] - a[:C]).max():.3g}; key sums |max| "
                  f"{np.abs(a[C:2 * C]).max():.3g}, fused 0; |value| {v:.3g} err {np.abs(b[2 * C:] - a[2 * C:]).max():.3g}")
        assert q > 0 and v > 0
        assert np.abs(b[:C] - a[:C]).max() <= 1e-2 * q, l
        np.testing.assert_array_equal(b[C:2 * C], 0.0)
        assert np.abs(a[C:2 * C]).max() <= 0.1 * q, l  # the unfused key sums are noise beside the query's
        assert np.abs(b[2 * C:] - a[2 * C:]).max() <= 2e-2 * v, l
    assert np.abs(fused[rest] - sums[rest]).max() <= 1e-2 * np.abs(sums[rest]).max()


def test_the_lm_head_does_not_read_its_zero_bias_where_the_promoted_version_may_skip_it(world):
    """The lm head's call promises a zero bias (zero_bias = 1). Where the promoted bf16
    matmul_forward uses the promise (a launch step chosen by zero_bias, matmul_forward 11), the
    bf16 forward gives the same logits, bit for bit, after the bias buffer is filled with NaN:
    the bias is not read at all."""
    from train.model import Program
    from train.backends import KernelBackend, PromotedSet
    promoted = PromotedSet()
    version = promoted.version("matmul_forward", "bf16")
    if not any(s.when and "zero_bias" in s.when for s in version.steps):
        pytest.skip(f"the promoted bf16 {version.label} adds the bias whatever the call says")
    config, stream, (x, y) = world["config"], world["stream"], world["batches"][0]
    program = Program(config, B, T, "cudnn", precision="bf16")
    backend = KernelBackend(program, promoted)
    backend.upload("params", world["params"].astype(np.float32))
    backend.upload("params_bf16", world["params"].astype(np.float32))
    feed(backend, x, y, 0)
    logits = []
    for fill in (0.0, np.nan):
        backend.upload("zeros", np.full(config.padded_vocab_size, fill, dtype=np.float32))
        backend.run(program.forward, stream)
        stream.synchronize()
        logits.append(backend.download("logits"))
    assert np.isfinite(logits[0]).all() and np.array_equal(logits[0], logits[1])

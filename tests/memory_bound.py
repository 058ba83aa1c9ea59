"""Checks shared by the memory-bound versions built to close the last few percent to a copy's
speed (encoder_forward 6 and 7, layernorm_forward 10, fused_residual_forward 6): the trainer's
sizes taken, and the launch shape their lesson rests on. Each family's test file calls them."""

import re

from workbench import expr


def bounds(source: str) -> dict[str, tuple[int, int]]:
    """kernel name -> (__launch_bounds__ max threads, min blocks)."""
    found = re.findall(r"__launch_bounds__\((\d+),\s*(\d+)\)\s*\n?\s*(\w+)\s*\(", source)
    return {kernel: (int(t), int(b)) for t, b, kernel in found}


def assert_takes_the_trainers_sizes(v):
    """C = 768..1600, T <= 1024, B <= 32."""
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 1), (4, 1024), (8, 1024), (32, 1024), (5, 77)):
            sizes = {"B": B, "T": T, "C": C, "V": 50257}
            assert not v.unmet({k: sizes[k] for k in v.family.sizes}), (C, B, T)


def assert_one_resident_wave(v):
    """The grid never asks for more blocks than the launch bounds guarantee resident (else a
    second, mostly empty wave would run after the first), and at the default sizes it fills
    at least 90% of them."""
    launch_bounds = bounds(v.path.read_text())
    sizes = v.family.default_sizes
    for bs in v.block_sizes:
        env = v.family.env(sizes, bs)
        env["SMS"] = 132
        steps = [s for s in v.steps if s.when is None or expr.evaluate(s.when, env)]
        assert len(steps) == 1
        step = steps[0]
        max_threads, min_blocks = launch_bounds[step.name]
        assert bs <= max_threads
        resident = 132 * (max_threads * min_blocks // bs)
        grid = expr.evaluate_int(step.grid[0], env, "grid")
        assert 0.9 * resident <= grid <= resident, (bs, grid, resident)
        # block 64 at 1024 threads an SM is 16 blocks: under the 32-block limit of an SM
        assert max_threads * min_blocks // bs <= 32


def assert_every_warp_gets_two_rows(v):
    """A pair of rows per warp at 8x1024x768: 4096 warps, all of the input requested by the first
    loads."""
    for bs in v.block_sizes:
        env = v.family.env(v.family.default_sizes, bs)
        env["SMS"] = 132
        step = next(s for s in v.steps if s.when is None or expr.evaluate(s.when, env))
        assert expr.evaluate_int(step.grid[0], env, "grid") * (bs // 32) == 4096, (v.label, bs)

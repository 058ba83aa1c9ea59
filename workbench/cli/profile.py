"""profile: versions of a family under Nsight Compute (ncu), side by side."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape

from .. import report
from ..errors import SizesError
from ..family import Project
from ..files import write_text_atomic
from ..profile import DEFAULT_TIMEOUT
from .app import console, err_console, refuse_unmet, writable_file


@click.command()
@click.argument("family")
@click.argument("versions", nargs=-1)
@click.option("--sizes", help="Profile at these sizes, e.g. B=4,T=2048,C=1024 (default: the family's timed sizes).")
@click.option("--block-size", type=int,
              help="The block size to launch every version with. Default: the first its header lists (its preferred).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed of the inputs.")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=click.FloatRange(min=1),
              help="Seconds a version may take under ncu (compile, inputs, the profiled replays).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write every metric and rule as JSON.")
@click.option("--force", is_flag=True, help="Replace an existing --json file.")
@click.pass_obj
def profile(project: Project, family, versions, sizes, block_size, seed, timeout, json_path, force):
    """Run versions (default: all of the family's) under Nsight Compute at the timed sizes and
    show them side by side, one column per version, a line per kernel where a version launches
    several (its library calls' kernels too).

    \b
    duration            the kernel's time on the GPU (gpu__time_duration)
    DRAM throughput     DRAM traffic as a share of its peak (near 100%: memory-bound, done)
    SM throughput       the busiest SM unit or pipeline, as a share of its peak
    achieved occupancy  warps resident per SM on average, as a share of the SM's maximum
    registers / thread  per thread, as launched (ptxas's count)
    L2 hit rate         the share of L2 sector lookups that hit
    stall 1-3           what warps waited on most: cycles stalled per issued instruction, and
                        that as a share of all the cycles between two issues (long_scoreboard:
                        a global or local load; lg_throttle: the load/store queue is full;
                        barrier: __syncthreads; short_scoreboard: shared memory or MUFU...)
    Then what ncu's rules flag, each with its estimate of the time there is to gain.

    Under ncu the SM clock is locked to base and the caches are flushed before each kernel:
    durations are longer than `workbench run`'s, for comparing versions with each other.

    \b
    workbench profile layernorm_forward 3 4 6
    workbench profile matmul_forward 5 --sizes B=8,T=1024 --json prof.json
    """
    from ..bench import require_pycuda
    from ..profile import find_ncu, ncu_version, profile_versions, to_json
    fam = project.family(family)
    chosen = [fam.version(v) for v in versions] if versions else fam.versions
    at = fam.parse_sizes(sizes)  # a bad --sizes fails before any work
    for v in chosen:
        if block_size is not None and (why := v.unlisted_block_sizes([block_size])):
            raise SizesError(why)
        refuse_unmet(v, at)
    writable_file(json_path, force)
    ncu = find_ncu()
    require_pycuda()
    with err_console.status("starting") as status:
        profiles = profile_versions(project.root, chosen, at, block_size, seed, timeout,
                                    on_version=lambda v: status.update(escape(f"{v.label}: under ncu")))
    version = ncu_version(ncu)
    console.print(report.profile_report(profiles, version, at))
    if json_path:
        write_text_atomic(json_path, json.dumps(to_json(profiles, at, version), indent=1))
        console.print(f"profile written to {json_path}")
    if any(p.status != "profiled" for p in profiles):
        sys.exit(1)


commands = [profile]

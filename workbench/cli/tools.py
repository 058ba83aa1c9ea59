"""The tools around the core loop (kernels.py): sanitize, doctor, compare, plot, new. Thin like
every verb: check the options, call the library, print with report.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.markup import escape

from .. import report
from ..errors import UsageError
from ..family import Project
from ..files import unwritable_folder
from .app import console, err_console, progress_bar


@click.command()
@click.argument("family", required=False)
@click.argument("version", required=False)
@click.option("--tool", "tools", multiple=True, type=click.Choice(["memcheck", "racecheck", "initcheck", "synccheck"]),
              help="Only this compute-sanitizer tool (repeatable). Default: all four.")
@click.option("--parallel", default=4, show_default=True, type=click.IntRange(1, 64), help="Sanitized jobs at a time.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1), help="Seconds per job.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write the findings here (rewritten after each one: a run cut short keeps what it found).")
@click.option("--force", is_flag=True, help="Replace an existing --json file.")
@click.pass_obj
def sanitize(project: Project, family, version, tools, parallel, timeout, json_path, force):
    """Run versions under compute-sanitizer (memcheck, racecheck, initcheck, synccheck) at the
    family's small test sizes, check only; a table per tool. Exits non-zero if any is not clean.

    \b
    workbench sanitize                        every version of every family
    workbench sanitize layernorm_forward 6 --tool memcheck
    """
    import json

    from ..bench import Options, Session, require_pycuda
    from .app import writable_file
    from ..files import write_text_atomic
    from ..sanitize import TOOLS, sanitize as run_sanitize, sanitizer, to_json
    writable_file(json_path, force)
    if version and not family:
        raise UsageError("give FAMILY before VERSION")
    fams = [project.family(family)] if family else project.families()
    versions = [fams[0].version(version)] if version else [v for f in fams for v in f.versions]
    tools = tools or TOOLS
    sanitizer()  # missing tool: one line, before any work
    require_pycuda()
    with Session(project, Options(seeds=1, time=False)) as session, progress_bar() as progress:
        task = progress.add_task("preparing", total=len(versions) * len(tools))
        session.progress = lambda text: progress.update(task, description=escape(text))
        device = session.device()["device"]
        found = []

        def done(finding):
            found.append(finding)
            if json_path:
                write_text_atomic(json_path, json.dumps(to_json(found, device, tools, done=False), indent=1))
            progress.advance(task)
            if finding.status != "clean":
                progress.console.print(f"  {finding.version.label} {finding.tool}: {finding.status} "
                                       f"{escape('; '.join(finding.lines[:1]) or finding.reason)}")
        findings = run_sanitize(session, versions, tools, parallel, timeout, done)
    if json_path:
        write_text_atomic(json_path, json.dumps(to_json(findings, device, tools), indent=1))
    console.print(report.sanitize_tables(findings, tools))
    bad = [f for f in findings if f.status not in ("clean", "skipped")]
    console.print(f"{len(findings) - len(bad)} of {len(findings)} (version, tool) runs clean")
    if bad:
        sys.exit(1)


@click.command()
@click.option("--measure/--no-measure", default=True, show_default=True,
              help="With a GPU, measure (or read the cached) copy and matmul ceilings.")
@click.option("--refresh", is_flag=True, help="Measure the ceilings again instead of reading the cache.")
@click.pass_obj
def doctor(project: Project, measure, refresh):
    """What this machine has (GPU, driver, toolkit, PyCUDA, nvmath, cuDNN frontend, NCCL, mpi4py,
    torch...), each with its version or how to get it, and the ceilings the tables use."""
    from ..doctor import measure as measure_ceilings, software
    checks = software()
    console.print(report.doctor_table(checks))
    if measure and next(c for c in checks if c.name == "pycuda").ok:
        from ..bench import Options, Session
        with Session(project, Options()) as session, err_console.status("measuring the ceilings (cached after)"):
            measured = measure_ceilings(session, refresh)
        console.print(report.ceilings_table(measured))


@click.command()
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--threshold", default=0.05, show_default=True, type=click.FloatRange(0, 10),
              help="Exit non-zero (4) when a version is SLOWER by more than this fraction, or newly fails.")
@click.option("--same", default=0.03, show_default=True, type=click.FloatRange(0, 1, max_open=True),
              help="Changes within this fraction are SAME.")
def compare(old, new, threshold, same):
    """Compare two results files row by row: FASTER / SLOWER / SAME / NOISY from the two runs'
    spreads, a summary, and exit code 4 on a regression beyond --threshold (a CI gate).

    \b
    workbench compare results/h100-bench.json new.json
    """
    from ..compare import check_regressions, compare_files, comparison_report
    comparison = compare_files(old, new, same=same)
    console.print(comparison_report(comparison, threshold))
    check_regressions(comparison, threshold)


def writable_folder(path: str | os.PathLike, what: str = "--out") -> Path:
    """Create the folder `path` (parents too) now, before any work; one line if it cannot be
    created or written into."""
    why = unwritable_folder(path, create=True)
    if why:
        raise UsageError(f"{what} {path}: cannot write there ({why})")
    return Path(path)


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(),  # an unusable folder: writable_folder says why, in one line
              help="Folder for the PNGs (created). Default: beside RESULTS, named after it "
                   "(r.json: r-plots/, which .gitignore keeps out of the repository).")
def plot(results, out_dir):
    """A PNG per family (each version's time and share of the ceiling, the baselines as lines)
    and a roofline of every family's best version, from a results file.

    \b
    workbench plot results/h100-bench.json      into results/h100-bench-plots/
    workbench plot r.json --out /tmp/plots
    """
    from ..results import read_payload
    from ..plot import plot_results
    payload = read_payload(results)
    if out_dir is None:
        name = Path(results).name.removesuffix(".gz")  # r.json.gz: r-plots/ as for r.json
        out_dir = str(Path(results).with_name(Path(name).stem + "-plots"))
    writable_folder(out_dir)  # before any drawing: one line if it cannot be written
    written = plot_results(payload, out_dir)
    console.print(f"wrote {len(written)} plots to {out_dir}/ (roofline: {Path(out_dir) / 'roofline.png'})")


@click.command("new")
@click.argument("family")
@click.option("--force", is_flag=True, help="Overwrite the files of a family that `new` made before (to start it "
                                           "again); never a family that existed before (more versions, or tracked by git).")
@click.pass_obj
def new_family(project: Project, family, force):
    """Scaffold a new family: its contract, version 1, the NumPy reference and a test, which
    pass their own check. Then: workbench show FAMILY; workbench run FAMILY 1."""
    from ..scaffold import scaffold
    for path in scaffold(project.root, family, force):
        console.print(f"wrote {escape(str(path.relative_to(project.root)))}")


commands = [sanitize, doctor, compare, plot, new_family]

"""The kernel verbs: list, show, compile (no GPU), and run, bench, check, device (on the GPU).

Thin click commands: they check options, call the library (workbench/), print with report.py.
"""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .. import report
from ..errors import SizesError, UsageError, WorkbenchError
from ..family import Project
from ..isolate import DEFAULT_TIMEOUT
from ..options import Options
from .app import cli, console, err_console, progress_bar, refuse_unmet, writable_file

# -- list / show / compile: no GPU needed --------------------------------------------------------
@cli.command("list")
@click.pass_obj
def list_cmd(project: Project):
    """List the kernel families and their versions, one line each."""
    if not project.family_names():
        raise UsageError(f"no kernel families under {project.kernels_dir}")
    console.print(report.families_table(project.families()))


@cli.command()
@click.argument("family")
@click.argument("version", required=False)
@click.option("--no-source", is_flag=True, help="Only the story, not the code.")
@click.pass_obj
def show(project: Project, family, version, no_source):
    """Show a version's story (its header) and its source, highlighted.

    Without VERSION, show the family's contract and its versions in order: the course.
    """
    fam = project.family(family)
    if version is None:
        console.print(report.family_panel(fam))
        return
    v = fam.version(version)
    console.print(report.version_panel(v))
    if not no_source:
        start = report.source_start(v.source)
        from rich.syntax import Syntax  # pygments: ~0.1 s of every command's start, loaded for show alone
        console.print(Syntax(v.source[start:].lstrip("\n"), "cuda", line_numbers=True, theme="ansi_dark",
                             start_line=v.source[:start].count("\n") + 1), soft_wrap=True)  # long lines: never cut


@cli.command("compile")
@click.argument("family", required=False)
@click.argument("version", required=False)
@click.option("--arch", "archs", multiple=True, default=["sm_90a"], show_default=True,
              help="Target arch (repeatable), e.g. --arch sm_80 --arch sm_90a (sm_90a: the H100's own code, "
                   "wgmma included).")
@click.pass_obj
def compile_cmd(project: Project, family, version, archs):
    """Compile versions with the nvcc on PATH (no GPU needed) and show ptxas's resource report."""
    from ..compile import compile_only, require_nvcc
    fams = [project.family(family)] if family else project.families()
    versions = [v for fam in fams for v in ([fam.version(version)] if version else fam.versions)]
    require_nvcc()  # missing: one line, not one per version
    rows, failed = [], 0
    for v in versions:
        for arch in archs:
            try:
                res, warnings = compile_only(v.path, arch)
            except WorkbenchError as e:
                failed += 1
                err_console.print(f"[red]{escape(str(e))}[/]")
                continue
            if warnings:
                err_console.print(f"[yellow]{v.label} ({arch}):[/]\n{escape(warnings)}")
            rows += [(v.label, arch, name, r) for name, r in sorted(res.items())]
    console.print(report.resources_table(rows))
    if failed:
        raise WorkbenchError(f"{failed} compile(s) failed")


# -- run / bench / check: on the GPU ---------------------------------------------------------------
def common_options(f):
    opts = [
        click.option("--sizes", help="Override sizes, e.g. B=4,T=2048,C=1024 (defaults: the family's)."),
        click.option("--seed", default=Options.seed, show_default=True, type=click.IntRange(0),
                     help="First seed for the inputs."),
        click.option("--seeds", default=Options.seeds, show_default=True, type=click.IntRange(1),
                     help="How many seeds each size set is checked at."),
        click.option("--timeout", default=Options.timeout, show_default=True, type=click.FloatRange(min=1),
                     help="Seconds a version may take (compile + check + time) before it is killed."),
        click.option("--budget", default=Options.budget, show_default=True, type=click.FloatRange(min=0.01),
                     help="Seconds of timing per block size (the front-runners; the others get a quarter)."),
        click.option("--no-torch", is_flag=True, help="Skip the PyTorch baseline."),
        click.option("--no-flush", is_flag=True, help="Do not flush L2 before timed launches (for comparison)."),
        click.option("--no-test-sizes", is_flag=True, help="Check only at the timed sizes, not the family's test sizes."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _options(sizes=None, block_sizes=(), seed=Options.seed, seeds=Options.seeds, timeout=Options.timeout,
             budget=Options.budget, no_torch=False, no_flush=False, no_test_sizes=False) -> Options:
    """The bench Options the common options stand for (their defaults are Options' own)."""
    return Options(sizes=sizes, block_sizes=list(block_sizes) or None, seed=seed, seeds=seeds, timeout=timeout,
                   budget=budget, torch=not no_torch, flush=not no_flush, test_sizes=not no_test_sizes)


@cli.command()
@click.argument("family")
@click.argument("version")
@click.option("--block-size", "block_sizes", type=int, multiple=True,
              help="Time only this block size (repeatable). Default: every size the header lists.")
@common_options
@click.option("--sweep", help="Time against one size, e.g. C=256..8192 (powers of 2), C=256..8192:x1.5, C=100,300: "
                              "a table, and a plot written to --plot.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Where --sweep's plot goes [FAMILY_V_AXIS.png].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the result as JSON.")
@click.option("--force", is_flag=True, help="Replace an existing --json or --plot file.")
@click.option("--watch", is_flag=True,
              help="Stay up: run again on every save of the version's file or a header it includes, "
                   "with the change against the run before.")
@click.option("--fresh-baselines", is_flag=True,
              help="Measure the torch and copy rows again (by default a run reuses the ones measured in the "
                   "last 24 h at the same sizes, options and device and says when; bench always measures).")
@click.pass_obj
def run(project: Project, family, version, block_sizes, sweep, plot_path, json_path, force, fresh_baselines,
        watch, **kw):
    """Compile a version, check it against the reference, time it across block sizes.

    With --watch it stays up: every save of the version's file, or of a header it includes,
    compiles, checks and times it again, and prints the table with the change against the run
    before. A compile error or a failed check is shown and the watch goes on; Ctrl-C ends it.
    """
    from ..bench import require_pycuda
    v = project.family(family).version(version)
    sizes = v.family.parse_sizes(kw["sizes"])  # a bad --sizes fails before any work
    if why := v.unlisted_block_sizes(block_sizes):  # as does a block size the header does not list
        raise SizesError(why)
    if sweep and watch:
        raise UsageError("--watch and --sweep do not go together: watch one size set, or sweep once")
    if not sweep:
        refuse_unmet(v, sizes)  # and sizes its preconditions refuse
    axis = values = None
    if sweep:
        from ..plot import parse_sweep
        axis, values = parse_sweep(sweep)
        if axis not in v.family.sizes:
            raise SizesError(f"--sweep {axis}: {family} has no size {axis} (its sizes: {', '.join(v.family.sizes)})")
        plot_path = plot_path or f"{family}_{v.number}_{axis}.png"
        writable_file(plot_path, force, "--plot")
    writable_file(json_path, force)
    require_pycuda()
    opts = _options(block_sizes=block_sizes, **kw)
    opts.test_sizes = opts.test_sizes and not sweep
    # one version: its child starts at once and none ahead (--watch: one, ready for the next
    # save), no staging owner (one user of the cases), the baselines kept from an earlier run
    # (unless --fresh-baselines)
    opts.ahead, opts.stage, opts.kept_baselines = int(watch), False, not fresh_baselines
    if sweep:
        _run_sweep(project, v, opts, axis, values, plot_path, json_path)
    elif watch:
        _run_watch(project, v, opts, sizes)
    else:
        _run_once(project, v, opts, sizes, json_path)


def _begin(session, status, v, sizes: dict | None) -> None:
    """A one-version session's start: progress on the status line, the version's compile, its
    child (and the baselines', unless kept) and, on a machine never probed, the probe, started at
    once (session.new_run, the run's record, waits for the probe)."""
    session.progress = lambda text: status.update(escape(text))
    session.compiles.start_ahead([v])  # first: the head start may probe the device
    session.head_start(v.family, sizes, v.precision, v.library_ops)


def _run_once(project: Project, v, opts: Options, sizes: dict, json_path) -> None:
    from ..bench import Session
    from ..results import FamilyResult, save
    with Session(project, opts) as session, err_console.status("starting") as status:
        _begin(session, status, v, sizes)
        row = session.run_version(v)  # its references beside the probe, on a machine never probed
        run_ = session.new_run()
        torch, copy = session.run_baselines(v.family, row.sizes or None, v.precision) if row.passed else (None, None)
    console.print(report.run_report(row, run_.meta, torch, copy))
    if json_path:
        at = row.sizes or sizes  # a version that crashed before its first check has none of its own
        run_.put(FamilyResult(v.family.name, v.family.title, at, v.family.bytes_moved(at, v.precision),
                              v.family.flops_done(at), v.precision, [row], torch, copy))
        save(json_path, run_)
    if not row.passed:
        sys.exit(1)


def _run_sweep(project: Project, v, opts: Options, axis: str, values, plot_path, json_path) -> None:
    from ..bench import Session
    from ..plot import plot_sweep, sweep_point
    from ..results import write_json
    with Session(project, opts) as session, err_console.status("starting") as status:
        _begin(session, status, v, None)
        run_ = session.new_run()
        points = session.sweep(v, axis, values)
    console.print(report.sweep_table(v, axis, points))
    data = {"family": v.family.name, "version": v.number, "axis": axis, "device": run_.device, "ceiling": run_.ceiling,
            "points": [sweep_point(r.to_json(), axis, c.to_json() if c else None) for r, c in points]}
    if any(r.passed for r, _ in points):
        console.print(f"plot written to {plot_sweep(data, plot_path)}")
    if json_path:
        write_json(json_path, data)
    sys.exit(0 if all(r.passed or r.status == "refused" for r, _ in points) else 1)


def _run_watch(project: Project, v, opts: Options, sizes: dict) -> None:
    """run --watch: the session (its case files, the baselines, a child started ahead) stays up;
    each save reads the header again and runs the version in a fresh child."""
    import time

    from ..bench import Session
    from ..watch import stamp, wait_for_change
    family, number = v.family.name, v.number
    prev = torch = copy = None
    with Session(project, opts) as session:
        with err_console.status("starting") as status:
            _begin(session, status, v, sizes)
            run_ = session.new_run()
        since, changed, t_save = stamp(v.path), [], None
        try:
            while True:
                with err_console.status(f"{v.label}: compile, check, time") as status:
                    session.progress = lambda text: status.update(escape(text))
                    try:
                        v = project.reload().family(family).version(number)  # the header may have changed
                        row = session.run_version(v)
                    except WorkbenchError as e:
                        err_console.print(f"[red]{escape(str(e))}[/]")
                        row = None
                    if row is not None and row.passed and torch is None:
                        torch, copy = session.run_baselines(v.family, row.sizes or None, v.precision)
                if row is not None:
                    console.print(report.run_report(row, run_.meta, torch, copy))
                    console.print(report.change_line(prev, row, changed, time.time() - t_save if t_save else None))
                    prev = row if row.passed else prev
                console.file.flush()  # the report before the prompt, also where stdout is a pipe
                err_console.print(f"[dim]watching {len(since)} file(s) of {v.label}; save to run again, "
                                  f"Ctrl-C to stop[/]")
                since, changed = wait_for_change(v.path, since)
                t_save = max(m for f, m, _ in since if f in changed) / 1e9 if changed else time.time()
        except KeyboardInterrupt:
            err_console.print("[dim]watch ended[/]")


@cli.command()
@click.argument("families", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every family.")
@common_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write every result, with device metadata, as JSON (rewritten after each family).")
@click.option("--resume", is_flag=True, help="Keep the families --json already holds; bench only the rest.")
@click.option("--force", is_flag=True, help="Replace an existing --json file.")
@click.pass_obj
def bench(project: Project, families, all_, json_path, resume, force, **kw):
    """Check and time every version of the given families (or --all), best block size each,
    beside PyTorch and a copy of the same bytes."""
    from ..bench import Session, require_pycuda
    from ..results import check_resume
    if all_ and families:
        raise UsageError("give family names or --all, not both")
    if not all_ and not families:
        raise UsageError(f"name the families to bench, or pass --all (families: {', '.join(project.family_names())})")
    fams = project.families() if all_ else [project.family(f) for f in families]
    if kw["sizes"] and len(fams) > 1:
        raise UsageError("--sizes applies to one family at a time")
    for fam in fams:
        fam.parse_sizes(kw["sizes"])
    if resume and not json_path:
        raise UsageError("--resume needs the --json file to resume")
    writable_file(json_path, force=force or resume)
    check_resume(json_path, resume)
    require_pycuda()
    with Session(project, _options(**kw)) as session, progress_bar() as progress:
        task = progress.add_task("probing the device", total=sum(len(f.versions) for f in fams))
        session.progress = lambda text: progress.update(task, description=escape(text))

        def on_row(row):
            progress.advance(task)
            progress.console.print(report.row_line(row))
        run_ = session.bench(fams, json_path, resume, on_row=on_row,
                             on_family=lambda f: progress.console.print(
                                 report.bench_table(f, session.device()["device"].get("l2_bytes"))))
    console.print(f"[dim]{report.device_line(run_.meta)}[/]")
    console.print(f"[dim]bench {report.time_breakdown(run_.seconds, run_.phases)}[/]")
    if json_path:
        console.print(f"results written to {json_path}")
    failures = sum(len(f.failures()) for f in run_.families)
    if failures:
        err_console.print(f"[bold red]{failures} version(s) did not pass[/]")
        sys.exit(1)


@cli.command()
@click.argument("family")
@click.argument("versions", nargs=-1)
@click.option("--sizes", help="Check at these sizes instead of the defaults, e.g. B=2,T=77,C=96 (test sizes too).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="First seed for the inputs.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(1), help="How many seeds each size set is checked at.")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=click.FloatRange(min=1), help="Seconds per version.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the results as JSON.")
@click.option("--force", is_flag=True, help="Replace an existing --json file.")
@click.pass_obj
def check(project: Project, family, versions, sizes, seed, seeds, timeout, json_path, force):
    """Check versions (default: all) at the family's default and test sizes, every block size,
    several seeds; no timing."""
    from ..bench import Session, require_pycuda
    from ..results import FamilyResult, save
    fam = project.family(family)
    chosen = [fam.version(v) for v in versions] if versions else fam.versions
    at = fam.parse_sizes(sizes)
    writable_file(json_path, force)
    require_pycuda()
    with Session(project, Options(sizes=sizes, seed=seed, seeds=seeds, timeout=timeout, time=False)) as session, \
            err_console.status("starting") as status:
        session.progress = lambda text: status.update(escape(text))
        run_ = session.new_run()

        def on_row(row):
            console.print(f"[bold]{row.label}[/] {escape(row.title)}: ", report.check_line(row))
            details = report.failure_details(row)
            if details is not None:
                console.print(details)
        rows = session.check(chosen, on_row)
    if json_path:
        for p in {v.precision for v in chosen}:
            run_.put(FamilyResult(fam.name, fam.title, at, fam.bytes_moved(at, p), fam.flops_done(at), p,
                                  [r for r, v in zip(rows, chosen) if v.precision == p]))
        save(json_path, run_)
    if any(r.status not in ("passed", "refused") for r in rows):
        sys.exit(1)


@cli.command()
@click.pass_obj
def device(project: Project):
    """Show the GPU and its measured copy-bandwidth ceiling (measured once, then cached)."""
    from ..bench import Session
    with Session(project, Options()) as session:
        meta = session.device()
    console.print(report.device_line(meta))

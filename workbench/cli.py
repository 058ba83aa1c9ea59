"""The command line: thin click commands that parse, call the library and print with rich."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from . import report
from .errors import NoGPU, UnknownName, WorkbenchError
from .family import Family, Project, Version
from .isolate import DEFAULT_TIMEOUT

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class Workbench(click.Group):
    """Turns a WorkbenchError anywhere below into one red line and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except WorkbenchError as e:
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
            sys.exit(e.exit_code)


@click.group(cls=Workbench, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), envvar="WORKBENCH_ROOT",
              help="Project folder holding kernels/ and references/ (default: this repository).")
@click.pass_context
def cli(ctx, root):
    """workbench: develop CUDA kernels version by version, check them against a NumPy
    reference, time them properly, and train GPT-2 with the winners.

    \b
    workbench list                        families and their versions
    workbench show layernorm_forward 4    a version's story and source
    workbench run layernorm_forward 4     compile, check, time across block sizes
    workbench bench --all --json r.json   every version of every family
    """
    ctx.obj = Project(root)


def _project(ctx) -> Project:
    return ctx.obj


# -- list / show / compile: no GPU needed --------------------------------------------------------
@cli.command("list")
@click.pass_context
def list_cmd(ctx):
    """List the kernel families and their versions, one line each."""
    project = _project(ctx)
    names = project.family_names()
    if not names:
        raise WorkbenchError(f"no kernel families under {project.kernels_dir}")
    table = Table(box=None, pad_edge=False, show_header=True)
    table.add_column("family", style="bold cyan", no_wrap=True)
    table.add_column("versions")
    for fam in project.families():
        table.add_row(fam.name, " · ".join(f"[bold]{v.number}[/] {escape(v.title)}" for v in fam.versions))
    console.print(table)


@cli.command()
@click.argument("family")
@click.argument("version", required=False)
@click.option("--no-source", is_flag=True, help="Only the story, not the code.")
@click.pass_context
def show(ctx, family, version, no_source):
    """Show a version's story (its header) and its source, highlighted.

    Without VERSION, show the family's contract and its versions in order: the course.
    """
    fam = _project(ctx).family(family)
    if version is None:
        console.print(family_panel(fam))
        return
    v = fam.version(version)
    console.print(version_panel(v))
    if not no_source:
        body = v.source[report_header_end(v.source):].lstrip("\n")
        console.print(Syntax(body, "cuda", line_numbers=True, start_line=v.source[:report_header_end(v.source)].count("\n") + 1,
                             theme="ansi_dark", word_wrap=False))


def report_header_end(source: str) -> int:
    end = source.find("*/")
    return end + 2 if end >= 0 else 0


def version_panel(v: Version) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("file", str(v.path.relative_to(v.family.project.root)))
    if v.changed:
        grid.add_row("changed", escape(v.changed))
    if v.why:
        grid.add_row("why faster", escape(v.why))
    pre = [*v.family.preconditions, *v.preconditions]
    grid.add_row("preconditions", escape(" and ".join(pre)) if pre else "none")
    grid.add_row("block sizes", ", ".join(str(b) for b in v.block_sizes) if v.block_sizes != (None,) else "-")
    for s in v.scratch:
        grid.add_row("scratch", f"{s.name}: {s.size} x {s.dtype}")
    for s in v.steps:
        if s.kind == "kernel":
            line = f"{s.name}<<<grid {', '.join(s.grid)}; block {', '.join(s.block)}; smem {s.shared}>>>({', '.join(s.args)})"
        elif s.kind == "memset":
            line = f"memset {s.name} = {s.value}"
        else:
            line = f"library {s.name}(" + ", ".join(f"{k}={val}" for k, val in s.params) + ")"
        if s.when:
            line += f"  when {s.when}"
        grid.add_row("launch", escape(line))
    return Panel(grid, title=f"[bold]{v.family.name} {v.number}[/]: {escape(v.title)}", title_align="left")


def family_panel(fam: Family) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if fam.summary:
        grid.add_row("computes", escape(fam.summary.strip()))
    for a in fam.args:
        grid.add_row(f"{a.role} {a.name}", f"{a.dtype}[{a.shape}]" + (f"  drawn as {a.init}" if a.init else ""))
    grid.add_row("sizes", fam.format_sizes(fam.default_sizes) + (f"  ({', '.join(f'{k} = {v}' for k, v in fam.derived.items())})" if fam.derived else ""))
    grid.add_row("test sizes", "; ".join(fam.format_sizes(s) for s in fam.test_sizes))
    grid.add_row("tolerance", f"atol {fam.atol:g}, rtol {fam.rtol:g}")
    grid.add_row("bytes moved", fam.bytes)
    if fam.flops:
        grid.add_row("flops", fam.flops)
    grid.add_row("reference", f"references/{fam.reference_name.split(':')[0]}.py")
    if fam.torch:
        grid.add_row("torch", escape(fam.torch))
    for v in fam.versions:
        grid.add_row(f"version {v.number}", escape(v.title))
    return Panel(grid, title=f"[bold]{fam.name}[/]: {escape(fam.title)}", title_align="left")


@cli.command("compile")
@click.argument("family", required=False)
@click.argument("version", required=False)
@click.option("--arch", "archs", multiple=True, default=["sm_90"], show_default=True,
              help="Target arch (repeatable), e.g. --arch sm_80 --arch sm_90.")
@click.pass_context
def compile_cmd(ctx, family, version, archs):
    """Compile versions with the nvcc on PATH (no GPU needed) and show ptxas's resource report."""
    from .compile import compile_only
    project = _project(ctx)
    fams = [project.family(family)] if family else project.families()
    table = Table(title="ptxas resources", title_justify="left")
    for col in ("version", "arch", "kernel", "regs", "spills (st/ld B)", "stack B", "static smem B"):
        table.add_column(col, justify="left" if col in ("version", "kernel", "arch") else "right")
    failed = 0
    for fam in fams:
        versions = [fam.version(version)] if version else fam.versions
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
                for name, r in sorted(res.items()):
                    table.add_row(v.label, arch, name, str(r.registers), f"{r.spill_stores}/{r.spill_loads}",
                                  str(r.stack), str(r.shared))
    console.print(table)
    if failed:
        raise WorkbenchError(f"{failed} compile(s) failed")


# -- run / bench / check: on the GPU ---------------------------------------------------------------
def _options(sizes=None, block_sizes=(), seed=0, seeds=3, timeout=DEFAULT_TIMEOUT, budget=0.4,
             torch=True, flush=True, test_sizes=True):
    from .runner import Options
    return Options(sizes=sizes, block_sizes=list(block_sizes) or None, seed=seed, seeds=seeds,
                   timeout=timeout, budget=budget, torch=torch, flush=flush, test_sizes=test_sizes)


def common_options(f):
    opts = [
        click.option("--sizes", help="Override sizes, e.g. B=4,T=2048,C=1024 (defaults: the family's)."),
        click.option("--seed", default=0, show_default=True, help="First seed for the inputs."),
        click.option("--seeds", default=3, show_default=True, help="How many seeds each size set is checked at."),
        click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True,
                     help="Seconds a version may take (compile + check + time) before it is killed."),
        click.option("--budget", default=0.4, show_default=True, help="Seconds of timing per block size."),
        click.option("--no-torch", is_flag=True, help="Skip the PyTorch baseline."),
        click.option("--no-flush", is_flag=True, help="Do not flush L2 before timed launches (for comparison)."),
        click.option("--no-test-sizes", is_flag=True, help="Check only at the timed sizes, not the family's test sizes."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _progress() -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console, transient=True)


@cli.command()
@click.argument("family")
@click.argument("version")
@click.option("--block-size", "block_sizes", type=int, multiple=True,
              help="Time only this block size (repeatable). Default: every size the header lists.")
@common_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the result as JSON.")
@click.pass_context
def run(ctx, family, version, block_sizes, sizes, seed, seeds, timeout, budget, no_torch, no_flush,
        no_test_sizes, json_path):
    """Compile a version, check it against the reference, time it across block sizes."""
    from .runner import Session
    project = _project(ctx)
    fam = project.family(family)
    v = fam.version(version)
    opts = _options(sizes, block_sizes, seed, seeds, timeout, budget, not no_torch, not no_flush,
                    not no_test_sizes)
    fam.parse_sizes(sizes)  # a bad --sizes fails before any work
    with Session(project, opts) as session, err_console.status("starting") as status:
        session.progress = lambda text: status.update(escape(text))
        meta = session.metadata()
        res = session.run_version(v)
        base = session.run_baselines(fam) if res.get("status") == "passed" else {}
        torch, copy = base.get("torch"), base.get("copy")
    console.print(report.run_report(res, meta, torch, copy))
    if json_path:
        report.write_json(json_path, report.bench_payload(meta, [{"family": fam.name, "versions": [res],
                                                                  "torch": torch, "copy": copy}]))
    if res.get("status") != "passed":
        sys.exit(1)


@cli.command()
@click.argument("families", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every family.")
@common_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write every result, with device metadata, as JSON.")
@click.pass_context
def bench(ctx, families, all_, sizes, seed, seeds, timeout, budget, no_torch, no_flush, no_test_sizes, json_path):
    """Check and time every version of the given families (or --all), best block size each."""
    from .runner import Session
    project = _project(ctx)
    if all_ and families:
        raise WorkbenchError("give family names or --all, not both")
    if not all_ and not families:
        raise WorkbenchError("name the families to bench, or pass --all (families: "
                             + ", ".join(project.family_names()) + ")")
    fams = project.families() if all_ else [project.family(f) for f in families]
    if sizes and len(fams) > 1:
        raise WorkbenchError("--sizes applies to one family at a time")
    for fam in fams:
        fam.parse_sizes(sizes)
    opts = _options(sizes, (), seed, seeds, timeout, budget, not no_torch, not no_flush, not no_test_sizes)
    started = time.perf_counter()
    results = []
    failures = 0
    with Session(project, opts) as session:
        with _progress() as progress:
            total = sum(len(f.versions) for f in fams)
            task = progress.add_task("probing the device", total=total)
            session.progress = lambda text: progress.update(task, description=escape(text))
            meta = session.metadata()
            t0 = time.perf_counter()
            session.prepare_cases(fams)  # in the background, while the GPU works
            session.precompile([v for f in fams for v in f.versions])
            meta["seconds"] = {"precompile": round(time.perf_counter() - t0, 1)}
            for fam in fams:
                def done(res):
                    progress.advance(task)
                    progress.console.print(f"  {res['family']} {res['version']}: ", report.status_text(res),
                                           f": {escape(report.reason_line(res))}" if res.get("status") != "passed" else "")
                fam_result = session.bench_family(fam, on_version=done, baselines=False)
                session.drop_cases(fam, keep_first=True)
                results.append(fam_result)
                failures += sum(v.get("status") not in ("passed", "refused") for v in fam_result["versions"])
                if json_path:  # written after each family: nothing lost if a later one crashes us
                    report.write_json(json_path, report.bench_payload(meta, results))
            t1 = time.perf_counter()
            session.prepare_baselines(fams)
            for fam, fam_result in zip(fams, results):
                session.add_baselines(fam, fam_result)
                progress.console.print(report.bench_table(fam_result, meta["device"].get("l2_bytes")))
            meta["seconds"]["baselines"] = round(time.perf_counter() - t1, 1)
    meta["seconds"]["total"] = round(time.perf_counter() - started, 1)
    if json_path:
        report.write_json(json_path, report.bench_payload(meta, results))
    console.print(f"[dim]{report.device_line(meta)}[/]")
    console.print(f"[dim]bench took {meta['seconds']['total']:.0f} s (compile {meta['seconds']['precompile']:.0f} s, "
                  f"baselines {meta['seconds']['baselines']:.0f} s)[/]")
    if json_path:
        console.print(f"results written to {json_path}")
    if failures:
        err_console.print(f"[bold red]{failures} version(s) did not pass[/]")
        sys.exit(1)


@cli.command()
@click.argument("family")
@click.argument("versions", nargs=-1)
@click.option("--seed", default=0, show_default=True, help="First seed for the inputs.")
@click.option("--seeds", default=3, show_default=True, help="How many seeds each size set is checked at.")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, help="Seconds per version.")
@click.pass_context
def check(ctx, family, versions, seed, seeds, timeout):
    """Check versions (default: all) at the family's default and test sizes, every block size,
    several seeds; no timing."""
    from .runner import Options, Session
    project = _project(ctx)
    fam = project.family(family)
    chosen = [fam.version(v) for v in versions] if versions else fam.versions
    failures = 0
    with Session(project, Options(seed=seed, seeds=seeds, timeout=timeout, time=False)) as session, \
            err_console.status("starting") as status:
        session.progress = lambda text: status.update(escape(text))
        session.device()
        for v in chosen:
            res = session.run_version(v)
            console.print(f"[bold]{v.label}[/] {escape(v.title)}: ", report.check_line(res))
            details = report.failure_details(res)
            if details is not None:
                console.print(details)
            failures += res.get("status") not in ("passed", "refused")
    if failures:
        sys.exit(1)


@cli.command()
@click.pass_context
def device(ctx):
    """Show the GPU and its measured copy-bandwidth ceiling (measured once, then cached)."""
    from .runner import Options, Session
    with Session(_project(ctx), Options()) as session:
        meta = session.metadata()
    console.print(report.device_line(meta))


# -- promote / promoted: the trainer's kernel set -----------------------------------------------
@cli.command()
@click.argument("family", required=False)
@click.argument("version", required=False)
@click.option("--block-size", type=int, help="Use this block size instead of timing every one.")
@click.option("--best", "best", is_flag=True, help="Promote every family's fastest passing version from a bench result.")
@click.argument("results", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--timeout", default=DEFAULT_TIMEOUT * 3, show_default=True, help="Seconds per version check.")
@click.pass_context
def promote(ctx, family, version, block_size, best, results, timeout):
    """Re-check a version at the trainer's shapes and test sizes, then freeze it (with its best
    block size) into train/kernels/ for `workbench train`.

    \b
    workbench promote layernorm_forward 6            time every block size, keep the best
    workbench promote layernorm_forward 6 --block-size 256
    workbench promote --best results.json            each family's winner from a bench
    """
    import json

    from . import promote as pm
    from .runner import Options, Session
    project = _project(ctx)
    if best:
        path = results or family  # `promote --best results.json` parses the file as FAMILY
        if not path:
            raise WorkbenchError("promote --best needs the JSON written by `workbench bench --all --json FILE`")
        try:
            ranked = pm.ranked_from_results(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            raise WorkbenchError(f"cannot read bench results {path}: {e}") from None
        wanted = {f: v for f, v in ranked.items() if f in project.family_names()
                  and pm.trainer_sizes(project.family(f))}
        if not wanted:
            raise WorkbenchError(f"{path} has no passing version of a family the trainer calls")
    else:
        if not (family and version):
            raise WorkbenchError("give FAMILY VERSION, or --best RESULTS.json")
        wanted = {family: [(int(version) if version.isdigit() else version, block_size)]}
    failures = 0
    # Two seeds: the trainer's sizes are large (the lm head's reference alone is a 158 GFLOP GEMM).
    with Session(project, Options(timeout=timeout, torch=False, seeds=2)) as session, err_console.status("starting") as status:
        session.progress = lambda text: status.update(escape(text))
        session.device()
        for fam_name, candidates in wanted.items():
            fam = project.family(fam_name)
            last_error = None
            for number, bs in candidates:
                try:
                    out = pm.promote(session, fam.version(number), bs if not best else bs)
                except pm.PromoteError as e:
                    last_error = e
                    continue
                e, prev = out["entry"], out["previous"]
                was = f"was {prev['version']} at block {prev['block_size']}" if prev else "new"
                console.print(f"[green]promoted[/] {fam_name} {e['version']} ({escape(e['title'])}) at block size "
                              f"{e['block_size']}: {report.fmt_us(e['median_us'])} at {e['timed_at']} [dim]({was})[/]")
                last_error = None
                break
            if last_error is not None:
                failures += 1
                err_console.print(f"[bold red]not promoted:[/] {escape(str(last_error))}")
    if failures:
        sys.exit(1)


@cli.command()
@click.pass_context
def promoted(ctx):
    """List the trainer's kernels and where each came from."""
    from .promote import KERNELS_DIR, read_manifest
    manifest = read_manifest()
    if not manifest["kernels"]:
        raise WorkbenchError(f"nothing promoted yet ({KERNELS_DIR / 'manifest.json'} is empty)")
    table = Table(title=f"promoted kernels ({KERNELS_DIR.relative_to(Path.cwd()) if KERNELS_DIR.is_relative_to(Path.cwd()) else KERNELS_DIR})",
                  title_justify="left")
    for col in ("family", "v", "title", "block", "time", "GB/s", "timed at", "GPU", "date", "sha256"):
        table.add_column(col, justify="right" if col in ("v", "block", "time", "GB/s") else "left")
    for fam, e in sorted(manifest["kernels"].items()):
        table.add_row(fam, str(e["version"]), Text(e["title"]), str(e["block_size"] or "-"), report.fmt_us(e["median_us"]),
                      f"{e['gbps']:.0f}", e["timed_at"], e["gpu"], e["date"], e["sha256"][:12])
    console.print(table)


# -- train ----------------------------------------------------------------------------------------
class TrainUI:
    """What `workbench train` prints, with rich."""

    def run_table(self, o, source, total, train_data, val_data):
        t = Table(title="run", title_justify="left", box=None)
        t.add_column("parameter", style="bold")
        t.add_column("value")
        for k, v in (("train tokens (-i)", f"{o.train_tokens} ({train_data.tokens.size:,} tokens)"),
                     ("val tokens (-j)", f"{o.val_tokens}" + (f" ({val_data.tokens.size:,} tokens)" if val_data else " (off)")),
                     ("log (-o)", o.log or "-"), ("batch size (-b)", o.batch), ("sequence length (-t)", o.seq),
                     ("learning rate (-l)", o.lr), ("val every (-v)", o.val_every), ("val batches (-m)", o.val_batches),
                     ("sample every (-s)", o.sample_every), ("generate (-g)", o.gen_tokens), ("init", source),
                     ("steps", f"{total} ({train_data.per_epoch} per epoch)"), ("attention", o.attention),
                     ("save", o.save or "-")):
            t.add_row(k, str(v))
        console.print(t)

    def model_table(self, cfg):
        t = Table(title="model", title_justify="left")
        for col in ("max T", "V", "padded V", "L", "NH", "C", "parameters"):
            t.add_column(col, justify="right")
        t.add_row(str(cfg.max_seq_len), str(cfg.vocab_size), str(cfg.padded_vocab_size), str(cfg.num_layers),
                  str(cfg.num_heads), str(cfg.channels), f"{cfg.num_parameters:,}")
        console.print(t)

    def device_table(self, tf32, peak):
        import pycuda.driver as drv
        dev = drv.Context.get_device()
        console.print(f"[bold]device[/] {dev.name()}; TF32 {'on' if tf32 else 'off'}; "
                      f"measured matmul peak {peak:.0f} TFLOP/s ({'TF32' if tf32 else 'FP32'}, cuBLASLt) for MFU")

    def memory_table(self, memory):
        t = Table(title="device memory", title_justify="left")
        t.add_column("buffer")
        t.add_column("MiB", justify="right")
        for name, nbytes in sorted(memory.items(), key=lambda kv: -kv[1]):
            if nbytes >= 1 << 20:
                t.add_row(name, f"{nbytes / 2**20:,.1f}")
        t.add_row("[bold]total[/]", f"[bold]{sum(memory.values()) / 2**20:,.1f}[/]")
        console.print(t)

    def step(self, r, total):
        console.print(f"step {r.step:4d}/{total}: train loss {r.loss:.6f} ({r.ms:.1f} ms, {r.tokens_per_s:,.0f} tok/s, "
                      f"MFU {r.mfu:.1f}%, host {r.host_us:.0f} µs outside the graph)")

    def val(self, step, loss):
        console.print(f"[cyan]val loss {loss:.6f}[/] at step {step}")

    def sample(self, step, text):
        console.print(Panel(escape(text), title=f"sample at step {step}", title_align="left"))

    def note(self, text):
        console.print(f"[yellow]{escape(text)}[/]")

    def summary(self, s):
        if "gpu_memory_used" in s:
            console.print(f"[bold]GPU memory in use[/] after capture: {s['gpu_memory_used'] / 2**30:.2f} GiB")
        if "median_ms" in s:
            console.print(f"[bold]average step[/] ({s['window']}, median): {s['median_ms']:.2f} ms, "
                          f"{s['median_tokens_per_s']:,.0f} tok/s, MFU {s['median_mfu']:.1f}%, "
                          f"host {s['median_host_us']:.0f} µs per step outside the graph")


@cli.command()
@click.option("-i", "--train-tokens", default="data/tiny_shakespeare_train.bin", show_default=True, help="Training token file.")
@click.option("-j", "--val-tokens", default="data/tiny_shakespeare_val.bin", show_default=True, help="Validation token file.")
@click.option("-o", "--log", help="Log file: step, train loss, val loss (llm.c format).")
@click.option("-b", "--batch-size", "batch", default=4, show_default=True, help="Batch size B.")
@click.option("-t", "--seq-len", "seq", default=1024, show_default=True, help="Sequence length T.")
@click.option("-l", "--lr", default=3e-4, show_default=True, help="Learning rate.")
@click.option("-v", "--val-every", default=20, show_default=True, help="Validation loss every N steps (0: never).")
@click.option("-m", "--val-batches", default=20, show_default=True, help="Validation batches (capped by the file).")
@click.option("-s", "--sample-every", default=20, show_default=True, help="Sample every N steps (0: never).")
@click.option("-g", "--gen-tokens", default=64, show_default=True, help="Tokens to generate per sample.")
@click.option("--init", default="d12", show_default=True, help="Checkpoint (v3 fp32 / v5 bf16) or fresh model: d12, d24, d36, d48, tiny.")
@click.option("--steps", type=int, help="Optimizer steps (default: one epoch of the training file).")
@click.option("--attention", type=click.Choice(["softmax", "relu"]), default="softmax", show_default=True)
@click.option("--tf32/--no-tf32", default=True, show_default=True, help="TF32 tensor cores for the matmuls.")
@click.option("--save", type=click.Path(dir_okay=False), help="Write a v3 checkpoint here at the end (and on Ctrl-C).")
@click.option("--seed", default=0, show_default=True, help="Seed of a fresh init.")
@click.option("--warmup", default=0, show_default=True, help="Linear learning-rate warm-up steps.")
@click.option("--final-lr-frac", default=1.0, show_default=True, help="Cosine-decay the learning rate to this fraction (1: constant).")
def train(**kw):
    """Train GPT-2 (fp32) with the promoted kernels, one CUDA graph per step.

    \b
    workbench prepro tinyshakespeare      once: writes data/tiny_shakespeare_{train,val}.bin
    workbench train                       GPT-2 124M from scratch, B=4, T=1024, one epoch
    workbench train -b 8 --steps 50 --save out/model.bin
    """
    import importlib.util
    from train.trainer import TrainOptions, train as run_training
    if importlib.util.find_spec("pycuda") is None:
        raise NoGPU("PyCUDA is not installed. On a machine with a CUDA GPU and toolkit: pip install -e '.[gpu]' "
                    "(or use Modal: modal run modal_app.py --command \"train\")")
    for name in ("train_tokens", "val_tokens"):
        if not Path(kw[name]).exists():
            raise WorkbenchError(f"{kw[name]} does not exist: run `workbench prepro tinyshakespeare` first, "
                                 f"or pass {'-i' if name == 'train_tokens' else '-j'}")
    opts = TrainOptions(**kw)
    summary = run_training(opts, TrainUI())
    if summary.get("stopped") and not summary["stopped"].startswith("interrupted"):
        sys.exit(1)


# -- prepro: the trainer's inputs in llm.c's file formats (no GPU needed) -------------------------
@cli.group()
def prepro():
    """Prepare the trainer's inputs in llm.c's file formats: tokens, tokenizer, GPT-2 weights."""


def _written_table(written) -> Table:
    table = Table(box=None, pad_edge=False)
    table.add_column("wrote", style="bold cyan", no_wrap=True)
    table.add_column("bytes", justify="right")
    table.add_column("holds")
    for path, what in written.files.items():
        table.add_row(escape(str(path)), f"{path.stat().st_size:,}", escape(what))
    return table


@prepro.command("tinyshakespeare")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Tokenize this local copy instead of downloading the text.")
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the text and the .bin files.")
def prepro_tinyshakespeare_cmd(input_path, out_dir):
    """Download tiny Shakespeare (sha256 checked) and tokenize it with GPT-2's BPE into
    tiny_shakespeare_val.bin (32,768 tokens), tiny_shakespeare_train.bin (305,260) and
    gpt2_tokenizer.bin."""
    from rich.progress import DownloadColumn, TransferSpeedColumn

    from train import prepro as pp
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  console=err_console, transient=True) as progress:
        task = None

        def on_progress(done, total):
            nonlocal task
            if task is None:
                task = progress.add_task("downloading tiny Shakespeare", total=total)
            progress.update(task, completed=done, total=total)
        written = pp.prepro_tinyshakespeare(out_dir, input_path, on_progress)
    for note in written.notes:
        err_console.print(f"[yellow]{escape(note)}[/]")
    console.print(_written_table(written))


@prepro.command("gpt2")
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the .bin files.")
@click.option("--model", "model_name", default="gpt2", show_default=True,
              help="Hugging Face model id (gpt2, gpt2-medium, gpt2-large, gpt2-xl) or a local folder.")
@click.option("--tokens", "tokens_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Token file whose first batch makes the debug state [default: OUT/tiny_shakespeare_val.bin].")
def prepro_gpt2_cmd(out_dir, model_name, tokens_path):
    """Export GPT-2's weights (needs the hf extra: transformers, torch): gpt2_124M.bin (v3 fp32),
    gpt2_124M_bf16.bin (v5), gpt2_tokenizer.bin and gpt2_124M_debug_state.bin (B=4, T=64: logits,
    loss and every gradient by PyTorch)."""
    from train import prepro as pp
    with err_console.status(f"exporting {escape(model_name)} and computing its debug state"):
        written = pp.prepro_gpt2(out_dir, model_name, tokens_path)
    console.print(_written_table(written))


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="workbench")


if __name__ == "__main__":
    main()

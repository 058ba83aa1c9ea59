"""The trainer's verbs: promote, promoted (the trainer's kernel set), train, prepro (its inputs).

They wire the workbench's promote step to the trainer's sizes and kernel folder, and run the
trainer (train/). Options are checked before any GPU work, each failure one line naming the
option; train's options are described once, in train/options.py.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import click
from click.core import ParameterSource
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from train.backends import KERNELS_DIR
from train.errors import OptionError
from train.options import train_options
from train.prepro import MIN_SHARD_TOKENS, TEXT_SHARD_TOKENS
from train.ui import TrainUI

from .. import report
from ..errors import WorkbenchError
from ..isolate import DEFAULT_TIMEOUT
from .app import console, err_console


def _trainer_sizes(family) -> list[dict[str, int]]:
    from train.model import promotion_sizes
    return promotion_sizes(family.name, family.sizes)


# -- promote / promoted: the trainer's kernel set -----------------------------------------------
@click.command()
@click.argument("family", required=False)
@click.argument("version", required=False)
@click.option("--block-size", type=int, help="Use this block size instead of timing every one.")
@click.option("--best", "results", type=click.Path(dir_okay=False),
              help="Promote every family's fastest passing version from this bench result (JSON).")
@click.option("--timeout", default=DEFAULT_TIMEOUT * 3, show_default=True, type=click.FloatRange(min=1),
              help="Seconds per version check.")
@click.option("--deterministic", is_flag=True,
              help="Promote as the family's deterministic stand-in (FAMILY@deterministic), which `train "
                   "--deterministic` uses where the promoted version adds floats with atomics.")
@click.option("--precision", "precisions", multiple=True, type=click.Choice(["fp32", "bf16"]),
              help="With --best: only the winners at this precision (repeatable; default: every precision).")
@click.pass_obj
def promote(project, family, version, block_size, results, timeout, deterministic, precisions):
    """Re-check a version at the trainer's shapes and test sizes, then freeze it (with its best
    block size) into train/kernels/ for `workbench train`.

    \b
    workbench promote layernorm_forward 6            time every block size, keep the best
    workbench promote layernorm_forward 6 --block-size 256
    workbench promote --best results.json            each family's winner from a bench
    workbench promote encoder_backward 3 --deterministic   the stand-in for train --deterministic

    A version bound to one GPU arch (its header's arch, e.g. sm_90a) keeps the version it replaces
    as its fallback: the trainer runs that one on other GPUs and where the new one's preconditions
    fail (say, another head size).
    """
    from .. import promote as pm
    from ..bench import Options, Session, require_pycuda
    from ..results import load

    from train.model import PROMOTION_SHAPES
    variant = pm.DETERMINISTIC if deterministic else None
    if results:
        if family or version:
            raise WorkbenchError("give FAMILY VERSION, or --best RESULTS.json, not both")
        ranked = pm.ranked(load(results))
        wanted = {key: [(project.family(key[0]).version(n), bs) for n, bs in cands]
                  for key, cands in ranked.items()
                  if key[0] in project.family_names() and _trainer_sizes(project.family(key[0]))
                  and (not precisions or key[1] in precisions)}
        if not wanted:
            raise WorkbenchError(f"{results} has no passing version of a family the trainer calls")
    else:
        if not (family and version):
            raise WorkbenchError("give FAMILY VERSION, or --best RESULTS.json")
        v = project.family(family).version(version)
        if not _trainer_sizes(v.family):
            raise WorkbenchError(f"the trainer does not call {family}; only the families it calls can be promoted")
        wanted = {(family, v.precision): [(v, block_size)]}
    require_pycuda()
    failures = 0
    # Two seeds: the trainer's sizes are large (the lm head's reference alone is a 158 GFLOP GEMM).
    with Session(project, Options(timeout=timeout, torch=False, seeds=2)) as session, \
            err_console.status("starting") as status:
        session.progress = lambda text: status.update(escape(text))
        session.device()
        for (fam_name, precision), candidates in wanted.items():
            # --best: the family's own entry and one per named variant among the candidates (tf32, cudnn);
            # one version: the entry it belongs to
            if results:
                entries = [variant] if variant else [None, *sorted({v.variant for v, _ in candidates if v.variant})]
            else:
                entries = [variant or candidates[0][0].variant]
            for entry in entries:
                try:
                    done = pm.promote_best(session, candidates, _trainer_sizes(project.family(fam_name)),
                                           KERNELS_DIR, PROMOTION_SHAPES, entry)
                except pm.PromoteError as e:
                    failures += 1
                    err_console.print(f"[bold red]not promoted:[/] {escape(str(e))}")
                    continue
                e, prev = done.entry, done.previous
                was = f"was {prev['version']} at block {prev['block_size']}" if prev else "new"
                console.print(f"[green]promoted[/] {pm.entry_key(fam_name, precision, e.get('variant'))} {e['version']} "
                              f"({escape(e['title'])}) at block size {e['block_size']}: "
                              f"{report.fmt_us(e['median_us'])} at {e['timed_at']} [dim]({was})[/]")
                if pm.FALLBACK in e:
                    console.print(f"  off {e['arch']}, and at sizes its preconditions exclude, the trainer runs "
                                  f"version {e[pm.FALLBACK]['version']} ({escape(e[pm.FALLBACK]['title'])}), kept as its fallback")
    if failures:
        sys.exit(1)


@click.command()
def promoted():
    """List the trainer's kernels and where each came from."""
    from ..promote import MANIFEST, read_manifest
    manifest = read_manifest(KERNELS_DIR)
    if not manifest["kernels"]:
        raise WorkbenchError(f"nothing promoted yet ({KERNELS_DIR / MANIFEST} is empty)")
    where = KERNELS_DIR.relative_to(Path.cwd()) if KERNELS_DIR.is_relative_to(Path.cwd()) else KERNELS_DIR
    console.print(report.promoted_table(manifest, str(where)))


# -- train ----------------------------------------------------------------------------------------
class OneLineErrors(click.Command):
    """A bad option is one line naming it (as the workbench prints every error), not click's usage
    block: the group prints this OptionError and exits with status 2."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise OptionError(e.format_message()) from None


INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C or SIGTERM (after its checkpoint), as a shell's


@click.command(cls=OneLineErrors)
@train_options
def train(**kw):
    """Train GPT-2 (fp32 or bf16) with the promoted kernels, one CUDA graph per step. Under
    `mpirun -np N` each process drives one GPU (its local rank's). Ctrl-C or SIGTERM: the run
    finishes its step, checkpoints (with --checkpoint-every) and exits with status 130.

    \b
    workbench prepro tinyshakespeare      once: writes data/tiny_shakespeare_{train,val}.bin
    workbench train                       GPT-2 124M from scratch, B=4, T=1024, one epoch
    workbench train -b 8 --steps 50 --save out/model.bin
    workbench train --steps 5000 --checkpoint-every 500 --keep 2     then, after a stop: --resume latest
    mpirun -np 8 workbench train -b 16 --total-batch 524288 --zero 1
    workbench train -i 'data/text_train_*.bin' -j 'data/text_val_*.bin'     shards from `prepro text`
    """
    from ..bench import require_pycuda

    from train.distributed import DRAIN_S, connect, drain_output, launch_from_env
    from train.options import RunComplete, TrainOptions, prepare
    from train.trainer import SilentUI, train as run_training
    ctx = click.get_current_context()
    given = {ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT}
    explicit = frozenset(name for name in kw if ctx.get_parameter_source(name) in given)
    launch = launch_from_env()
    try:
        run = prepare(TrainOptions(**kw, explicit=explicit), launch)  # every check, before any GPU work
    except RunComplete as done:
        if launch.rank == 0:
            console.print(f"[green]{escape(str(done))}[/]")
        return
    require_pycuda()
    dist = connect(launch, run.opts.comm_timeout)
    summary = run_training(run, TrainUI(console) if dist.is_root else SilentUI(), dist)
    closed = dist.close()
    stopped = summary.get("stopped")
    code = 0 if not stopped else INTERRUPTED if stopped.startswith("interrupted") else 1
    if not closed:  # NCCL's threads may hold the interpreter's exit: leave without them
        sys.stdout.flush()
        sys.stderr.flush()
        drain_output(DRAIN_S)
        os._exit(code)
    sys.exit(code)


# -- prepro: the trainer's inputs in llm.c's file formats (no GPU needed) -------------------------
@click.group()
def prepro():
    """Prepare the trainer's inputs in llm.c's file formats: tokens, tokenizer, GPT-2 weights."""


@contextmanager
def byte_progress(what: str, eta: bool = False):
    """A transient progress bar over bytes on stderr; yields the callback (bytes done, total)."""
    columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()]
    with Progress(*columns, *([TimeRemainingColumn()] if eta else []), console=err_console,
                  transient=True) as progress:
        task = None

        def on_progress(done, total):
            nonlocal task
            if task is None:
                task = progress.add_task(what, total=total)
            progress.update(task, completed=done, total=total)
        yield on_progress


def written_report(written) -> None:
    """A prepro step's notes (yellow, stderr) and the table of the files it wrote."""
    for note in written.notes:
        err_console.print(f"[yellow]{escape(note)}[/]")
    console.print(report.written_table(written.files))


@prepro.command("tinyshakespeare")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Tokenize this local copy instead of downloading the text.")
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the text and the .bin files.")
@click.option("--force", is_flag=True, help="Replace data files that hold something else (e.g. another --input).")
def prepro_tinyshakespeare_cmd(input_path, out_dir, force):
    """Download tiny Shakespeare (sha256 checked) and tokenize it with GPT-2's BPE into
    tiny_shakespeare_val.bin (32,768 tokens), tiny_shakespeare_train.bin (305,260) and
    gpt2_tokenizer.bin."""
    from train import prepro as pp
    from train.options import writable_folder
    writable_folder(out_dir, "--out", create=False)
    with byte_progress("downloading tiny Shakespeare") as on_progress:
        written = pp.prepro_tinyshakespeare(out_dir, input_path, on_progress, force)
    written_report(written)


@prepro.command("gpt2")
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the .bin files.")
@click.option("--model", "model_name", default="gpt2", show_default=True,
              help="Hugging Face model id (gpt2, gpt2-medium, gpt2-large, gpt2-xl) or a local folder.")
@click.option("--tokens", "tokens_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Token file whose first batch makes the debug state [default: OUT/tiny_shakespeare_val.bin].")
@click.option("--force", is_flag=True, help="Replace output files that hold something else.")
def prepro_gpt2_cmd(out_dir, model_name, tokens_path, force):
    """Export GPT-2's weights (needs the hf extra: transformers, torch): gpt2_124M.bin (v3 fp32),
    gpt2_124M_bf16.bin (v5), gpt2_tokenizer.bin and gpt2_124M_debug_state.bin (B=4, T=64: logits,
    loss and every gradient by PyTorch)."""
    from train import prepro as pp
    from train.options import writable_folder
    writable_folder(out_dir, "--out", create=False)
    with err_console.status(f"exporting {escape(model_name)} and computing its debug state"):
        written = pp.prepro_gpt2(out_dir, model_name, tokens_path, force=force)
    written_report(written)


@prepro.command("text", cls=OneLineErrors)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the shards and gpt2_tokenizer.bin.")
@click.option("--name", default="text", show_default=True, help="The shards' name: letters, digits, _ and - only.")
@click.option("--shard-size", type=click.IntRange(MIN_SHARD_TOKENS, 2**31 - 1), default=TEXT_SHARD_TOKENS,
              show_default=True, metavar="TOKENS", help="Tokens per shard (every shard but the last of each split).")
@click.option("--val-tokens", type=click.IntRange(min=1), metavar="N",
              help="The first N tokens are the validation split [default: 10% of all tokens, rounded down].")
@click.option("--force", is_flag=True, help="Replace NAME's existing shards (removing those this run does not "
                                            "write) and a gpt2_tokenizer.bin that differs.")
def prepro_text_cmd(files, out_dir, name, shard_size, val_tokens, force):
    """Tokenize your own UTF-8 text files with GPT-2's BPE into llm.c token shards (version 1,
    uint16) for `workbench train`.

    Each FILE is one document: <|endoftext|>, then its text's tokens; the documents follow one
    another in the order given. The stream's first --val-tokens tokens (default: 10%) are the
    validation split, the rest the training split, each cut into shards of --shard-size tokens
    (the last of each split holds what is left):

    \b
      OUT/NAME_val_000000.bin, OUT/NAME_val_000001.bin, ...
      OUT/NAME_train_000000.bin, OUT/NAME_train_000001.bin, ...
      OUT/gpt2_tokenizer.bin    the trainer decodes its samples with it

    Files are read a few MB at a time and each shard is written once it is full, so the corpus
    need not fit in memory; the shards appear only once all are written. Existing shards of NAME
    are replaced only with --force.

    \b
    workbench prepro text notes/*.txt --name notes --shard-size 10000000
    workbench train -i 'data/notes_train_*.bin' -j 'data/notes_val_*.bin'
    """
    import shlex

    from train import prepro as pp
    from train.options import writable_folder
    writable_folder(out_dir, "--out", create=False)
    with byte_progress("tokenizing", eta=True) as on_progress:
        written = pp.prepro_text(files, out_dir, name, shard_size, val_tokens, on_progress, force)
    written_report(written)

    def count(n, what):
        return f"{n:,} {what}{'' if n == 1 else 's'}"
    tokens, shards, globs = written.tokens, written.shards, written.globs
    console.print(escape(f"{count(tokens['train'], 'training token')} in {count(shards['train'], 'shard')}, "
                         f"{count(tokens['val'], 'validation token')} in {count(shards['val'], 'shard')}: "
                         f"workbench train -i {shlex.quote(globs['train'])} -j {shlex.quote(globs['val'])}"),
                  soft_wrap=True)


commands = [promote, promoted, train, prepro]

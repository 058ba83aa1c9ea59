"""The trainer's verbs of the `workbench` command line: promote, promoted, train, prepro.

workbench/cli.py attaches `commands` to its group; they wire the workbench's promote step to the
trainer's sizes and kernel folder, and run the trainer. Options are checked here, before any GPU
work, each failure one line naming the option.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from workbench import report
from workbench.cli import console, err_console
from workbench.errors import NoGPU, WorkbenchError
from workbench.isolate import DEFAULT_TIMEOUT

from .backends import KERNELS_DIR


def _trainer_sizes(family) -> list[dict[str, int]]:
    from .model import promotion_sizes
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
@click.pass_obj
def promote(project, family, version, block_size, results, timeout):
    """Re-check a version at the trainer's shapes and test sizes, then freeze it (with its best
    block size) into train/kernels/ for `workbench train`.

    \b
    workbench promote layernorm_forward 6            time every block size, keep the best
    workbench promote layernorm_forward 6 --block-size 256
    workbench promote --best results.json            each family's winner from a bench
    """
    from workbench import promote as pm
    from workbench.bench import Options, Session, require_pycuda
    from workbench.results import load

    from .model import PROMOTION_SHAPES
    if results:
        if family or version:
            raise WorkbenchError("give FAMILY VERSION, or --best RESULTS.json, not both")
        ranked = pm.ranked(load(results))
        wanted = {key: [(project.family(key[0]).version(n), bs) for n, bs in cands]
                  for key, cands in ranked.items()
                  if key[0] in project.family_names() and _trainer_sizes(project.family(key[0]))}
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
            try:
                done = pm.promote_best(session, candidates, _trainer_sizes(project.family(fam_name)),
                                       KERNELS_DIR, PROMOTION_SHAPES)
            except pm.PromoteError as e:
                failures += 1
                err_console.print(f"[bold red]not promoted:[/] {escape(str(e))}")
                continue
            e, prev = done.entry, done.previous
            was = f"was {prev['version']} at block {prev['block_size']}" if prev else "new"
            console.print(f"[green]promoted[/] {fam_name} {e['version']} ({escape(e['title'])}, {precision}) at block "
                          f"size {e['block_size']}: {report.fmt_us(e['median_us'])} at {e['timed_at']} [dim]({was})[/]")
    if failures:
        sys.exit(1)


@click.command()
def promoted():
    """List the trainer's kernels and where each came from."""
    from workbench.promote import MANIFEST, read_manifest
    manifest = read_manifest(KERNELS_DIR)
    if not manifest["kernels"]:
        raise WorkbenchError(f"nothing promoted yet ({KERNELS_DIR / MANIFEST} is empty)")
    where = KERNELS_DIR.relative_to(Path.cwd()) if KERNELS_DIR.is_relative_to(Path.cwd()) else KERNELS_DIR
    console.print(report.promoted_table(manifest, str(where)))


# -- train ----------------------------------------------------------------------------------------
@click.command()
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
    from .trainer import TrainOptions, train as run_training
    if importlib.util.find_spec("pycuda") is None:
        raise NoGPU("PyCUDA is not installed. On a machine with a CUDA GPU and toolkit: pip install -e '.[gpu]' "
                    "(or use Modal: modal run modal_app.py --command \"train\")")
    for name in ("train_tokens", "val_tokens"):
        if not Path(kw[name]).exists():
            raise WorkbenchError(f"{kw[name]} does not exist: run `workbench prepro tinyshakespeare` first, "
                                 f"or pass {'-i' if name == 'train_tokens' else '-j'}")
    opts = TrainOptions(**kw)
    summary = run_training(opts, report.TrainUI(console))
    if summary.get("stopped") and not summary["stopped"].startswith("interrupted"):
        sys.exit(1)


# -- prepro: the trainer's inputs in llm.c's file formats (no GPU needed) -------------------------
@click.group()
def prepro():
    """Prepare the trainer's inputs in llm.c's file formats: tokens, tokenizer, GPT-2 weights."""


@prepro.command("tinyshakespeare")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Tokenize this local copy instead of downloading the text.")
@click.option("--out", "out_dir", default="data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the text and the .bin files.")
def prepro_tinyshakespeare_cmd(input_path, out_dir):
    """Download tiny Shakespeare (sha256 checked) and tokenize it with GPT-2's BPE into
    tiny_shakespeare_val.bin (32,768 tokens), tiny_shakespeare_train.bin (305,260) and
    gpt2_tokenizer.bin."""
    from . import prepro as pp
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
    console.print(report.written_table(written.files))


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
    from . import prepro as pp
    with err_console.status(f"exporting {escape(model_name)} and computing its debug state"):
        written = pp.prepro_gpt2(out_dir, model_name, tokens_path)
    console.print(report.written_table(written.files))


commands = [promote, promoted, train, prepro]

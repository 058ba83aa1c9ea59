"""The `workbench` command group: the consoles, the one-line errors, and what the verbs share.

Every verb module of this package (kernels, tools, diff, trainer) registers its commands on `cli`;
workbench/cli/__init__.py imports them all. A WorkbenchError raised anywhere below a command is
one red line on stderr and its exit code (2 for a usage error, 1 for work that failed, 3 for a
missing GPU, 4 for a regression in compare).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..errors import SizesError, UsageError, WorkbenchError
from ..family import Project

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class Workbench(click.Group):
    """Turns a WorkbenchError anywhere below into one red line and its exit code; loads the
    modules of `lazy` commands (name -> module of this package) when one of them is asked for."""

    lazy: dict[str, str] = {}

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy:
            import importlib
            module = importlib.import_module(f"{__package__}.{self.lazy[name]}")
            for command in module.commands:
                self.add_command(command)
        return super().get_command(ctx, name)

    def list_commands(self, ctx):
        return sorted({*self.commands, *self.lazy})

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
    workbench promote --best r.json       freeze the winners into the trainer
    workbench train                       train GPT-2 with them
    """
    ctx.obj = Project(root)


def progress_bar() -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console, transient=True)


def refuse_unmet(version, sizes: dict[str, int]) -> None:
    """A one-line SizesError, before any GPU work, where the version's preconditions refuse the sizes."""
    if unmet := version.unmet(sizes):
        raise SizesError(f"{version.label} refuses {version.family.format_sizes(sizes)}: it requires {' and '.join(unmet)}")


def writable_file(path: str | None, force: bool = False, what: str = "--json") -> None:
    """Fail now, before any GPU work, if `path` cannot be written (or exists and force is off)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{what} {path}: is a folder")
    if not p.parent.exists():
        raise UsageError(f"{what} {path}: folder {p.parent} does not exist")
    if p.exists() and not force:
        raise UsageError(f"{what} {path}: exists; pass --force to replace it")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{what} {path}: not writable")


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="workbench")

"""The command line, the top layer: references/ -> workbench/ -> train/ -> workbench.cli.

One module per group of verbs, each registering its commands on the group in app.py:

    app.py      the group, the consoles, one-line errors, what the verbs share
    kernels.py  list, show, compile, run, bench, check, device
    tools.py    sanitize, doctor, compare, plot, new
    diff.py     diff: two versions of a family side by side
    profile.py  profile: versions under Nsight Compute, side by side
    trainer.py  promote, promoted, train, prepro: the trainer's verbs

Nothing below this package imports it (tests/test_architecture.py checks that).
"""

from . import diff, kernels, profile, tools, trainer
from .app import cli, console, err_console, main

for _module in (tools, diff, profile, trainer):
    for _command in _module.commands:
        cli.add_command(_command)

__all__ = ["cli", "console", "err_console", "main", "diff", "kernels", "profile", "tools", "trainer"]

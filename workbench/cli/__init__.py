"""The command line, the top layer: references/ -> workbench/ -> train/ -> workbench.cli.

One module per group of verbs, each registering its commands on the group in app.py:

    app.py      the group, the consoles, one-line errors, what the verbs share
    kernels.py  list, show, compile, run, bench, check, device
    tools.py    sanitize, doctor, compare, plot, new
    diff.py     diff: two versions of a family side by side
    profile.py  profile: versions under Nsight Compute, side by side
    trainer.py  promote, promoted, train, prepro: the trainer's verbs (diff's and these load
                when asked for: cli.lazy)

Nothing below this package imports it (tests/test_architecture.py checks that).
"""

from . import kernels, profile, tools
from .app import cli, console, err_console, main

for _module in (tools, profile):
    for _command in _module.commands:
        cli.add_command(_command)

# diff's and the trainer's verbs load their module when one of them is run (or --help lists them):
# pygments (diff) and the trainer's modules were ~0.2 s of every other command's start on a
# machine whose Python packages have no cached bytecode (the GPU machine's)
cli.lazy = {"diff": "diff", "promote": "trainer", "promoted": "trainer", "train": "trainer", "prepro": "trainer"}

__all__ = ["cli", "console", "err_console", "main", "kernels", "profile", "tools"]

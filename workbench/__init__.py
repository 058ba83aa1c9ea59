"""workbench: a command-line workbench for CUDA kernels, and a GPT-2 trainer built from them.

The modules map to the steps of the verbs: family (the contract), compile, launch, check, timing,
isolate/worker (one process per GPU job), runner (the core loop), report (tables and JSON), cli.
"""

__version__ = "0.1.0"

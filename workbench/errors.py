"""The errors a user sees as one clear line instead of a traceback."""


class WorkbenchError(Exception):
    """A problem the user can act on; the CLI prints the message and exits with `exit_code`."""

    exit_code = 1


class UsageError(WorkbenchError):
    """A bad option or argument: conflicting options, a path that cannot be written, an input
    file that is not one. Exit code 2, like click's own usage errors; 1 is kept for work that ran
    and failed (a check, a compile), 3 for a missing GPU, 4 for a regression in `compare`."""

    exit_code = 2


class ContractError(WorkbenchError):
    """A family contract or version header is malformed."""


class UnknownName(UsageError):
    """An unknown family, version or block size; the message names what exists."""


class SizesError(UsageError):
    """Sizes that are malformed or that a family or version cannot handle."""


class NoGPU(WorkbenchError):
    """PyCUDA is missing or no CUDA device can be used."""

    exit_code = 3


class CompileError(WorkbenchError):
    """nvcc rejected a version; the message holds its diagnostics against the version's file."""


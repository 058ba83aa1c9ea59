"""The errors a user sees as one clear line instead of a traceback."""


class WorkbenchError(Exception):
    """A problem the user can act on; the CLI prints the message and exits with `exit_code`."""

    exit_code = 1


class ContractError(WorkbenchError):
    """A family contract or version header is malformed."""


class UnknownName(WorkbenchError):
    """An unknown family, version or block size; the message names what exists."""

    exit_code = 2


class SizesError(WorkbenchError):
    """Sizes that are malformed or that a family or version cannot handle."""

    exit_code = 2


class NoGPU(WorkbenchError):
    """PyCUDA is missing or no CUDA device can be used."""

    exit_code = 3


class CompileError(WorkbenchError):
    """nvcc rejected a version; the message holds its diagnostics against the version's file."""


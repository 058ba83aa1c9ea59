"""The trainer's one error type: a bad input the user can act on, shown as one line."""

from workbench.errors import WorkbenchError


class TrainError(WorkbenchError):
    """A trainer input (checkpoint, token, tokenizer or debug-state file, data set, model, option)
    that is missing or malformed; the message names the file or option, what was expected and
    what was found."""

"""The trainer's one error type: a bad input the user can act on, shown as one line."""

from workbench.errors import WorkbenchError


class TrainError(WorkbenchError):
    """A trainer input (checkpoint, token, tokenizer or debug-state file, data set, model, option)
    that is missing or malformed; the message names the file or option, what was expected and
    what was found."""


class OptionError(TrainError):
    """A `workbench train` option that is out of range or contradicts another (or a checkpoint):
    one line naming the option, before any GPU work; exit status 2, as click's usage errors."""

    exit_code = 2


def bad_option(option: str, message: str) -> OptionError:
    """The one-line error for `option`, in click's own words for a bad value."""
    return OptionError(f"Invalid value for '{option}': {message}")

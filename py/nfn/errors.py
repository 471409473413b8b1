"""The one exception type the command line turns into a one-line error and exit 1."""


class UserError(Exception):
    """Bad input or a missing prerequisite, explained in one line for the user."""


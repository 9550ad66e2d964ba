"""One error type the CLI turns into a clean message and exit code 2."""


class KitError(Exception):
    """A user-facing error: the message names the file, the field and the fix."""

"""One error type the CLI turns into a one-line message and exit code 1 (kit.crash.EXIT_ERROR;
2 is argparse's usage error, 70 a bug)."""


class KitError(Exception):
    """A user-facing error: the message names the file, the field and the fix."""

"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class ElectraError(Exception):
    """A user-facing error: bad input, bad configuration, corrupt files."""

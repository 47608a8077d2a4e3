"""The exceptions the CLI turns into one line on stderr and a distinct exit status."""

# sysexits.h EX_TEMPFAIL ("try again later"): a run stopped on SIGTERM/SIGUSR1 after saving
# what `--resume` needs. Schedulers and wrapper scripts can requeue on this status.
EXIT_PREEMPTED = 75


class ElectraError(Exception):
    """A user-facing error: bad input, bad configuration, corrupt files."""


class Preempted(Exception):
    """Training stopped cleanly on a signal at a step boundary; the message says where it
    stopped and how to continue."""


def install_hint(extra: str) -> str:
    """How to get an optional extra. electra is installed from its checkout (editable), so the
    hint names the checkout rather than a package index."""
    return f"pip install -e '.[{extra}]' in the electra checkout"

"""`planner` command line: parses options, calls one API function, prints. No logic lives here.

Exit codes: 0 ok, 1 infeasible plan (or `perf` with no answer), 2 bad input (one line on stderr, no traceback; --debug shows it), 3 a defect
of the planner, 4 the solver stopped at its time limit before it found any plan, 5 `plan --verify` (after --repair
when given) found a simulated latency limit conclusively missed, 6 it found none missed but one inconclusive
(`--allow-inconclusive`: 0). A closed stdout
(`planner plan ... | head`) ends the process by SIGPIPE, quietly: shells report 141.
"""

from __future__ import annotations

import sys

from planner.cli import benching, data, deploying, exploring, planning  # noqa: F401 (each registers its commands on `app`)
from planner.cli.common import _PlainLines, _Stages, app  # noqa: F401 (tests read the progress displays here)


def _default_sigpipe() -> None:
    """A closed stdout (`planner plan ... | head`) ends the command quietly as any Unix tool does: killed by
    SIGPIPE, which a shell reports as 141 (128 + 13), never 1 (an infeasible plan) or a traceback. Python ignores
    SIGPIPE and raises BrokenPipeError instead, which click turns into exit code 1."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        except ValueError:  # not the main thread (an embedding program): leave its handling as it is
            pass


def _one_command_app(argv: list[str]):
    """`planner COMMAND ...` where COMMAND is one of the app's own commands: the group `planner` holding that command
    alone, else None (no command, an option first, a command group, an unknown name, shell completion). Typer builds
    every command's parameters before it parses the line (about 0.07 s of a plan's start); the one command asked for
    parses, helps and fails as it does in the whole group."""
    import os

    if not argv or argv[0].startswith("-") or any(name.endswith("_COMPLETE") for name in os.environ):
        return None
    import copy

    import typer.main

    chosen = [info for info in app.registered_commands
              if (info.name or typer.main.get_command_name(info.callback.__name__)) == argv[0]]  # fmt: skip
    if len(chosen) != 1:
        return None
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = chosen, []
    return typer.main.get_group(one)  # a group, as `planner` is (typer would make a lone command the program itself)


def main() -> None:
    """The `planner` program (the console script and `python -m planner`; tests call `app`)."""
    _default_sigpipe()
    _collect_less_often()
    one = _one_command_app(sys.argv[1:])
    try:
        if one is None:
            app()
        else:
            one()
    finally:
        _spare_the_exit_collection()


GEN0_THRESHOLD = 20_000  # container allocations between young collections (Python's default: 700)


def _collect_less_often() -> None:
    """A young-generation collection every GEN0_THRESHOLD allocations of containers rather than every 700: a command
    builds its catalog, scenario and plan as tens of thousands of short-lived objects that reference counting frees,
    and each collection also walks the survivors (about 18 ms of the contact-center plan's 0.39 s on 2 cores; the
    AMD what-if case and its peak memory unchanged). Cyclic garbage still goes, a little later: at most that many
    containers wait. benchmarks/startup.py times it."""
    import gc

    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)


def _spare_the_exit_collection() -> None:
    """Move every object left to the collector's permanent generation as the command ends: the interpreter's exit
    then skips its last full collection over them (about 45 ms of the contact-center plan's 0.43 s on 2 cores:
    numpy, pydantic's schemas and the catalog are hundreds of thousands of objects), and the process ends as soon.
    Only cyclic garbage left at exit is affected (its `__del__` is not called, which Python never promises at exit);
    files are written and closed by then, `atexit` handlers (temporary folders, worker pools, Ray) still run, and
    standard output and error are still flushed. benchmarks/startup.py times it."""
    import gc

    gc.freeze()


if __name__ == "__main__":
    main()

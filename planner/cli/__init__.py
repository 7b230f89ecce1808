"""`planner` command line: parses options, calls one API function, prints. No logic lives here.

Exit codes: 0 ok, 1 infeasible plan (or `perf` with no answer), 2 bad input (one line on stderr, no traceback; --debug shows it), 3 a defect
of the planner, 4 the solver stopped at its time limit before it found any plan, 5 `plan --verify` (after --repair
when given) found a simulated latency limit conclusively missed, 6 it found none missed but one inconclusive
(`--allow-inconclusive`: 0). A closed stdout
(`planner plan ... | head`) ends the process by SIGPIPE, quietly: shells report 141.
"""

from __future__ import annotations

import sys

from planner.cli import benching, data, deploying, exploring, planning  # noqa: F401,E402 (each registers its commands on `app`)
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
    _default_sigpipe()
    one = _one_command_app(sys.argv[1:])
    if one is None:
        app()
    else:
        one()


if __name__ == "__main__":
    main()

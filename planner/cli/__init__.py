"""`planner` command line: parses options, calls one API function, prints. No logic lives here.

Exit codes: 0 ok, 1 infeasible plan (or `perf` with no answer), 2 bad input (one line on stderr, no traceback; --debug shows it), 3 a defect
of the planner, 4 the solver stopped at its time limit before it found any plan, 5 `plan --verify` (after --repair
when given) found a simulated latency limit conclusively missed, 6 it found none missed but one inconclusive
(`--allow-inconclusive`: 0). A closed stdout
(`planner plan ... | head`) ends the process by SIGPIPE, quietly: shells report 141.
"""

from __future__ import annotations

from planner.cli import data, deploying, exploring, planning  # noqa: F401,E402 (each registers its commands on `app`)
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


def main() -> None:
    _default_sigpipe()
    app()


if __name__ == "__main__":
    main()

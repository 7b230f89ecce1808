"""The command's time limit: one monotonic deadline that every long stage checks (issue 33).

`--time-limit S` bounds the whole command, not only the solver: the CLI opens `time_limit(S)` around the command's
body, and each long stage calls `check(stage)` at a grain of well under a second (candidate enumeration per
workload x system x engine x bucket and per curve priced on other processes, every solve and re-solve through
`solver_seconds`, the simulation every few thousand requests, the sweep and sensitivity points). Past the deadline
`check` raises `TimeLimitError`, which names the stage: the CLI ends with exit code 4 and writes nothing. Without
`--time-limit` nothing is bounded but the solves (the scenario's `solver.time_limit_s`, as before).

The deadline is `time.monotonic()`, one clock for the whole machine on Linux, so processes forked for the parallel
stages inherit it and stop on their own; `TimeLimitError` pickles, so it reaches the parent as itself.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from planner.errors import PlannerError

_deadline: float | None = None  # time.monotonic() at which the command must stop; None: unbounded
_limit_s: float | None = None  # the limit it came from (for messages)

CHECK_EVERY = 4096  # a loop over requests checks the clock this often (a few ms of simulation between checks)


class TimeLimitError(PlannerError):
    """The command reached `--time-limit` during `stage`: nothing was planned or written. Not a proof of anything
    about the scenario: a longer limit may finish."""

    def __init__(self, stage: str, time_limit_s: float):
        self.stage, self.time_limit_s = stage, time_limit_s
        super().__init__(
            f"stopped: the command reached its time limit of {time_limit_s:g} s while {stage}; nothing was written: "
            "raise --time-limit (it counts from the start of the command and bounds candidates, solves and simulation together)"
        )

    def __reduce__(self):  # raised on a forked worker, re-raised as itself in the parent
        return (TimeLimitError, (self.stage, self.time_limit_s))


@contextmanager
def time_limit(seconds: float | None):
    """Bound everything inside to `seconds` from now (None: no bound). Nested limits keep the earlier deadline."""
    global _deadline, _limit_s
    saved = _deadline, _limit_s
    if seconds is not None:
        candidate = time.monotonic() + seconds
        if _deadline is None or candidate < _deadline:
            _deadline, _limit_s = candidate, seconds
    try:
        yield
    finally:
        _deadline, _limit_s = saved


def remaining_s() -> float | None:
    """Seconds left before the deadline (negative once past), or None without one."""
    return None if _deadline is None else _deadline - time.monotonic()


def spent(stage: str) -> str:
    """'the command's --time-limit of 60 s had 0.4 s left after 59.6 s of {stage}' (with one), '' without one:
    what a note says of an alternative that was not priced for lack of time."""
    left = remaining_s()
    if left is None:
        return ""
    return f"the command's --time-limit of {_limit_s:g} s had {max(left, 0.0):.1f} s left after {_limit_s - left:.1f} s of {stage}"


def check(stage: str) -> None:
    """Raise TimeLimitError naming `stage` once the deadline has passed; nothing without one."""
    if _deadline is not None and time.monotonic() >= _deadline:
        raise TimeLimitError(stage, _limit_s)


def solver_seconds(limit_s: float, stage: str = "solving the integer program") -> float:
    """What a solve may take: its own limit, or what is left of the command's when that is less. Past the deadline
    the solve is not started (TimeLimitError)."""
    check(stage)
    left = remaining_s()
    return limit_s if left is None else max(min(limit_s, left), 0.01)


def monotonic_deadline(limit_s: float) -> float:
    """The time.monotonic() by which something given `limit_s` from now must end: the command's deadline if sooner."""
    at = time.monotonic() + limit_s
    return at if _deadline is None else min(at, _deadline)

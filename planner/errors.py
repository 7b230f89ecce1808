"""Error types: user mistakes are values with a message a user can act on, never tracebacks."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_ECHO_CHARS = 200  # characters of user text (a name, a version, a key) quoted in a message or a note
MAX_ECHO_ITEMS = 10  # items of a user's list (keys of a mapping, columns) named in a message
MAX_MESSAGE_CHARS = 2000  # a whole message: one line a user reads, never a flood (keeps every message far below 4 KiB)


def clip_text(value: Any, max_chars: int = MAX_ECHO_CHARS) -> str:
    """str(value) cut to `max_chars` characters, the cut said: every message or note that echoes user text (a model
    name, a tool version, a key) passes it through here, so that a 2 MB name becomes 200 characters, not 2 MB."""
    text = str(value)
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - max_chars:,} more characters)"


def bounded_listing(items: Iterable[Any], max_items: int = MAX_ECHO_ITEMS, max_chars: int = MAX_ECHO_CHARS) -> str:
    """'a, b, c' of at most `max_items` items (each clipped to `max_chars`), then 'and N more': a message naming
    the keys of a mapping with 200,000 of them names ten."""
    shown: list[str] = []
    more = 0
    for item in items:
        if len(shown) < max_items:
            shown.append(clip_text(item, max_chars))
        else:
            more += 1
    return ", ".join(shown) + (f" and {more:,} more" if more else "")


class PlannerError(Exception):
    """Base of every error the planner raises on purpose."""


@dataclass(frozen=True)
class InputProblem:
    """One thing wrong with an input file: where, which field, what is allowed."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class PlannerInputError(PlannerError):
    """Bad input (file, field, what is allowed). The CLI prints it on one line and exits with code 2."""

    def __init__(self, file: str, field: str, message: str):
        # the one bound on every input message: whatever a caller quoted, the line stays readable
        self.problem = InputProblem(clip_text(file, 4 * MAX_ECHO_CHARS), clip_text(field, MAX_ECHO_CHARS),
                                    clip_text(message, MAX_MESSAGE_CHARS))
        super().__init__(str(self.problem))

    @property
    def file(self) -> str:
        return self.problem.file

    @property
    def field(self) -> str:
        return self.problem.field


class InfeasiblePlanError(PlannerError):
    """No plan meets the scenario; `diagnosis` says which workload or limit and why, in words."""

    def __init__(self, diagnosis: list[str]):
        self.diagnosis = list(diagnosis)
        super().__init__("no feasible plan: " + "; ".join(self.diagnosis))


class SolverStoppedError(PlannerError):
    """The solver hit its time limit before it found any plan: not a proof that none exists."""

    def __init__(self, solver: str, time_limit_s: float):
        self.solver, self.time_limit_s = solver, time_limit_s
        super().__init__(
            f"stopped: the solver ({solver}) reached its time limit of {time_limit_s:g} s before finding any plan; "
            "this is not a proof that none exists: raise --time-limit"
        )


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest known id, or '' when nothing is close."""
    close = difflib.get_close_matches(str(value), list(known), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def unknown_id_message(kind: str, value: str, known: Iterable[str], listing_command: str, hint: str | None = None,
                       aliases: bool = False) -> str:
    """Message for an id that is not in the catalog, SkyPilot style: what, hint, where to look. `hint` replaces the
    closest-id suggestion (the catalog's own, drawn from aliases too); `aliases` says the ids have aliases."""
    known = sorted(known)
    hint = did_you_mean(value, known) if hint is None else hint
    return (
        f"unknown {kind} '{clip_text(value)}'.{hint} "
        f"Known: {', '.join(known)}{' (or one of their aliases)' if aliases else ''}. To list them: {listing_command}"
    )

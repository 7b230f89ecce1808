"""Names of catalog entries: their one normal form (NFKC, no invisible characters), aliases, accelerator counts
and resolution with "did you mean"."""

from __future__ import annotations

import difflib
import re
import unicodedata
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import short_repr

MAX_NAME_CHARS = 200  # an id, alias or name of a catalog entry; longer is a paste accident, not a name


def normalize_name(name: str) -> str:
    """The one form of a name that ids and aliases are matched in: Unicode NFKC (full-width and compatibility
    characters as their plain forms), format characters removed (Unicode category Cf: zero-width spaces and joiners
    U+200B-U+200D, word joiner U+2060, byte-order mark U+FEFF, soft hyphen, bidi marks), whitespace runs as one
    space, no space at either end. Two names that look alike are then one name."""
    if name.isascii():  # NFKC leaves ASCII as it is, and no ASCII character is a format character (Cf)
        return " ".join(name.split())
    text = unicodedata.normalize("NFKC", name)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return " ".join(text.split())


def name_problem(name: str) -> str | None:
    """Why a name (after `normalize_name`) cannot name an entry, or None."""
    cleaned = normalize_name(name)
    if not cleaned:
        return f"a name with visible characters (got {short_repr(name)}: empty once spaces and invisible characters are removed)"
    if len(cleaned) > MAX_NAME_CHARS:
        return f"a name of at most {MAX_NAME_CHARS} characters (got {len(cleaned):,})"
    return None


def clean_name(name: str) -> str:
    """A name field's value in normal form (`normalize_name`); ValueError when it is empty or too long."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return normalize_name(name)


# a catalog id or alias, or a name that refers to one (a scenario's model, systems, GPUs): stored normalized
Name = Annotated[str, AfterValidator(clean_name)]
Alias = Name



def _fold(name: str) -> str:
    """A name as ids and aliases are matched: normalized (`normalize_name`), without regard to case."""
    return normalize_name(name).casefold()


_COUNT = re.compile(r"^(?P<name>.+?):(?P<count>\d+)$")


def _strip_count(name: str) -> str:
    match = _COUNT.match(normalize_name(name))
    return match.group("name") if match else name


def accelerator_count(name: str) -> int | None:
    """The count of a SkyPilot accelerator name ('H100:8' -> 8), None without one."""
    match = _COUNT.match(normalize_name(name))
    return int(match.group("count")) if match else None


def _name_candidates(kind: str, name: str) -> list[str]:
    """Folded forms of a name to look up, most specific first."""
    name = normalize_name(name)
    if kind == "gpu":
        name = _strip_count(name)
    candidates = [_fold(name)]
    if kind == "model" and "/" in name:
        parts = [p for p in name.rstrip("/").split("/") if p]
        candidates += [_fold("/".join(parts[-2:])), _fold(parts[-1])] if parts else []
    return candidates


def name_index(entries: dict) -> dict[str, str]:
    """Folded id or alias -> id, for entries with `aliases`. The names after an organization
    ('Llama-3.3-70B-Instruct') are indexed too, unless two entries share one."""
    index: dict[str, str] = {}
    short: dict[str, set[str]] = {}
    for entry_id, entry in entries.items():
        for name in (entry_id, *entry.aliases):
            index[_fold(name)] = entry_id
            if "/" in name:
                short.setdefault(_fold(name.rsplit("/", 1)[1]), set()).add(entry_id)
    for name, ids in short.items():
        if len(ids) == 1 and name not in index:
            index[name] = next(iter(ids))
    return index


def closest_name(entries: dict, index: dict[str, str], kind: str, name: str) -> str:
    """" Did you mean 'id' (alias)?" for the id or alias closest to `name`, or ""."""
    folded = _fold(_strip_count(name) if kind == "gpu" else name)
    close = difflib.get_close_matches(folded, list(index), n=1, cutoff=0.6)
    if not close:
        return ""
    entry_id = index[close[0]]
    named = next((a for a in (entry_id, *entries[entry_id].aliases) if _fold(a) == close[0]), entry_id)
    return f" Did you mean '{entry_id}'" + (f" ({named})" if named != entry_id else "") + "?"


def resolve_name(entries: dict, index: dict[str, str], kind: str, name: str, file: str, field: str) -> str:
    """`Catalog.resolve` over `entries` and their `name_index`; a name empty once normalized, or too long, is
    refused as such (`name_problem`)."""
    problem = name_problem(str(name))
    if problem:
        raise PlannerInputError(file, field, problem)
    for candidate in _name_candidates(kind, str(name)):
        if candidate in index:
            return index[candidate]
    label = {"model": "model", "gpu": "GPU", "system": "system"}[kind]
    raise PlannerInputError(file, field, unknown_id_message(
        label, str(name), entries, f"planner catalog {kind}s", closest_name(entries, index, kind, str(name)), aliases=True,
    ))  # fmt: skip


def check_aliases(entries: dict, kind: str, files: dict[str, Path]) -> None:
    """Every id and alias names one entry: an alias shared by two entries, or equal to another entry's id,
    would make a name mean two things."""
    owner: dict[str, str] = {}
    for entry_id, entry in sorted(entries.items()):
        for name in (entry_id, *entry.aliases):
            folded = _fold(name)
            if owner.setdefault(folded, entry_id) != entry_id:
                raise PlannerInputError(
                    str(files[entry_id]), f"{kind}s[{entry_id}].aliases",
                    f"'{name}' already names {kind} '{owner[folded]}' (names match without regard to case, spaces "
                    "and invisible characters); an id or alias must name one entry",
                )  # fmt: skip


BENCHMARK_COLUMNS: tuple[str, ...] = (
    "source", "model", "gpu", "gpus", "tp", "precision", "isl", "osl", "concurrency", "run_kind", "statistic",
    "ttft_ms", "ttft_ms_bound", "tpot_ms", "tpot_ms_bound", "itl_ms", "request_throughput_rps",
    "output_tokens_per_s", "per", "engine", "engine_version", "notes", "provenance",
)  # fmt: skip
# tables written before metrics version 2 (planner/metrics.py) had no tpot_ms column: their itl_ms and itl_ms_bound
# were a request's mean gap, so such a table is read with them as tpot_ms and tpot_ms_bound
_VERSION_1_COLUMNS = {"itl_ms": "tpot_ms", "itl_ms_bound": "tpot_ms_bound"}

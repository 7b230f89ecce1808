"""Writing outputs without damage: never over an input, never half a file, never outside the asked folder.

- `check_not_an_input(out, inputs)`: an output path that is one of the command's input files is refused (`planner
  bom cc.yaml --out cc.yaml` would destroy the scenario);
- `write_text_atomic` / `write_bytes_atomic`: written to a temporary file in the same folder, then renamed over the
  target, so a failed write (disk full, interrupt) leaves the previous file intact;
- `prepare_report_folder`: a report folder must be new, empty, or hold a previous report (whose files are replaced,
  stale plots included); anything else needs `force`;
- `slug`: a file name from user text (a workload named `x/../../y` must not write outside the folder).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from planner.errors import PlannerInputError

REPORT_FILES = ("report.md", "report.html")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_not_an_input(out: Path | None, inputs, flag: str = "--out") -> None:
    """Refuse writing over one of the command's input files."""
    if out is None:
        return
    out = Path(out)
    for item in inputs:
        if item is None:
            continue
        item = Path(item)
        if _same(out, item) or out.resolve() == item.resolve():
            raise PlannerInputError(flag, flag.lstrip("-"), f"{out} is an input of this command; write the output elsewhere")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path` (all or nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def _is_report_file(entry: Path) -> bool:
    return entry.is_file() and (entry.name in REPORT_FILES or entry.suffix == ".png")


def check_report_folder(folder: Path, force: bool = False) -> None:
    """A report folder must be new, empty, or hold only a previous report's files; any other only with `force`."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PlannerInputError("--out", "out", f"{folder} is a file; the report needs a folder")
    if force or not folder.exists():
        return
    if not all(_is_report_file(entry) for entry in folder.iterdir()):
        raise PlannerInputError(
            "--out", "out", f"folder {folder} is not empty and holds other files than a previous report; "
            "choose a new folder, or pass --force to write into it",
        )  # fmt: skip


def prepare_report_folder(folder: Path, force: bool = False) -> None:
    """check_report_folder, then remove a previous report's files (report.md/html and plots: no stale plot stays)."""
    check_report_folder(folder, force)
    folder = Path(folder)
    if folder.is_dir():
        for entry in folder.iterdir():
            if _is_report_file(entry):
                entry.unlink()


def slug(text: str, fallback: str = "item") -> str:
    """A safe file-name part: letters, digits, '_' and single '-' only, at most 60 characters."""
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9_-]+", "-", text)).strip("-")[:60].strip("-")
    return cleaned or fallback

"""The folders `planner deploy`, `planner bench` and `planner check` write whole: new, empty, or holding a previous
run's files (those its manifest lists); anything else only with --force. No file is written over an input of the
command, and only files a previous run listed are removed (planner/report/files.py, managed folders: the report's
rules). A check's calibration catalog keeps its table in `benchmarks/` (where the catalog loader reads it): the
manifest lists that folder, and only its table is written."""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import PlannerInputError
from planner.report.files import (
    check_managed_folder,
    check_output_path,
    prepare_managed_folder,
    process_umask,
    write_text_atomic,
)

MANIFESTS = {"deploy": ".planner-deploy-manifest.json", "bench": ".planner-bench-manifest.json",
             "check": ".planner-check-manifest.json"}  # fmt: skip


def _split(names) -> tuple[list[str], list[str], list[str]]:
    """(files of the folder itself, files one level down, those folders)."""
    names = list(names)
    top = [n for n in names if "/" not in n]
    nested = [n for n in names if "/" in n]
    return top, nested, sorted({n.split("/", 1)[0] for n in nested})


def check_folder(folder: Path, names, force: bool, inputs, what: str = "bench") -> None:
    """Refuse, before anything is written, a folder that is a file, holds other files than a previous run's of
    this command (without `force`), or where a file to write is an input of the command."""
    folder = Path(folder)
    top, nested, subfolders = _split(names)
    check_managed_folder(folder, top, force, inputs, MANIFESTS[what], what)
    for name in nested:
        check_output_path(folder / name, list(inputs))
    for sub in subfolders:
        path = folder / sub
        if path.exists() and not path.is_dir():
            raise PlannerInputError("--out", "out", f"{path} is a file; {what} writes a folder there")
        others = sorted(p.name for p in path.iterdir() if f"{sub}/{p.name}" not in nested) if path.is_dir() else []
        if others and not force:
            raise PlannerInputError("--out", "out", f"{path} holds other files than a previous {what} "
                                    f"({', '.join(others[:3])}); choose a new folder, or pass --force")  # fmt: skip


def write_folder(folder: Path, files: dict[str, str], force: bool, inputs, what: str = "bench") -> list[Path]:
    """The files written (scripts executable as the umask allows), a previous run's others removed."""
    folder = Path(folder)
    top, _, subfolders = _split(files)
    check_folder(folder, files, force, inputs, what)
    prepare_managed_folder(folder, top, force, inputs, MANIFESTS[what], what)
    if subfolders:  # the manifest lists the folders too: a later run finds them its own
        write_text_atomic(folder / MANIFESTS[what], json.dumps({"files": sorted([*top, *subfolders])}, indent=1) + "\n")
    written = []
    for name, text in sorted(files.items()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / name, text)
        if name.endswith(".sh"):
            (folder / name).chmod((folder / name).stat().st_mode | 0o111 & ~process_umask())
        written.append(folder / name)
    return written

"""A bench folder written whole: new, empty, or holding a previous bench's files (those its manifest
`.planner-bench-manifest.json` lists); anything else only with --force. No file is written over an input of the
command (planner/report/files.py, managed folders: the report's rules)."""

from __future__ import annotations

from pathlib import Path

from planner.report.files import (
    check_managed_folder,
    prepare_managed_folder,
    process_umask,
    write_text_atomic,
)

MANIFESTS = {"bench": ".planner-bench-manifest.json", "check": ".planner-check-manifest.json"}


def check_folder(folder: Path, names, force: bool, inputs, what: str = "bench") -> None:
    """Refuse, before anything is written, a folder that is a file, holds other files than a previous run's of
    this command (without `force`), or where a file to write is an input of the command."""
    check_managed_folder(Path(folder), _listed(names), force, inputs, MANIFESTS[what], what)


def _listed(names) -> list[str]:
    """The names a manifest lists: the files, and the folder of each file one level down (so that a later run
    finds it its own)."""
    names = list(names)
    return sorted({*names, *(n.split("/", 1)[0] for n in names if "/" in n)})


def write_folder(folder: Path, files: dict[str, str], force: bool, inputs, what: str = "bench") -> list[Path]:
    """The files written (scripts executable as the umask allows), a previous run's others removed. Names may hold
    one folder level ('benchmarks/calibration.csv')."""
    folder = Path(folder)
    prepare_managed_folder(folder, _listed(files), force, inputs, MANIFESTS[what], what)
    written = []
    for name, text in sorted(files.items()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / name, text)
        if name.endswith(".sh"):
            (folder / name).chmod((folder / name).stat().st_mode | 0o111 & ~process_umask())
        written.append(folder / name)
    return written

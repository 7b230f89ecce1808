"""A deploy folder written whole: new, empty, or holding a previous deploy's files (those its manifest
`.planner-deploy-manifest.json` lists); anything else only with --force. No file is written over an input of the
command (planner/report/files.py), and only files a previous deploy listed are removed."""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import PlannerInputError
from planner.report.files import check_output_path, write_text_atomic

MANIFEST = ".planner-deploy-manifest.json"
MAX_MANIFEST_BYTES = 2**20


def _previous(folder: Path) -> set[str]:
    manifest = folder / MANIFEST
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return set()
        names = json.loads(manifest.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError, RecursionError):
        return set()
    return {n for n in names if isinstance(n, str) and "/" not in n and "\\" not in n and n not in ("", ".", "..", MANIFEST)} if isinstance(names, list) else set()


def check_deploy_folder(folder: Path, names, force: bool, inputs) -> None:
    """Refuse, before anything is written, a folder that is a file, holds other files than a previous deploy's
    (without `force`), or where a file to write is an input of the command."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PlannerInputError("--out", "out", f"{folder} is a file; deploy writes a folder")
    inputs = list(inputs)
    for name in (*names, MANIFEST):
        check_output_path(folder / name, inputs)
    if force or not folder.exists():
        return
    previous = _previous(folder) | {MANIFEST}
    others = sorted(entry.name for entry in folder.iterdir() if entry.name not in previous)
    if others:
        raise PlannerInputError("--out", "out", f"folder {folder} is not empty and holds other files than a previous "
                                f"deploy ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); choose a new "
                                "folder, or pass --force to write into it (only files a previous deploy wrote are "
                                "replaced or removed)")  # fmt: skip


def write_deploy_folder(folder: Path, files: dict[str, str], force: bool, inputs) -> list[Path]:
    folder = Path(folder)
    inputs = list(inputs)
    check_deploy_folder(folder, files, force, inputs)
    if folder.is_dir():  # a previous deploy's files that this one does not write again
        root = folder.resolve()
        for name in _previous(folder) - set(files):
            entry = folder / name
            if entry.is_file() and not entry.is_symlink() and entry.resolve().parent == root:
                entry.unlink()
    write_text_atomic(folder / MANIFEST, json.dumps({"files": sorted(files)}, indent=1) + "\n")
    written = []
    for name, text in sorted(files.items()):
        write_text_atomic(folder / name, text)
        if name.endswith(".sh"):
            (folder / name).chmod((folder / name).stat().st_mode | 0o111 & ~_umask())
        written.append(folder / name)
    return written


def _umask() -> int:
    from planner.report.files import process_umask

    return process_umask()

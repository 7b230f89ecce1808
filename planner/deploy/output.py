"""A deploy folder written whole: new, empty, or holding a previous deploy's files (those its manifest
`.planner-deploy-manifest.json` lists); anything else only with --force. No file is written over an input of the
command, and only files a previous deploy listed are removed (planner/report/files.py, managed folders: the report's
rules)."""

from __future__ import annotations

from pathlib import Path

from planner.report.files import check_managed_folder, prepare_managed_folder, process_umask, write_text_atomic

MANIFEST = ".planner-deploy-manifest.json"
WHAT = "deploy"


def check_deploy_folder(folder: Path, names, force: bool, inputs) -> None:
    """Refuse, before anything is written, a folder that is a file, holds other files than a previous deploy's
    (without `force`), or where a file to write is an input of the command."""
    check_managed_folder(folder, names, force, inputs, MANIFEST, WHAT)


def write_deploy_folder(folder: Path, files: dict[str, str], force: bool, inputs) -> list[Path]:
    """The files written (scripts executable as the umask allows), a previous deploy's others removed."""
    folder = Path(folder)
    prepare_managed_folder(folder, sorted(files), force, inputs, MANIFEST, WHAT)
    written = []
    for name, text in sorted(files.items()):
        write_text_atomic(folder / name, text)
        if name.endswith(".sh"):
            (folder / name).chmod((folder / name).stat().st_mode | 0o111 & ~process_umask())
        written.append(folder / name)
    return written

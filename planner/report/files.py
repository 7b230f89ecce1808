"""Writing outputs without damage: never over an input, never half a file, never outside the asked folder.

- `check_output_path(out, inputs, flag)`: the one rule for every file a command writes. It is refused (exit 2,
  naming the option) when it is an existing folder, lies under a file, or resolves (symlinks followed, hard links
  compared by identity) to any file the command reads: the scenario, every file of the catalog folders in use
  (`--catalog` and the scenario's `catalog:`), plan files, traces, ingested files and folders. `scenario_inputs` and
  `sweep_inputs` list what a scenario or a sweep command reads;
- `write_text_atomic` / `write_bytes_atomic`: written to a temporary file in the same folder, then renamed over the
  target, so a failed write (disk full, interrupt) leaves the previous file intact; the file gets the mode the
  process umask allows (rw-r--r-- under umask 022), as any file a program creates, not mkstemp's private 0600;
- `check_report_folder` / `prepare_report_folder`: a report folder must be new, empty, or hold a previous report
  (the files its manifest `.planner-report-manifest.json` lists); anything else needs `force`. Only files an
  earlier report listed are ever removed, `force` or not: `--out docs/img --force` keeps the folder's own images;
- `slug`: a file name from user text (a workload named `x/../../y` must not write outside the folder).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from planner.errors import PlannerInputError

REPORT_FILES = ("report.md", "report.html")
REPORT_MANIFEST = ".planner-report-manifest.json"  # the files the last report wrote into its folder
MAX_MANIFEST_BYTES = 2**20
MAX_FILES_COMPARED = 100_000  # files of an input folder compared by identity with an output (a symlink into it)

InputPaths = Iterable[Path | str | None]


# ---- outputs never over inputs ----


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file a path resolves to (symlinks followed); None where there is none."""
    try:
        status = path.stat()
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.is_relative_to(folder)
    except (OSError, ValueError):
        return False


def _same_file_under(folder: Path, target: tuple[int, int]) -> Path | None:
    """A file under `folder` (walked without recursion, at most MAX_FILES_COMPARED entries, folder symlinks not
    followed) that is the file `target` identifies: a symlink or hard link to it."""
    pending, seen = [folder], 0
    while pending and seen < MAX_FILES_COMPARED:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_FILES_COMPARED:
                        break
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
                    elif _identity(Path(entry.path)) == target:
                        return Path(entry.path)
        except OSError:
            continue
    return None


def overwritten_input(out: Path, inputs: InputPaths) -> tuple[Path, Path | None] | None:
    """The input file that writing `out` would overwrite, with the input folder it lies in (None for an input
    named as a file); None where `out` is no file the command reads."""
    out = Path(out)
    target = _identity(out)
    if target is None:
        return None  # a new file overwrites nothing (a dangling symlink is replaced, not followed)
    resolved = out.resolve()
    for item in inputs:
        if item is None:
            continue
        item = Path(item)
        if item.is_dir():
            if _inside(resolved, item.resolve()):
                return resolved, item
            linked = _same_file_under(item, target)
            if linked is not None:
                return linked, item
        elif _identity(item) == target or resolved == item.resolve():
            return item, None
    return None


NAME_MAX_BYTES = 255  # a file or folder name on Linux, macOS and Windows file systems
PATH_MAX_BYTES = 4096  # a whole path (Linux PATH_MAX)


def check_output_path(out: Path | str | None, inputs: InputPaths = (), flag: str = "--out") -> None:
    """Refuse, before any work, an output path that cannot or must not be written: an existing folder, a path
    under a file, or any file the command reads (`inputs`: files, and folders whose every file is read)."""
    if out is None:
        return
    out = Path(out)
    field = flag.lstrip("-")
    for part in out.parts:
        if len(os.fsencode(part)) > NAME_MAX_BYTES:
            raise PlannerInputError(flag, field, f"a name in the path is {len(os.fsencode(part))} bytes long "
                                                 f"({part[:40]}...); allowed: at most {NAME_MAX_BYTES} bytes per name")  # fmt: skip
    if len(os.fsencode(str(out))) > PATH_MAX_BYTES:
        raise PlannerInputError(flag, field, f"the path is {len(os.fsencode(str(out)))} bytes long; allowed: at most {PATH_MAX_BYTES}")
    if out.is_dir():
        raise PlannerInputError(flag, field, f"{out} is a directory; give a file path")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise PlannerInputError(flag, field, f"{parent} is a file, not a folder; give a path in a folder")
    victim = overwritten_input(out, inputs)
    if victim is not None:
        file, folder = victim
        where = f" (a file of {folder})" if folder is not None else ""
        raise PlannerInputError(flag, field, f"{out} would overwrite {file}{where}, which is an input of this command; "
                                             "write the output elsewhere")  # fmt: skip


def scenario_inputs(scenario: Path | str | None, catalogs: InputPaths = (), *files: Path | str | None) -> list[Path]:
    """What a command on a scenario reads: the scenario, the catalog folders of `--catalog` and of its own
    `catalog:` key, and other files given (a plan file, a trace)."""
    from planner.scenario import scenario_catalog_dirs

    inputs = [Path(p) for p in (*(catalogs or ()), *files) if p is not None]
    if scenario is not None:
        inputs[:0] = [Path(scenario), *scenario_catalog_dirs(scenario)]
    return inputs


def sweep_inputs(sweep_file: Path | str) -> list[Path]:
    """What `planner sweep` reads: the sweep file, the scenario it varies and that scenario's catalog folders."""
    from planner.sweep import load_sweep

    loaded = load_sweep(sweep_file)
    return [Path(sweep_file), Path(loaded.scenario_file), *(Path(d) for d in loaded.catalog_dirs)]


# ---- atomic writes with the process umask ----


def process_umask() -> int:
    """The process umask: read from /proc where Linux states it, else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_file_mode() -> int:
    """The mode of a file the planner writes: what the umask allows of rw-rw-rw- (0644 under umask 022)."""
    return 0o666 & ~process_umask()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path` (all or nothing), with the mode
    of a newly created file (`output_file_mode`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            if hasattr(os, "fchmod"):
                os.fchmod(stream.fileno(), output_file_mode())
            else:  # pragma: no cover - Windows before Python 3.13
                os.chmod(temporary, output_file_mode())
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


# ---- folders a command writes whole (a report, a deploy): new, empty, or a previous run's ----


def _plain_name(name: object, manifest: str = REPORT_MANIFEST) -> bool:
    """A file name of the folder itself: no separator, no '.' or '..', not the manifest."""
    return (isinstance(name, str) and name not in ("", ".", "..", manifest) and "/" not in name
            and "\\" not in name and "\0" not in name)  # fmt: skip


def manifest_names(folder: Path, manifest: str = REPORT_MANIFEST) -> set[str]:
    """The files an earlier run wrote into `folder`, as its manifest lists them; none without a readable one."""
    path = Path(folder) / manifest
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_MANIFEST_BYTES:
            return set()
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return set()
    names = document.get("files") if isinstance(document, dict) else None
    return {name for name in names if _plain_name(name, manifest)} if isinstance(names, list) else set()


def report_manifest_names(folder: Path) -> set[str]:
    """The files an earlier report wrote into `folder` (`manifest_names` of the report's manifest)."""
    return manifest_names(folder, REPORT_MANIFEST)


def check_managed_folder(folder: Path, names: Iterable[str], force: bool, inputs: InputPaths, manifest: str,
                         what: str) -> None:  # fmt: skip
    """A folder `what` ('the report', 'deploy') writes whole must be new, empty, or hold only a previous run's files
    (those its `manifest` lists); any other only with `force`. No file to write (`names`, the manifest) may be an
    input of the command. Refused before anything is written."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PlannerInputError("--out", "out", f"{folder} is a file; {what} needs a folder")
    inputs = list(inputs)
    for name in (*names, manifest):
        check_output_path(folder / name, inputs)
    if force or not folder.exists():
        return
    previous = manifest_names(folder, manifest) | {manifest}
    others = sorted(entry.name for entry in folder.iterdir() if entry.name not in previous)
    if others:
        run = what.removeprefix("the ")
        raise PlannerInputError(
            "--out", "out", f"folder {folder} is not empty and holds other files than a previous {run} "
            f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); choose a new folder, or pass --force to "
            f"write into it (only files a previous {run} wrote are replaced or removed)",
        )  # fmt: skip


def prepare_managed_folder(folder: Path, names: Iterable[str], force: bool, inputs: InputPaths, manifest: str,
                           what: str) -> None:  # fmt: skip
    """check_managed_folder with the files to write (`names`); then the files an earlier run listed in its manifest
    are removed (no stale file stays), only regular files inside the folder and never an input; then the manifest
    lists `names`, written before them (an interrupted run is still known)."""
    folder = Path(folder)
    inputs, names = list(inputs), list(names)
    check_managed_folder(folder, names, force, inputs, manifest, what)
    if folder.is_dir():
        root = folder.resolve()
        for name in manifest_names(folder, manifest):
            entry = folder / name
            if (entry.is_symlink() or not entry.is_file() or entry.resolve().parent != root
                    or overwritten_input(entry, inputs) is not None):  # fmt: skip
                continue
            entry.unlink()
    write_text_atomic(folder / manifest, json.dumps({"files": names}, indent=1) + "\n")


def check_report_folder(folder: Path, force: bool = False, inputs: InputPaths = ()) -> None:
    """A report folder must be new, empty, or hold only a previous report's files; the report's fixed files must
    not be inputs of the command (`check_managed_folder`)."""
    check_managed_folder(folder, REPORT_FILES, force, inputs, REPORT_MANIFEST, "the report")


def prepare_report_folder(folder: Path, names: Iterable[str], force: bool = False, inputs: InputPaths = ()) -> None:
    """The report folder checked, a previous report's files removed, the manifest written (`prepare_managed_folder`)."""
    check_report_folder(folder, force, inputs)
    prepare_managed_folder(folder, names, force, inputs, REPORT_MANIFEST, "the report")


def slug(text: str, fallback: str = "item") -> str:
    """A safe file-name part: letters, digits, '_' and single '-' only, at most 60 characters."""
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9_-]+", "-", text)).strip("-")[:60].strip("-")
    return cleaned or fallback

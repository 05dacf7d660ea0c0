"""Extracting a tar archive safely on every Python 3.11: `tarfile`'s extraction filters came in
3.11.4, and Debian bookworm (the images' base) has 3.11.2."""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

from swarm.errors import InvalidInput


def extract_all(archive: tarfile.TarFile, dest: Path, *, strict: bool = True) -> None:
    """Extract `archive` into `dest`: nothing outside it, no device files. `strict` is the
    "data" filter (no links out of the archive, no special modes); else "tar"."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(dest, filter="data" if strict else "tar")
        return
    for member in archive.getmembers():  # what the filters check, for an older Python
        path = PurePosixPath(member.name)
        if path.is_absolute() or ".." in path.parts:
            raise InvalidInput(f"the archive names a path outside its folder: {member.name!r}")
        if not (member.isfile() or member.isdir() or member.issym()):
            raise InvalidInput(f"the archive holds a special file: {member.name!r}")
        if member.issym() and strict:
            target = PurePosixPath(member.linkname)
            if target.is_absolute() or ".." in (path.parent / target).parts:
                raise InvalidInput(f"the archive's link leads outside it: {member.name!r}")
    archive.extractall(dest)

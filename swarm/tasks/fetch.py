"""Downloads for task preparation, cached under ~/.cache/swarm so a second prepare is offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from swarm.errors import Unavailable


def cache_dir() -> Path:
    """Where downloads are kept: $SWARM_CACHE_DIR, else ~/.cache/swarm (or $XDG_CACHE_HOME)."""
    explicit = os.environ.get("SWARM_CACHE_DIR")
    if explicit:
        path = Path(explicit)
    else:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swarm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def pypi_sdist(name: str, version: str, *, force: bool = False) -> Path:
    """The source distribution of `name==version` from PyPI (downloaded once, then cached)."""
    target = cache_dir() / "pypi" / f"{name}-{version}"
    found = sorted(target.glob("*.tar.gz")) if target.is_dir() else []
    if found and not force:
        return found[0]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", ":all:", "--disable-pip-version-check", "-d", str(target)]
    result = subprocess.run(
        [*command, f"{name}=={version}"], capture_output=True, text=True, timeout=600
    )
    found = sorted(target.glob("*.tar.gz"))
    if result.returncode != 0 or not found:
        raise Unavailable(
            f"could not download {name}=={version} from PyPI: "
            f"{_last_line(result.stderr + result.stdout)} (check the network or pip's index)"
        )
    return found[0]


def read_sdist_member(sdist: Path, suffix: str) -> bytes:
    """The bytes of the sdist member at `suffix` below the sdist's top folder."""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            inner = member.name.split("/", 1)[-1]
            if member.isfile() and inner == suffix:
                data = archive.extractfile(member)
                if data is not None:
                    return data.read()
    raise Unavailable(f"{sdist.name} has no {suffix}; its layout changed, pin another version")


def apt_deb(package: str, *, force: bool = False) -> Path:
    """Debian's binary package `package` as a .deb file, fetched with `apt-get download`."""
    target = cache_dir() / "apt"
    target.mkdir(parents=True, exist_ok=True)
    found = sorted(target.glob(f"{package}_*.deb"))
    if found and not force:
        return found[-1]
    if shutil.which("apt-get") is None:
        raise Unavailable(f"apt-get is not available; {package} is needed from Debian's archive")
    result = subprocess.run(
        ["apt-get", "download", package], cwd=target, capture_output=True, text=True, timeout=600
    )
    found = sorted(target.glob(f"{package}_*.deb"))
    if result.returncode != 0 or not found:
        raise Unavailable(
            f"could not download Debian package {package}: {_last_line(result.stderr)} "
            "(run `apt-get update` first, and check the network)"
        )
    return found[-1]


def apt_library_depends(package: str) -> list[str]:
    """The `lib*` packages `package` depends on besides libc (those the binary needs beside it)."""
    result = subprocess.run(
        ["apt-cache", "depends", package], capture_output=True, text=True, timeout=60
    )
    names = []
    for line in result.stdout.splitlines():
        kind, _, name = line.strip().partition(": ")
        if kind == "Depends" and name.startswith("lib") and not name.startswith("libc6"):
            names.append(name.strip("<>"))
    return names


def extract_deb(deb: Path, dest: Path) -> None:
    """Unpack a .deb's files under `dest` (not installed: nothing outside `dest` changes)."""
    dest.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["dpkg-deb", "-x", str(deb), str(dest)], capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise Unavailable(f"could not unpack {deb.name}: {_last_line(result.stderr)}")

"""Where an imported Python project comes from: a PyPI sdist, a local folder or a git revision.

`fetch_project` turns a SOURCE into a folder holding the project's files:

- `pypi:NAME==VERSION` (or `pypi:NAME`, the newest): the sdist, from PyPI's JSON API with httpx,
  checked against its sha256 and cached under `$SWARM_CACHE_DIR/pypi/NAME-VERSION/`;
- `git+URL@REV`: that revision of a git repository (a bare clone cached under
  `$SWARM_CACHE_DIR/git/`), or a local git repository's path with `rev`;
- a local folder: its files as they are (no `.git`, caches or build output).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from swarm.archive import extract_all
from swarm.errors import InvalidInput, NotFound, Unavailable
from swarm.tasks.fetch import cache_dir

PYPI_URL = "https://pypi.org/pypi"
SKIPPED = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox",
           ".nox", ".venv", "venv", "build", "dist", ".eggs"}  # fmt: skip
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


@dataclass(frozen=True)
class Project:
    """A project's files in `root`, and what they are."""

    root: Path
    name: str  # the distribution's name, or the folder's
    version: str | None
    origin: str  # how to get the same files again: "pypi:cachetools==5.5.0", a path, git+URL@REV


def pypi_base() -> str:
    """PyPI's JSON API (SWARM_PYPI_URL points elsewhere, e.g. a mirror)."""
    return os.environ.get("SWARM_PYPI_URL", PYPI_URL).rstrip("/")


def parse_source(source: str) -> tuple[str, str, str | None]:
    """("pypi", NAME, VERSION|None), ("git", URL, REV|None) or ("folder", PATH, None); a source of
    no known form raises InvalidInput saying which forms there are."""
    if source.startswith("pypi:"):
        spec = source.removeprefix("pypi:").strip()
        name, _, version = spec.partition("==")
        if not _NAME.fullmatch(name) or (version and not _VERSION.fullmatch(version)):
            raise InvalidInput(
                f"{source!r} is not a PyPI source: write pypi:NAME==VERSION, e.g. "
                "pypi:cachetools==5.5.0"
            )
        return "pypi", name, version or None
    if source.startswith("git+"):
        url = source.removeprefix("git+")
        rev = None
        head, sep, tail = url.rpartition("@")
        if sep and "/" not in tail and head and not head.endswith(":"):
            url, rev = head, tail
        return "git", url, rev
    if Path(source).expanduser().exists():
        return "folder", str(Path(source).expanduser().resolve()), None
    raise InvalidInput(
        f"unknown source {source!r}: give pypi:NAME==VERSION, git+URL@REV, a local folder (a git "
        "repository's with --rev), or debian:PKG"
    )


def fetch_project(source: str, rev: str | None, scratch: Path, *, force: bool = False) -> Project:
    """The project named by `source` (and `rev` for a local git repository), unpacked under
    `scratch` (or used in place for a folder)."""
    kind, where, version = parse_source(source)
    if kind == "pypi":
        if rev:
            raise InvalidInput("--rev is for git sources; a PyPI source pins NAME==VERSION")
        return _pypi(where, version, scratch, force)
    if kind == "git":
        return _git(where, rev or version or "HEAD", scratch, force)
    folder = Path(where)
    if not folder.is_dir():
        raise InvalidInput(f"{folder} is a file; give the project's folder")
    name = folder.name
    if rev:
        if not (folder / ".git").exists():
            raise InvalidInput(f"--rev {rev}: {folder} is not a git repository")
        dest = scratch / name
        _archive(folder, rev, dest)
        return Project(dest, name, None, f"git+{folder}@{rev}")
    dest = scratch / name
    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns(*SKIPPED), symlinks=True)
    return Project(dest, name, None, str(folder))


def _pypi(name: str, version: str | None, scratch: Path, force: bool) -> Project:
    url = f"{pypi_base()}/{name}/json"
    try:
        response = httpx.get(url, timeout=60, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise Unavailable(f"could not reach PyPI ({url}): {exc}; check the network") from None
    if response.status_code == 404:
        raise NotFound(f"PyPI has no project {name!r}; check the name (pypi:NAME==VERSION)")
    if response.status_code != 200:
        raise Unavailable(f"PyPI answered {response.status_code} for {url}; try again later")
    data = response.json()
    releases: dict[str, list[dict[str, object]]] = data.get("releases", {})
    version = version or str(data["info"]["version"])
    if version not in releases:
        newest = str(data["info"]["version"])
        raise NotFound(
            f"PyPI has no {name}=={version} (the newest is {newest}); pick a released version"
        )
    sdists = [f for f in releases[version] if f.get("packagetype") == "sdist"]
    if not sdists:
        raise NotFound(f"{name}=={version} has no source distribution on PyPI (wheels only)")
    info = sdists[0]
    filename = str(info["filename"])
    target = cache_dir() / "pypi" / f"{name}-{version}"
    archive = target / filename
    digests = info.get("digests")
    sha256 = str(digests.get("sha256", "")) if isinstance(digests, dict) else ""
    if force or not archive.is_file() or (sha256 and _sha256(archive) != sha256):
        target.mkdir(parents=True, exist_ok=True)
        file_url = str(httpx.URL(url).join(str(info["url"])))
        try:
            with httpx.stream("GET", file_url, timeout=300, follow_redirects=True) as download:
                download.raise_for_status()
                partial = archive.with_suffix(".part")
                with partial.open("wb") as out:
                    for chunk in download.iter_bytes():
                        out.write(chunk)
        except httpx.HTTPError as exc:
            raise Unavailable(f"could not download {file_url}: {exc}") from None
        if sha256 and _sha256(partial) != sha256:
            partial.unlink()
            raise Unavailable(f"{filename} from PyPI does not match its sha256; try again")
        partial.replace(archive)
    root = _unpack(archive, scratch)
    return Project(root, str(data["info"].get("name") or name), version, f"pypi:{name}=={version}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _unpack(archive: Path, scratch: Path) -> Path:
    """The sdist unpacked under `scratch`; its one top folder."""
    dest = scratch / "sdist"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            extract_all(tar, dest)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise InvalidInput(f"{archive.name} does not hold one top folder; it is not an sdist")
    return tops[0]


def _git_run(args: list[str], cwd: Path | None = None) -> None:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)  # fmt: skip
    if done.returncode != 0:
        raise Unavailable(f"git {args[0]} failed: {done.stderr.strip()[-300:]}")


def _archive(repo: Path, rev: str, dest: Path) -> None:
    """The files of `rev` in `repo` (a work tree or a bare repository) written to `dest`."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    done = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev],
                          capture_output=True, timeout=900, env=env)  # fmt: skip
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()[-300:]
        raise NotFound(f"no revision {rev!r} in {repo}: {error}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        extract_all(tar, dest)


def _git(url: str, rev: str, scratch: Path, force: bool) -> Project:
    name = re.sub(r"\.git$", "", url.rstrip("/").rsplit("/", 1)[-1]) or "project"
    mirror = cache_dir() / "git" / hashlib.sha256(url.encode()).hexdigest()[:16]
    if force and mirror.exists():
        shutil.rmtree(mirror)
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        _git_run(["clone", "--bare", "--quiet", url, str(mirror)])
    else:
        with contextlib.suppress(Unavailable):  # offline: the cached clone has what it had
            _git_run(["fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/heads/*"],
                     cwd=mirror)  # fmt: skip
    dest = scratch / name
    _archive(mirror, rev, dest)
    return Project(dest, name, rev, f"git+{url}@{rev}")

"""Debian's binary and source packages through apt, with an apt state of our own.

The importer needs source packages, which a stock Debian cannot fetch (its sources name
`Types: deb` only). Rather than edit /etc/apt, it keeps a private apt state under the cache
(`<cache>/debian/apt`): one deb822 `debian.sources` with `Types: deb deb-src` and the URIs,
suites, components and `Signed-By` of the machine's own Debian entries, its own package
lists, and apt's options pointing there. Nothing outside the cache changes, root is not
needed, and `apt-get update` there fetches the Sources and Packages lists once.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import InvalidInput, NotFound, Unavailable
from swarm.tasks.fetch import cache_dir

SYSTEM_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))
_DEBIAN_URI = re.compile(r"/debian(?:-security|-ports)?/?$")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
VERSION = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*")
TIMEOUT = 900


def require_python_debian() -> None:
    """python-debian (the `debian` extra) parses apt's deb822 records; say so when missing."""
    try:
        import debian.deb822  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is part of dev
        raise InvalidInput(
            "importing from Debian needs python-debian: pip install 'swarm[debian]'"
        ) from None


def check_package_name(name: str) -> str:
    """A Debian package name (policy 5.6.1), or InvalidInput saying what a name looks like."""
    if not _PACKAGE.fullmatch(name):
        raise InvalidInput(
            f"{name!r} is not a Debian package name (lower-case letters, digits, + - and ., "
            "at least two characters, e.g. debian:jq)"
        )
    return name


def _last_line(text: str) -> str:
    """apt's first error (the specific one: "E: Failed to fetch URL  404  Not Found"; the
    last is a summary), else its last line."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("E:", "Err:"))]
    return (errors or lines[-1:] or ["no output"])[0]


def _stanzas(paths: Sequence[Path]) -> list[dict[str, str]]:
    """Apt's source entries as deb822 fields, from .sources files and one-line .list files."""
    from debian.deb822 import Deb822

    found: list[dict[str, str]] = []
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(path.glob("*.sources")) + sorted(path.glob("*.list"))
        elif path.is_file():
            files.append(path)
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        if file.suffix == ".sources":
            for stanza in Deb822.iter_paragraphs(text.splitlines()):
                found.append({k: " ".join(str(v).split()) for k, v in stanza.items()})
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] in ("deb", "deb-src"):
                options = ""
                if words[1].startswith("["):  # deb [signed-by=... arch=...] uri suite comps
                    closing = next(i for i, w in enumerate(words) if w.endswith("]"))
                    options = " ".join(words[1 : closing + 1]).strip("[]")
                    words = [words[0], *words[closing + 1 :]]
                fields = {"Types": words[0], "URIs": words[1], "Suites": words[2]}
                fields["Components"] = " ".join(words[3:])
                for option in options.split():
                    key, _, value = option.partition("=")
                    if key == "signed-by":
                        fields["Signed-By"] = value
                found.append(fields)
    return found


def debian_sources(paths: Sequence[Path] = SYSTEM_SOURCES) -> str:
    """A deb822 sources file with binary and source entries for the Debian archives that apt on
    this machine uses (same URIs, suites, components and Signed-By)."""
    require_python_debian()
    seen: set[tuple[str, str, str]] = set()
    out: list[str] = []
    for stanza in _stanzas(paths):
        if stanza.get("Enabled", "yes").lower() == "no":
            continue
        uris = [u for u in stanza.get("URIs", "").split() if _DEBIAN_URI.search(u)]
        if not uris or "deb" not in stanza.get("Types", "").split():
            continue
        key = (" ".join(uris), stanza.get("Suites", ""), stanza.get("Components", ""))
        if key in seen:
            continue
        seen.add(key)
        lines = ["Types: deb deb-src", f"URIs: {key[0]}", f"Suites: {key[1]}"]
        lines.append(f"Components: {key[2] or 'main'}")
        if stanza.get("Signed-By"):
            lines.append(f"Signed-By: {stanza['Signed-By']}")
        out.append("\n".join(lines))
    if not out:
        where = " and ".join(str(p) for p in paths)
        raise Unavailable(
            f"no Debian archive among apt's sources ({where}): importing needs a `deb` entry "
            "for the Debian archive or a mirror of it"
        )
    return "\n\n".join(out) + "\n"


@dataclass(frozen=True)
class Apt:
    """apt-get and apt-cache with the private state under `root`."""

    root: Path

    def options(self) -> list[str]:
        return [
            "-o", f"Dir::Etc::SourceList={self.root / 'none.list'}",
            "-o", f"Dir::Etc::SourceParts={self.root / 'sources.list.d'}",
            "-o", f"Dir::State::Lists={self.root / 'lists'}",
            "-o", f"Dir::Cache={self.root / 'cache'}",
            # Downloads land in our own folders, which apt's `_apt` user may not reach.
            "-o", "APT::Sandbox::User=root",
            "-q",
        ]  # fmt: skip

    def run(
        self, tool: str, args: Iterable[str], *, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not available: importing from Debian needs apt")
        self.root.mkdir(parents=True, exist_ok=True)
        # One apt at a time on this state: apt's own lock fails a second one at once, so two
        # imports on one machine wait here for each other instead.
        with (self.root / "swarm.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return subprocess.run(
                [tool, *self.options(), *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )

    def has_lists(self) -> bool:
        lists = self.root / "lists"
        return lists.is_dir() and any(lists.glob("*_Sources*")) and any(lists.glob("*_Packages*"))

    def update(self, *, force: bool = False, sources: str | None = None) -> None:
        """Write the sources file and fetch the lists (once; again with `force`)."""
        if self.has_lists() and not force:
            return
        for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "none.list").write_text("", encoding="utf-8")
        text = sources if sources is not None else debian_sources()
        (self.root / "sources.list.d" / "debian.sources").write_text(text, encoding="utf-8")
        done = self.run("apt-get", ["update"])
        if done.returncode != 0 or not self.has_lists():
            raise Unavailable(
                "no deb-src reachable: apt-get update with "
                f"{self.root / 'sources.list.d' / 'debian.sources'} failed: "
                f"{_last_line(done.stderr + done.stdout)} (check the network or the mirror)"
            )


def private_apt(*, force: bool = False) -> Apt:
    apt = Apt(cache_dir() / "debian" / "apt")
    apt.update(force=force)
    return apt


@dataclass(frozen=True)
class Record:
    """One package record of apt's lists (a binary's or a source's)."""

    package: str
    version: str
    fields: dict[str, str]


def records(apt: Apt, command: str, package: str) -> list[Record]:
    """`apt-cache show` or `showsrc` records of `package`, newest version first."""
    from debian.deb822 import Deb822
    from debian.debian_support import Version

    done = apt.run("apt-cache", [command, package])
    found = []
    for stanza in Deb822.iter_paragraphs(done.stdout.splitlines()):
        fields = {k: str(v) for k, v in stanza.items()}
        if "Version" in fields and "Package" in fields:
            found.append(Record(fields["Package"], fields["Version"], fields))
    found.sort(key=lambda r: Version(r.version), reverse=True)
    return found


def binary_records(apt: Apt, package: str) -> list[Record]:
    found = [r for r in records(apt, "show", package) if r.package == package]
    if not found:
        raise NotFound(
            f"Debian has no binary package {package!r} in this machine's suites "
            f"(apt-cache show {package} found nothing); check the name (e.g. debian:jq)"
        )
    return found


def source_records(apt: Apt, package: str) -> list[Record]:
    """The source packages that build `package` (a binary or source name), newest first."""
    found = [
        r
        for r in records(apt, "showsrc", package)
        if r.package == package or package in [b.strip() for b in r.fields["Binary"].split(",")]
    ]
    if not found:
        raise NotFound(f"no source package builds {package!r} (apt-cache showsrc {package})")
    return found


def download(apt: Apt, args: list[str], where: Path, what: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = apt.run("apt-get", args, cwd=where)
    if done.returncode != 0:
        raise Unavailable(f"could not download {what}: {_last_line(done.stderr)}")


def fetch_source(apt: Apt, record: Record, *, force: bool = False) -> Path:
    """The unpacked source tree of `record` (downloaded with apt-get source --download-only
    and unpacked with dpkg-source, patches applied), cached."""
    base = cache_dir() / "debian" / "source" / f"{record.package}_{record.version}"
    tree = base / "tree"
    if tree.is_dir() and not force:
        return tree
    shutil.rmtree(base, ignore_errors=True)
    spec = f"{record.package}={record.version}"
    download(apt, ["source", "--download-only", spec], base, f"the source package {spec}")
    dsc = sorted(base.glob("*.dsc"))
    if not dsc:
        raise Unavailable(f"apt-get source {spec} left no .dsc file in {base}")
    if shutil.which("dpkg-source") is None:
        raise Unavailable("unpacking a source package needs dpkg-source: apt-get install dpkg-dev")
    done = subprocess.run(
        ["dpkg-source", "--no-check", "-x", dsc[0].name, "tree"],
        cwd=base, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    if done.returncode != 0 or not tree.is_dir():
        raise Unavailable(f"dpkg-source could not unpack {dsc[0].name}: {_last_line(done.stderr)}")
    return tree


def fetch_deb(apt: Apt, package: str, version: str, *, force: bool = False) -> Path:
    """The .deb of `package` at `version` (apt-get download), cached."""
    base = cache_dir() / "debian" / "deb"
    quoted = version.replace(":", "%3a")
    found = sorted(base.glob(f"{package}_{quoted}_*.deb"))
    if found and not force:
        return found[-1]
    for stale in found:
        stale.unlink()
    spec = f"{package}={version}"
    download(apt, ["download", spec], base, f"the binary package {spec}")
    found = sorted(base.glob(f"{package}_{quoted}_*.deb"))
    if not found:
        raise Unavailable(f"apt-get download {spec} left no .deb in {base}")
    return found[-1]

"""swarm.archive: safe extraction with and without tarfile's filters (Python < 3.11.4 has none:
the evaluator in the images, on Debian bookworm's 3.11.2, crashed on `filter=`)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from swarm.archive import extract_all
from swarm.errors import InvalidInput


def archive(**members: bytes) -> tarfile.TarFile:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name.replace("__", "/"))
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data.seek(0)
    return tarfile.open(fileobj=data)


@pytest.mark.parametrize("filters", [True, False], ids=["with-filters", "without-filters"])
def test_an_archive_is_extracted_and_a_path_outside_is_refused(
    filters: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    extract_all(archive(pkg__mod_py=b"x = 1\n"), tmp_path / "ok", strict=False)
    assert (tmp_path / "ok" / "pkg" / "mod_py").read_text() == "x = 1\n"
    bad = archive(**{"..__escape": b"gotcha"})
    with pytest.raises((InvalidInput, tarfile.FilterError)):
        extract_all(bad, tmp_path / "bad")
    assert not (tmp_path / "escape").exists()

"""Safe, resumable downloads driven by a manifest (`datasets/manifests/<set>.json`).

A manifest lists the files of one source: URL, expected size and sha256 where known, and whether to extract it.
`download_file` writes into `<dest>.part`, resumes an interrupted transfer with an HTTP Range request, verifies the
size and checksum, and only then renames the file into place (atomic). A file that fails verification is deleted
and reported; it is never left where a later step would use it. Nothing here runs at import time or in tests
against the internet: tests serve fixture files from 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
TIMEOUT_S = 60
MANIFEST_DIR = Path(__file__).resolve().parents[2] / "datasets" / "manifests"


class DownloadError(RuntimeError):
    """A download failed or did not verify; the message names the URL, the file and what to do."""


@dataclass(frozen=True)
class ManifestFile:
    """One file of a source. `size` / `sha256` are None where the publisher gives none (then only logged)."""

    name: str
    url: str | None  # None: the publisher offers no direct link; `Manifest.manual` says how to get the file
    size: int | None = None
    sha256: str | None = None
    extract: bool = False
    note: str = ""


@dataclass(frozen=True)
class Manifest:
    """What `make data NAME=<name>` fetches, and the command that builds the query set afterwards."""

    name: str
    description: str
    license: str
    files: tuple[ManifestFile, ...]
    build: str = ""
    huggingface: dict[str, Any] = field(default_factory=dict)
    manual: str = ""
    image_url: str = ""  # per-image URL template for sources fetched image by image (EditVal's COCO images)
    pinned: str = ""  # what the user's pins changed (`editmeter data pin`), said when fetching


def load_manifest(name_or_path: str | os.PathLike[str], manifest_dir: Path = MANIFEST_DIR) -> Manifest:
    """Read `datasets/manifests/<name>.json` (or an explicit path) and validate its fields."""
    path = Path(name_or_path)
    if not path.suffix:
        path = manifest_dir / f"{name_or_path}.json"
    if not path.is_file():
        known = sorted(p.stem for p in manifest_dir.glob("*.json")) if manifest_dir.is_dir() else []
        raise DownloadError(f"no manifest {path}; known data sets: {', '.join(known) or '(none)'}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DownloadError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    files = []
    for i, f in enumerate(raw.get("files", [])):
        unknown = set(f) - {"name", "url", "size", "sha256", "extract", "note"}
        if unknown or not f.get("name") or "url" not in f:
            raise DownloadError(f"{path}: files[{i}] needs 'name' and 'url' (and may have size, sha256, extract, "
                                f"note); unknown keys: {sorted(unknown)}")
        if Path(f["name"]).name != f["name"] or f["name"] in (".", ".."):
            raise DownloadError(f"{path}: files[{i}].name {f['name']!r} must be a plain file name")
        files.append(ManifestFile(**f))
    name = raw.get("name", path.stem)
    files, pinned = _with_pins(name, files)
    return Manifest(name=name, description=raw.get("description", ""),
                    license=raw.get("license", ""), files=tuple(files), build=raw.get("build", ""),
                    huggingface=raw.get("huggingface", {}), manual=raw.get("manual", ""),
                    image_url=raw.get("image_url", ""), pinned=pinned)


_HUB_MAIN = "/resolve/main/"
_COMMIT_IN_URL = re.compile(r"/([0-9a-f]{40})/")


def _with_pins(name: str, files: list[ManifestFile]) -> tuple[list[ManifestFile], str]:
    """The manifest's files with the user's pins applied (benchmark.io.pins): a pinned hub revision replaces `main` in
    the data set's Hugging Face URLs (`editmeter data pin rise --revision`), and a pinned prompt file's sha256 (for
    the commit in its URL) is checked on download where the manifest records none (`editmeter data pin kris`)."""
    from benchmark.io.pins import PinError, hub_revision, pinned

    try:
        rev = hub_revision(name)
        out, said = [], []
        for f in files:
            if rev and f.url and "huggingface.co/datasets/" in f.url and _HUB_MAIN in f.url:
                f = replace(f, url=f.url.replace(_HUB_MAIN, f"/resolve/{rev}/"))
                said.append(f"{f.name} at hub revision {rev}")
            commit = _COMMIT_IN_URL.search(f.url or "")
            sha = pinned(name, commit.group(1), "prompts_sha256") if commit and f.sha256 is None else None
            if sha:
                f = replace(f, sha256=sha)
                said.append(f"{f.name} checked against sha256 {sha}")
            out.append(f)
    except PinError as err:
        raise DownloadError(str(err)) from None
    return out, "; ".join(said)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, size: int | None, sha256: str | None) -> str | None:
    """Return why `path` does not match the expected size / checksum, or None when it does."""
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"size {actual} bytes, expected {size}"
    if sha256 is not None:
        digest = sha256_of(path)
        if digest != sha256.lower():
            return f"sha256 {digest}, expected {sha256.lower()}"
    return None


def download_file(url: str, dest: Path, *, size: int | None = None, sha256: str | None = None,
                  progress: bool = True, timeout: float = TIMEOUT_S) -> Path:
    """Download `url` to `dest` (resumable, verified, atomic). Returns `dest`.

    An existing `dest` that verifies is kept. An existing `dest` that does not verify is never trusted: it is
    deleted and fetched again. Bytes already in `<dest>.part` are resumed with `Range: bytes=N-`; a server that
    ignores the range (200 instead of 206) restarts the file from zero.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        problem = _verify(dest, size, sha256)
        if problem is None:
            return dest
        print(f"[download] {dest}: existing file does not verify ({problem}); fetching it again", file=sys.stderr)
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    if size is not None and have > size:  # more bytes than the file has: not a prefix of it
        part.unlink()
        have = 0
    if size is None or have < size:
        _fetch_into(url, part, have, size, progress, timeout)
    problem = _verify(part, size, sha256)
    if problem is not None:
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"{url}: downloaded file does not verify ({problem}); it was deleted and not used. Run the same command "
            "again; if it fails again the source changed or a proxy alters it: check the URL, and if the file is the "
            "right one, the manifest's expected size or sha256 (a wrong value there is fixed in the manifest)"
        )
    os.replace(part, dest)
    return dest


def _fetch_into(url: str, part: Path, have: int, size: int | None, progress: bool, timeout: float) -> None:
    from tqdm import tqdm

    headers = {"User-Agent": "editmeter-downloader"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # range not satisfiable: the part file is already complete (size unknown)
            return
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}; check the URL in the manifest or try later") from None
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        raise DownloadError(f"{url}: cannot connect ({err}); check your network or proxy, then run the same command "
                            f"again (the {have} bytes already in {part} are kept and resumed)") from None
    with response:
        status = getattr(response, "status", 200)
        if have and status != 206:
            have = 0  # the server ignored the range: start over instead of appending a second copy
        length = response.headers.get("Content-Length")
        total = (have + int(length)) if length is not None else size
        mode = "ab" if have else "wb"
        try:
            with open(part, mode) as fh, tqdm(total=total, initial=have, unit="B", unit_scale=True,
                                               desc=part.name[: -len(".part")], disable=not progress,
                                               file=sys.stderr) as bar:
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    fh.write(chunk)
                    bar.update(len(chunk))
                fh.flush()
                os.fsync(fh.fileno())
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as err:
            got = part.stat().st_size if part.is_file() else 0
            raise DownloadError(f"{url}: transfer interrupted after {got} bytes ({err}); run the same command again "
                                "to resume") from None
    if length is not None:
        got = part.stat().st_size
        if got < have + int(length):
            raise DownloadError(f"{url}: transfer ended early ({got} of {have + int(length)} bytes); run the same "
                                "command again to resume")


def extract(archive: Path, into: Path) -> Path:
    """Extract a zip / tar archive into `into` atomically (temp folder, then rename); idempotent via a marker."""
    marker = into / f".extracted-{archive.name}"
    if marker.is_file():
        return into
    into.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", dir=into))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    _check_member(archive, member)
                zf.extractall(tmp)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")  # the data filter refuses links and paths outside `tmp`
        else:
            raise DownloadError(f"{archive}: marked extract=true in the manifest but is neither zip nor tar")
        for child in tmp.iterdir():
            target = into / child.name
            if target.exists():
                shutil.rmtree(target) if target.is_dir() else target.unlink()
            os.replace(child, target)
        marker.write_text("ok\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return into


def _check_member(archive: Path, member: str) -> None:
    p = Path(member)
    if p.is_absolute() or ".." in p.parts:
        raise DownloadError(f"{archive}: refusing archive member {member!r} (absolute or escapes the folder)")


# A Hugging Face dataset id (`owner/name`), as a builder's --dataset may be instead of a local folder
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _hub_fix() -> str:
    """What to do when the hub could not be read: HF_HUB_OFFLINE=1 in the environment forbids it outright (`make
    data` leaves the variable as it finds it), else the network is the suspect."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return ("HF_HUB_OFFLINE is set in this environment, which forbids downloads: with network access, run the "
                "command again with HF_HUB_OFFLINE=0 in front (it resumes)")
    return "Check your network and that the Hugging Face hub is reachable, then run the command again (it resumes)"


def require_inputs(name: str, *paths: str | os.PathLike[str]) -> None:
    """FileNotFoundError naming the first of `paths` (a builder's inputs) that does not exist and the command
    that fetches the downloads of query set `name`."""
    for p in paths:
        if not Path(p).exists():
            fetch = (f"make data NAME={name} checks the files placed by hand" if name == "hatie" else
                     f"fetch the download first: make data NAME={name}")
            raise FileNotFoundError(f"{p} does not exist; {fetch} (docs/querysets.md)")


def fetch_huggingface(spec: dict[str, Any], dest_dir: Path) -> list[Path]:
    """Fetch a Hugging Face dataset's splits with `datasets` and save each with `save_to_disk(dest_dir/<split>)`."""
    import datasets

    repo_id = spec["repo_id"]
    out = []
    for split in spec.get("splits", []):
        target = dest_dir / split
        if (target / "dataset_info.json").is_file():
            out.append(target)
            continue
        try:
            ds = datasets.load_dataset(repo_id, split=split, revision=spec.get("revision"))
        except Exception as err:  # the hub raises many types; all mean "could not get it"
            raise DownloadError(f"{repo_id} split {split!r}: {type(err).__name__}: {err}. {_hub_fix()}") from None
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        ds.save_to_disk(str(tmp))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        out.append(target)
    return out


def fetch_manifest(manifest: Manifest, dest_dir: Path, *, only: Sequence[str] = (), progress: bool = True) -> list[Path]:
    """Download (and extract where marked) every file of `manifest` into `dest_dir`; returns the local paths."""
    out = fetch_huggingface(manifest.huggingface, dest_dir) if manifest.huggingface else []
    absent: list[Path] = []  # files placed by hand that are not there yet: said once the others are fetched
    for f in manifest.files:
        if only and f.name not in only:
            continue
        if f.url is None:
            path = dest_dir / f.name
            if not path.exists():
                absent.append(path)
                continue
            if f.extract:
                extract(path, dest_dir)
            out.append(path)
            continue
        if f.size is None or f.sha256 is None:
            print(f"[download] {f.name}: the manifest has no {'size' if f.size is None else 'sha256'}; the file "
                  "is checked only for completeness", file=sys.stderr)
        path = download_file(f.url, dest_dir / f.name, size=f.size, sha256=f.sha256, progress=progress)
        if f.extract:
            extract(path, dest_dir)
        out.append(path)
    if absent:
        arrived = (f"Arrived: {', '.join(str(p) for p in out)}. " if out else "")
        raise DownloadError(f"{manifest.name}: {arrived}Not there: {', '.join(str(p) for p in absent)}, which has no "
                            f"public download link; {manifest.manual} Put it at {absent[0] if len(absent) == 1 else 'those paths'} "
                            "and run the same command again" + (" (what arrived is kept and not fetched again)"
                                                                  if out else "") + ".")
    return out

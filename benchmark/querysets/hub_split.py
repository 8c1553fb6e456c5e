"""One split of a Hugging Face `datasets` dataset, from a saved folder or the hub, checked for the features an
importer reads (MagicBrush, GEdit-Bench).

A saved folder (`save_to_disk`) is read through `saved_dataset`: its `dataset_dict.json`, `state.json` and
`dataset_info.json` under the release JSON rules, every `.arrow` file it lists opened and counted before
`datasets.load_from_disk` sees the folder, so a truncated or garbage file is one error naming it (never a
pyarrow or JSON traceback), and a split of 0 rows is one error naming the folder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DICT_FILE = "dataset_dict.json"  # a DatasetDict: {"splits": [...]}, one sub-folder per split
STATE_FILE = "state.json"  # a Dataset: {"_data_files": [{"filename": ...}], ...}
INFO_FILE = "dataset_info.json"


def _plain_name(value: Any, where: str, field: str, error: type[Exception]) -> str:
    """A file or split name that stays inside its folder (one path component, not `..`)."""
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value or "\\" in value \
            or "\x00" in value:
        raise error(f"{where}: {field} {str(value)[:80]!r} is not a plain name inside the folder")
    return value


def _arrow_rows(path: Path, error: type[Exception]) -> int:
    """The row count of one `.arrow` file (Arrow IPC stream, as `save_to_disk` writes), every batch read."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as src:
            return sum(batch.num_rows for batch in pa.ipc.open_stream(src))
    except Exception as err:  # noqa: BLE001 - pyarrow's errors have many types (ArrowInvalid, OSError, ...)
        raise error(f"{path}: not a readable Arrow file ({type(err).__name__}: {str(err)[:200]}); the saved "
                    "dataset is damaged: fetch it again") from None


def _dataset_folder(folder: Path, error: type[Exception]) -> int:
    """Check one saved Dataset folder; its row count."""
    from benchmark.querysets.release import read_json, regular_file

    state = read_json(folder / STATE_FILE, error, "saved dataset state")
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise error(f"{folder / STATE_FILE}: expected an object whose _data_files lists the dataset's .arrow files")
    if (folder / INFO_FILE).exists():
        read_json(folder / INFO_FILE, error, "saved dataset info")
    rows = 0
    for entry in files:
        name = _plain_name(entry.get("filename"), str(folder / STATE_FILE), "_data_files filename", error)
        path = folder / name
        regular_file(path, f"{path} (listed in {folder / STATE_FILE})", error)
        rows += _arrow_rows(path, error)
    return rows  # `save_to_disk` of an empty dataset lists no file: 0


def saved_dataset(path: Path, split: str | None, *, error: type[Exception]) -> Any:
    """The `split` of a `save_to_disk` folder (a DatasetDict; a Dataset folder is its own split), checked file by
    file first; `error` names the unreadable file, or the folder and "0 rows"."""
    import datasets
    from benchmark.querysets.release import read_json

    folder = path
    if (path / DICT_FILE).exists():
        listing = read_json(path / DICT_FILE, error, "saved dataset dictionary")
        splits = listing.get("splits") if isinstance(listing, dict) else None
        if not isinstance(splits, list):
            raise error(f"{path / DICT_FILE}: expected an object with a list of splits, like "
                        '{"splits": ["train"]}')
        splits = [_plain_name(s, str(path / DICT_FILE), "split", error) for s in splits]
        if split not in splits:
            raise error(f"{path}: no split {split!r}; it has {sorted(splits)}")
        folder = path / split
    elif not (path / STATE_FILE).exists():
        raise error(f"{path}: not a saved dataset folder (no {DICT_FILE} or {STATE_FILE}); point at the folder "
                    "`save_to_disk` wrote")
    if _dataset_folder(folder, error) == 0:
        raise error(f"{folder}: 0 rows; the saved dataset is empty: fetch it again")
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as err:  # noqa: BLE001 - anything the checks above did not foresee, still one line
        raise error(f"{folder}: not a readable saved dataset ({type(err).__name__}: {str(err)[:200]})") from None
    if isinstance(ds, datasets.DatasetDict):  # a split folder that is itself a dictionary
        raise error(f"{folder}: a dataset dictionary inside a split folder; point at one split's folder")
    return ds


def load_split(dataset: str | os.PathLike[str], split: str | None, *, features: Sequence[str], what: str,
               error: type[Exception], revision: str | None = None, hint: str = "") -> Any:
    """The `split` of a saved dataset folder (`save_to_disk`: a Dataset or a DatasetDict; `saved_dataset`) or of a
    hub id (needs the network; `revision` pins it). A missing split or feature, an unreadable file or an empty
    split raises `error` naming the dataset, what it has, and `hint` (how to fetch the right one)."""
    import datasets

    path = Path(dataset)
    if path.exists():
        ds = saved_dataset(path, split, error=error)
    else:
        ds = datasets.load_dataset(str(dataset), split=split, revision=revision)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise error(f"{dataset}: no split {split!r}; it has {sorted(ds)}")
        ds = ds[split]
    if ds.num_rows == 0:
        raise error(f"{dataset}: 0 rows in split {split!r}; the dataset is empty" + hint)
    missing = [f for f in features if f not in ds.column_names]
    if missing:
        raise error(f"{dataset}: missing {what} feature(s) {missing}; it has {ds.column_names}" + hint)
    return ds

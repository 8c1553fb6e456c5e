"""One split of a Hugging Face `datasets` dataset, from a saved folder or the hub, checked for the features an
importer reads (MagicBrush, GEdit-Bench)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_split(dataset: str | os.PathLike[str], split: str | None, *, features: Sequence[str], what: str,
               error: type[Exception], revision: str | None = None, hint: str = "") -> Any:
    """The `split` of a saved dataset folder (`save_to_disk`: a Dataset or a DatasetDict) or of a hub id (needs the
    network; `revision` pins it). A missing split or feature raises `error` naming the dataset, what it has, and
    `hint` (how to fetch the right one)."""
    import datasets

    path = Path(dataset)
    if path.exists():
        ds = datasets.load_from_disk(str(path))
    else:
        ds = datasets.load_dataset(str(dataset), split=split, revision=revision)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise error(f"{dataset}: no split {split!r}; it has {sorted(ds)}")
        ds = ds[split]
    missing = [f for f in features if f not in ds.column_names]
    if missing:
        raise error(f"{dataset}: missing {what} feature(s) {missing}; it has {ds.column_names}" + hint)
    return ds

"""configs/config.yaml and docs/cli.md say what docs/results.md measured about `batch_size` (issue 22, item 11):
batched diffusion editors' PNGs can move by one level with the batch they ran in, so no text may promise that
outputs do not depend on it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config_comment() -> str:
    """The comment of the root `batch_size:` key, with its continuation lines."""
    lines = (ROOT / "configs" / "config.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("batch_size:"))
    parts = [lines[start].split("#", 1)[1]]
    for line in lines[start + 1:]:
        if not line.lstrip().startswith("#") or not line.startswith(" "):
            break
        parts.append(line.strip().lstrip("#"))
    return " ".join(p.strip() for p in parts)


def _cli_row() -> str:
    return next(line for line in (ROOT / "docs" / "cli.md").read_text().splitlines()
                if line.startswith("| `batch_size` |"))


def test_results_doc_still_measures_the_one_level_difference():
    text = (ROOT / "docs" / "results.md").read_text()
    assert "## Determinism" in text and "one quantisation level (of 255)" in " ".join(text.split())


def test_the_batch_size_texts_agree_with_the_measured_determinism():
    for where, text in (("configs/config.yaml", _config_comment()), ("docs/cli.md", _cli_row())):
        assert not re.search(r"(outputs|scores|results) do not depend on it", text), where
        assert "one level (of 255)" in text and "results.md#determinism" in text, where
        assert "diffusion" in text, where

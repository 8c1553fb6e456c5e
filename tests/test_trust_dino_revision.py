"""Every DINO (v1) checkpoint a config can load is pinned, or needs an explicit revision (issue 22, item 10):
the pretrained ViT-S/16 was loaded at the hub's moving `main`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmark.models.dino_v1 import (
    DINO_V1_MODELS,
    PINNED_REVISIONS,
    UnpinnedRevisionError,
    load_dino_v1,
    pinned_revision,
)

ROOT = Path(__file__).resolve().parents[1]
COMMIT = re.compile(r"[0-9a-f]{40}")


def _dino_nodes(node, where: str = ""):
    """(config path, node) of every load_dino_v1 factory inside a metrics config."""
    if isinstance(node, dict):
        if node.get("_target_") == "benchmark.models.dino_v1.load_dino_v1":
            yield where, node
        for k, v in node.items():
            yield from _dino_nodes(v, f"{where}.{k}" if where else str(k))


def test_every_configured_dino_revision_is_a_commit_or_left_for_the_user():
    seen = 0
    for path in sorted((ROOT / "configs" / "metrics").glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        for where, node in _dino_nodes(cfg):
            seen += 1
            rev = node.get("revision")
            assert rev is None or COMMIT.fullmatch(str(rev)), f"{path.name} {where}: revision {rev!r}"
            if rev is None:  # left for the user: only where editmeter pins no commit, and the comment says so
                assert PINNED_REVISIONS[node["model_id"]] is None, f"{path.name} {where}"
                assert "REQUIRED with profile=pretrained" in path.read_text()
            else:
                assert PINNED_REVISIONS.get(node["model_id"]) in (None, rev), f"{path.name} {where}"
    assert seen >= 4  # editval, editval_oracle, conventional (EditVal's and MagicBrush's)


def test_the_pinned_revisions_are_commits_and_cover_every_model():
    assert set(PINNED_REVISIONS) == set(DINO_V1_MODELS)
    for model_id, rev in PINNED_REVISIONS.items():
        assert rev is None or COMMIT.fullmatch(rev), model_id
    editval = OmegaConf.load(ROOT / "configs" / "metrics" / "editval.yaml")
    assert PINNED_REVISIONS["facebook/dino-vitb16"] == editval.editval.dino.revision


def test_pretrained_vits16_without_a_revision_is_refused_before_any_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    load_dino_v1.cache_clear()
    with pytest.raises(UnpinnedRevisionError, match=r"metrics\.conventional\.dino_mb\.revision=") as err:
        load_dino_v1("pretrained", model_id="facebook/dino-vits16", recipe="resize256-crop224")
    assert "facebook/dino-vits16" in str(err.value) and "commits/main" in str(err.value)
    assert pinned_revision("facebook/dino-vits16", "a" * 40) == "a" * 40  # an explicit revision is used as given
    assert pinned_revision("facebook/dino-vitb16", None) == PINNED_REVISIONS["facebook/dino-vitb16"]


def test_tiny_weights_need_no_revision():
    enc = load_dino_v1("tiny", model_id="facebook/dino-vits16", revision=None, recipe="resize256-crop224")
    assert enc.name == "dino-vits16-tiny"

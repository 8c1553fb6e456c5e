"""A cold first run builds the tiny random-weight CLIP without open_clip's "No pretrained weights loaded" warning:
random weights are what the tiny / random profiles ask for. The same message for any other model still shows."""

from __future__ import annotations

import logging

import pytest

MESSAGE = "No pretrained weights loaded for model"


@pytest.fixture
def cold_cache(tmp_path, monkeypatch):
    """An empty model cache, so the tiny CLIP is built as on a first run."""
    monkeypatch.setenv("EDITMETER_CACHE", str(tmp_path))
    return tmp_path


def test_building_the_tiny_clip_logs_no_random_weights_warning(cold_cache, caplog):
    from benchmark.models.clip import load_clip

    with caplog.at_level(logging.WARNING):
        enc = load_clip.__wrapped__("tiny")  # past the per-process cache: build and load now
    assert any((cold_cache / "tiny").iterdir())  # it really was built here
    assert enc.signature
    assert not [r for r in caplog.records if MESSAGE in r.getMessage()]


def test_only_that_message_for_that_model_is_dropped(caplog):
    from benchmark.models.clip import expected_random_init

    with caplog.at_level(logging.WARNING), expected_random_init("editmeter-tiny-clip"):
        logging.warning(f"{MESSAGE} 'editmeter-tiny-clip'. Model initialized randomly.")
        logging.warning(f"{MESSAGE} 'ViT-B-32'. Model initialized randomly.")
        logging.warning("something else")
    logging.warning(f"{MESSAGE} 'editmeter-tiny-clip'. Model initialized randomly.")  # outside: shown again
    shown = [r.getMessage() for r in caplog.records]
    assert shown == [f"{MESSAGE} 'ViT-B-32'. Model initialized randomly.", "something else",
                     f"{MESSAGE} 'editmeter-tiny-clip'. Model initialized randomly."]

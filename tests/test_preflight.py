"""Preflight: a missing piece of a run fails before the first edit, in seconds, with one message naming it and the
command that fixes it."""

import shutil
import time
from collections import namedtuple

import pytest
from conftest import ROOT
from local_servers import FileServer, serving

from benchmark import preflight as P
from benchmark import weights as W
from benchmark.errors import PreflightError
from benchmark.run import compose, run_pipeline

BASE = ("queryset=demo", "progress=false", "aggregate.bootstrap_resamples=200")


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "hf_cache_dir", lambda: tmp_path / "hf")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _cfg(tmp_path, *extra):
    cfg, choices = compose([*BASE, f"paths.results={tmp_path / 'results'}", *extra])
    return cfg, choices["editor"]


def test_missing_weights_fail_before_any_edit_and_quickly(tmp_path, empty_caches, monkeypatch):
    """The issue's case: `make bench MODEL=identity` (pretrained, HATIE) used to edit all 112 queries, then die
    loading CLIP with a long traceback."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg, editor = _cfg(tmp_path, "editor=identity", "metrics=hatie", "profile=pretrained")
    t0 = time.perf_counter()
    with pytest.raises(PreflightError) as info:
        run_pipeline(cfg, editor)
    elapsed = time.perf_counter() - t0
    msg = str(info.value)
    for part in ("segmenter", "clip", "dino", "lpips", "fid"):
        assert f"metrics hatie.{part}:" in msg
    assert "Fix: editmeter weights editor=identity metrics=hatie" in msg and "profile=tiny" in msg
    assert not (tmp_path / "results" / "runs").exists()  # nothing was edited
    assert elapsed < 30, elapsed  # seconds (about 1 s here once imports are warm), not an edit stage


def test_preflight_false_skips_the_checks(tmp_path, empty_caches, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg, editor = _cfg(tmp_path, "editor=identity", "metrics=hatie", "profile=pretrained", "preflight=false",
                       "limit=2", "stages=[edit]")
    assert run_pipeline(cfg, editor)["edit"].computed == 2


def test_tiny_profile_passes_and_says_what_it_checked(tmp_path, capsys):
    cfg, editor = _cfg(tmp_path, "editor=identity", "metrics=hatie", "profile=tiny", "limit=4")
    line = P.run_preflight(cfg, P.load_queries(cfg).subset(4), editor=editor, metrics="hatie")
    assert line.startswith("[editmeter] preflight ok in ") and "no pretrained weights needed" in line
    assert "4 queries x " in line and "free" in line


def test_missing_source_file_names_it_and_the_rebuild(tmp_path):
    root = tmp_path / "demo"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", f"queryset.root={root}")
    qs = P.load_queries(cfg)
    (root / qs.queries[3].image).unlink()
    with pytest.raises(PreflightError, match=rf"query set demo: .*e\.g\. {root / qs.queries[3].image}\. .*make_demo"):
        P.run_preflight(cfg, qs, editor=editor, metrics="basic")


def test_unwritable_results_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", f"paths.results={blocker / 'results'}")
    with pytest.raises(PreflightError, match=r"results folder .* is not writable .* paths.results="):
        P.run_preflight(cfg, P.load_queries(cfg), editor=editor, metrics="basic")


def test_disk_space_estimate_scales_with_the_set(tmp_path, monkeypatch):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny")
    qs = P.load_queries(cfg)
    mean, n = P._check_sources(cfg, qs, 32)
    assert mean == 256 * 256 * 3  # the demo's sources are 256 px RGB
    Usage = namedtuple("Usage", "total used free")
    need = len(qs) * mean * 1.5
    monkeypatch.setattr(P.shutil, "disk_usage", lambda p: Usage(0, 0, int(need) + 1))
    assert "need ~" in P.run_preflight(cfg, qs, editor=editor, metrics="basic")
    monkeypatch.setattr(P.shutil, "disk_usage", lambda p: Usage(0, 0, int(need) - 1))
    with pytest.raises(PreflightError, match=rf"not enough disk space .*{len(qs)} queries x 196.6 kB"):
        P.run_preflight(cfg, qs, editor=editor, metrics="basic")
    # half the queries need half the space
    assert "need ~" in P.run_preflight(cfg, qs.subset(len(qs) // 2), editor=editor, metrics="basic")


def test_online_missing_weights_pass_when_their_host_answers_else_fail(tmp_path, empty_caches, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    only_fid = ["editor=identity", "metrics=hatie", "profile=tiny", "metrics.hatie.fid.weights=pretrained"]
    cfg, editor = _cfg(tmp_path, *only_fid)
    qs = P.load_queries(cfg).subset(2)
    with serving(FileServer({})) as srv:
        monkeypatch.setattr(P, "_hosts", lambda missing: {"local": srv.url + "/"})
        line = P.run_preflight(cfg, qs, editor=editor, metrics="hatie")
    assert "0 checkpoints cached, 1 to download on first use" in line and "editmeter weights" in line
    monkeypatch.setattr(P, "_hosts", lambda missing: {"127.0.0.1:9": "http://127.0.0.1:9/"})  # nothing listens
    with pytest.raises(PreflightError, match=r"cannot be reached: 127.0.0.1:9 .*\n  - metrics hatie.fid: "):
        P.run_preflight(cfg, qs, editor=editor, metrics="hatie")

"""Preflight: a missing piece of a run fails before the first edit, in seconds, with one message naming it and the
command that fixes it."""

import shutil
import time
from collections import namedtuple

import pytest
from conftest import ROOT
from local_servers import FileServer, serving

from benchmark.commands.run import compose, run_pipeline
from benchmark.io.errors import PreflightError
from benchmark.plan import preflight as P
from benchmark.plan import weights as W
from benchmark.plan.config import read_plan

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
    line = P.run_preflight(read_plan(cfg), P.load_queries(read_plan(cfg)).subset(4), editor=editor, metrics="hatie")
    assert line.startswith("[editmeter] preflight ok in ") and "no pretrained weights needed" in line
    assert "4 queries x " in line and "free" in line


def test_missing_source_file_names_it_and_the_rebuild(tmp_path):
    root = tmp_path / "demo"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", f"queryset.root={root}")
    qs = P.load_queries(read_plan(cfg))
    (root / qs.queries[3].image).unlink()
    with pytest.raises(PreflightError, match=rf"query set demo: .*e\.g\. {root / qs.queries[3].image}\. .*editmeter data build demo"):
        P.run_preflight(read_plan(cfg), qs, editor=editor, metrics="basic")


def test_unwritable_results_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", f"paths.results={blocker / 'results'}")
    with pytest.raises(PreflightError, match=r"results folder .* is not writable .* paths.results="):
        P.run_preflight(read_plan(cfg), P.load_queries(read_plan(cfg)), editor=editor, metrics="basic")


def test_disk_space_estimate_scales_with_the_set(tmp_path, monkeypatch):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny")
    qs = P.load_queries(read_plan(cfg))
    mean, n, unusable = P._check_sources(read_plan(cfg), qs, 32)
    assert mean == 256 * 256 * 3 and n == 32 and unusable == ()  # the demo's sources are 256 px RGB
    Usage = namedtuple("Usage", "total used free")
    need = len(qs) * mean * 1.5
    monkeypatch.setattr(P.shutil, "disk_usage", lambda p: Usage(0, 0, int(need) + 1))
    assert "need ~" in P.run_preflight(read_plan(cfg), qs, editor=editor, metrics="basic")
    monkeypatch.setattr(P.shutil, "disk_usage", lambda p: Usage(0, 0, int(need) - 1))
    with pytest.raises(PreflightError, match=rf"not enough disk space .*{len(qs)} queries x 196.6 kB"):
        P.run_preflight(read_plan(cfg), qs, editor=editor, metrics="basic")
    # half the queries need half the space
    assert "need ~" in P.run_preflight(read_plan(cfg), qs.subset(len(qs) // 2), editor=editor, metrics="basic")


def test_online_missing_weights_pass_when_their_host_answers_else_fail(tmp_path, empty_caches, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    only_fid = ["editor=identity", "metrics=hatie", "profile=tiny", "metrics.hatie.fid.weights=pretrained"]
    cfg, editor = _cfg(tmp_path, *only_fid)
    qs = P.load_queries(read_plan(cfg)).subset(2)
    with serving(FileServer({})) as srv:
        monkeypatch.setattr("benchmark.plan.weights.host_of", lambda ck: srv.url + "/")
        line = P.run_preflight(read_plan(cfg), qs, editor=editor, metrics="hatie")
    assert "0 checkpoints cached, 1 to download on first use" in line and "editmeter weights" in line
    monkeypatch.setattr("benchmark.plan.weights.host_of", lambda ck: "http://127.0.0.1:9/")  # nothing listens
    with pytest.raises(PreflightError, match=r"cannot be reached: http://127.0.0.1:9/ .*\n  - metrics hatie.fid: "):
        P.run_preflight(read_plan(cfg), qs, editor=editor, metrics="hatie")


def _png_claiming(width: int, height: int) -> bytes:
    """A ~70-byte PNG whose header claims `width` x `height` RGB pixels (a decompression bomb)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + chunk(b"IEND", b""))


def _run_with_bad_source(tmp_path, capsys, data: bytes):
    """The demo with its first scene's source replaced by `data`, edited (limit=9: that scene's 7 queries and 2
    more) with the preflight on. Returns (edit stats, the preflight line, the replaced path)."""
    root = tmp_path / "demo"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", f"queryset.root={root}", "limit=9",
                       "stages=[edit]", "max_failed_fraction=1.0")
    bad = root / P.load_queries(read_plan(cfg)).queries[0].image
    bad.write_bytes(data)
    summary = run_pipeline(cfg, editor)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "preflight ok" in ln)
    return summary["edit"], line, bad


def test_decompression_bomb_source_is_a_failure_row_not_a_crash(tmp_path, capsys):
    """Issue 22.1: a 60000 x 60000 PNG header crashed the preflight with DecompressionBombError (PIL opened it
    directly); the preflight reads through the edit stage's loader, says so, and the edit stage records it."""
    st, line, bad = _run_with_bad_source(tmp_path, capsys, _png_claiming(60000, 60000))
    assert "9 sources checked; 7 unusable, their queries will be failure rows" in line and str(bad) in line
    assert (st.failed_total, st.total, st.computed) == (7, 9, 9)
    assert "header claims too many pixels" in st.reasons[0][0] and st.reasons[0][1] == 7


@pytest.mark.parametrize("data", [b"", b"this is not an image"], ids=["empty", "text"])
def test_empty_or_non_image_source_is_a_failure_row_not_an_incomplete_set(tmp_path, capsys, data):
    """Issue 22.2: an empty or non-image source among the first 32 made the preflight refuse the whole set with
    'set is incomplete; rebuild it' (the wrong fix); docs/inputs.md promises a failure row for it."""
    st, line, bad = _run_with_bad_source(tmp_path, capsys, data)
    assert "7 unusable" in line and "cannot decode image" in line
    assert (st.failed_total, st.total) == (7, 9) and "cannot decode image" in st.reasons[0][0]


def test_a_source_too_small_to_edit_is_reported_too(tmp_path):
    """The preflight applies the loader's limits (here min_source_side) as the edit stage will."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    root = tmp_path / "demo"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    cfg, _ = _cfg(tmp_path, "editor=identity", "profile=tiny", f"queryset.root={root}")
    qs = P.load_queries(read_plan(cfg)).subset(9)
    (root / qs.queries[0].image).write_bytes(buf.getvalue())
    src = P._check_sources(read_plan(cfg), qs, 32)
    assert src.n_sampled == 9 and len(src.unusable) == 7 and "minimum side" in src.unusable[0]
    assert src.mean_bytes == 256 * 256 * 3  # the estimate uses the usable sources only

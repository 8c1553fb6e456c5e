"""`editmeter score` is judged like `editmeter run editor=external`: the same exit status and marks on the same
folder; unreadable edits are failures, missing files are missing (a PARTIAL row), an edit of another size follows
each suite's declared rule, and a stage that aggregated no scored query says so in its exit status."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from benchmark.commands import cli
from benchmark.querysets.io import load_queryset

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"
COMMON = ["queryset=demo_mini", "profile=tiny", "progress=false", "aggregate.bootstrap_resamples=20"]


def _mini() -> list:
    return load_queryset(DEMO).queries[:14]  # demo_mini: the demo's first 14 queries


def _exit(argv: list[str]) -> int:
    """The exit status of `editmeter <argv>` in this process (Hydra's entry exits through SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def _both(edits: Path, results: Path, *extra: str) -> dict[str, tuple[int, pd.Series]]:
    """Score `edits` with `editmeter score` and with `editmeter run editor=external` (each into its own results):
    {command: (exit status, its leaderboard row)}."""
    out = {}
    for cmd in ("score", "run"):
        res = results / cmd
        args = [*COMMON, f"paths.results={res}", *extra]
        if cmd == "score":
            rc = _exit(["score", "--edits", str(edits), "--name", "theirs", *args])
        else:
            rc = _exit(["run", "editor=external", f"editor.folder={edits}", *args])
        lb = pd.read_csv(res / "leaderboard.csv", keep_default_na=False)
        out[cmd] = (rc, lb.iloc[0])
    return out


def _sources_as_edits(folder: Path, queries, size=None) -> None:
    """Each query's source image as its "edit" (an identity edit), optionally resized (PIL bicubic) to `size`."""
    folder.mkdir(parents=True, exist_ok=True)
    for q in queries:
        im = Image.open(DEMO / q.image).convert("RGB")
        (im if size is None else im.resize(size, Image.Resampling.BICUBIC)).save(folder / f"{q.id}.png")


def _rows(results: Path) -> pd.DataFrame:
    """Every score row under `results` (one run), last part winning per query."""
    parts = sorted(results.glob("runs/*/*/scores/*/part-*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in parts]).drop_duplicates("query_id", keep="last").set_index("query_id")


def test_truncated_edits_fail_score_as_they_fail_run(tmp_path, capsys, restore_logging):
    """The issue's case: 8 of 14 PNGs truncated. Both commands exit 1 with the verdict; the rows agree."""
    edits = tmp_path / "edits"
    _sources_as_edits(edits, _mini())
    for p in sorted(edits.iterdir())[:8]:
        p.write_bytes(p.read_bytes()[:200])
    got = _both(edits, tmp_path / "r", "metrics=basic")
    err = capsys.readouterr().err
    assert got["score"][0] == got["run"][0] == 1
    assert err.count("edit: 8 of 14 failed") == 2 and err.count("57% > max_failed_fraction=0.1") == 2
    for _, row in got.values():
        assert (row["n_ok"], row["n_failed"], row["n_missing"]) == (6, 8, 0)
    assert got["score"][1]["mark"] == got["run"][1]["mark"]


def test_missing_files_are_missing_not_failed_in_both_commands(tmp_path, capsys, restore_logging):
    edits = tmp_path / "edits"
    _sources_as_edits(edits, _mini()[:10])
    got = _both(edits, tmp_path / "r", "metrics=basic")
    out = capsys.readouterr().out
    assert got["score"][0] == got["run"][0] == 0
    for _, row in got.values():
        assert (row["n_ok"], row["n_failed"], row["n_missing"], row["mark"]) == (10, 0, 4, "PARTIAL 10/14")
    assert out.count("[editmeter] PARTIAL: 4 of 14 queries have no edit") == 2
    # one unreadable file among the 10 present: 1 of 10 attempted failed (10% is not over the default 0.1)
    (edits / f"{_mini()[0].id}.png").write_bytes(b"not a png")
    got = _both(edits, tmp_path / "r2", "metrics=basic")
    assert got["score"][0] == got["run"][0] == 0
    for _, row in got.values():
        assert (row["n_ok"], row["n_failed"], row["n_missing"]) == (9, 1, 4)


def test_a_folder_without_any_edit_exits_1_in_both_commands(tmp_path, capsys, restore_logging):
    (tmp_path / "none").mkdir()
    got = _both(tmp_path / "none", tmp_path / "r", "metrics=basic")
    err = capsys.readouterr().err
    assert got["score"][0] == got["run"][0] == 1
    assert err.count("no query has an edit: 14 of 14 missing") == 2 and "Nothing was scored" in err
    assert all(row["mark"] == "PARTIAL 0/14" for _, row in got.values())


def test_pixel_metrics_resize_an_edit_of_another_size_to_the_source(tmp_path, capsys, restore_logging):
    """metrics=basic: an edit at 128 px and one at 400 px of a 256 px source are resized to 256 px with PIL's bicubic
    filter (worked out here with PIL and numpy); one whose aspect ratio is 2:1 is refused with both sizes named."""
    queries = _mini()
    edits = tmp_path / "edits"
    _sources_as_edits(edits, queries[:6], (128, 128))
    _sources_as_edits(edits, queries[6:13], (400, 400))
    _sources_as_edits(edits, queries[13:], (256, 128))
    got = _both(edits, tmp_path / "r", "metrics=basic")
    capsys.readouterr()
    assert got["score"][0] == got["run"][0] == 0  # 1 of 14 failed: within max_failed_fraction
    for cmd in ("score", "run"):
        rows = _rows(tmp_path / "r" / cmd)
        for q in queries[:13]:
            src = Image.open(DEMO / q.image).convert("RGB")
            made = src.resize((128, 128) if q in queries[:6] else (400, 400), Image.Resampling.BICUBIC)
            back = np.asarray(made.resize(src.size, Image.Resampling.BICUBIC), dtype=np.float64) / 255
            l1 = np.abs(back - np.asarray(src, dtype=np.float64) / 255).mean()
            assert rows.loc[q.id, "status"] == "ok" and rows.loc[q.id, "l1"] == pytest.approx(l1, abs=1e-6)
            assert rows.loc[q.id, "l1"] > 0  # not the identity: the resize is really there
        bad = rows.loc[queries[13].id]
        assert bad["status"] == "failed"
        assert "edit is 256x128, source is 256x256: their aspect ratios differ by 100%" in bad["reason"]


@pytest.mark.parametrize(("size", "refused"), [((256, 240), "differ by 7%"), ((256, 246), ""), ((240, 256), "differ by 7%"),
                                             ((246, 256), ""), ((32, 32), ""), ((31, 31), "under 1/8"),
                                             ((1, 1), "under 1/8")])
def test_the_other_size_rule_on_both_sides_of_its_limits(size, refused):
    """fit_to_source at its two limits: 256x240 against a 256x256 source is 6.7% off and refused, 256x246 (4.1%)
    is resized bicubically; a side under 1/8 of the source's (a 1x1 edit) is refused, 1/8 itself is resized."""
    from benchmark.io.imageio import ImageInputError
    from benchmark.metrics.sizes import fit_to_source

    edit = Image.fromarray(np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    if refused:
        with pytest.raises(ImageInputError, match=refused):
            fit_to_source(edit, (256, 256))
    else:
        got = fit_to_source(edit, (256, 256))
        assert got.size == (256, 256)
        assert np.array_equal(np.asarray(got), np.asarray(edit.resize((256, 256), Image.Resampling.BICUBIC)))


def test_a_1x1_edit_is_a_failed_row_of_the_pixel_metrics(tmp_path, capsys, restore_logging):
    """metrics=basic scored a 1x1 edit of a 256 px source (l1 0.341, ssim 0.384) as if it were an edit."""
    queries = _mini()
    edits = tmp_path / "edits"
    _sources_as_edits(edits, queries[:13], (256, 256))
    _sources_as_edits(edits, queries[13:], (1, 1))
    exit_code = _exit(["score", "--edits", str(edits), "--name", "theirs", *COMMON,
                       f"paths.results={tmp_path / 'r' / 'score'}", "metrics=basic"])
    capsys.readouterr()
    assert exit_code == 0
    bad = _rows(tmp_path / "r" / "score").loc[queries[13].id]
    assert bad["status"] == "failed" and "edit is 1x1, source is 256x256" in bad["reason"]
    assert math.isnan(bad["l1"])


def test_hatie_scores_an_edit_of_another_size_as_its_512_px_resize(tmp_path, capsys, restore_logging):
    """metrics=hatie resizes every edit to 512 x 512 with PIL's bicubic filter, as the release does: the 256 px
    sources as edits (through `editmeter run editor=external`), and the same images resized to 512 px by hand
    (through `editmeter score`), get identical scores (metamorphic)."""
    queries = _mini()
    _sources_as_edits(tmp_path / "at256", queries)
    _sources_as_edits(tmp_path / "at512", queries, (512, 512))
    args = [*COMMON, "metrics=hatie"]
    assert _exit(["run", "editor=external", f"editor.folder={tmp_path / 'at256'}", *args,
                  f"paths.results={tmp_path / 'a'}"]) == 0
    assert _exit(["score", "--edits", str(tmp_path / "at512"), "--name", "theirs", *args,
                  f"paths.results={tmp_path / 'b'}"]) == 0
    capsys.readouterr()
    a, b = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert (a["status"] == "ok").all() and (b["status"] == "ok").all() and len(a) == len(b) == 14
    cols = [c for c in a.columns if c.startswith("raw_") or c in ("OF", "BF", "OC", "BC")]
    assert cols and np.array_equal(a.loc[b.index, cols].to_numpy(float), b[cols].to_numpy(float), equal_nan=True)


def test_an_aggregate_only_run_whose_rows_are_all_quarantined_exits_1(tmp_path, capsys, restore_logging):
    edits = tmp_path / "edits"
    _sources_as_edits(edits, _mini())
    results = tmp_path / "r"
    run = ["run", "editor=external", f"editor.folder={edits}", *COMMON, "metrics=basic", f"paths.results={results}"]
    assert _exit(run) == 0
    assert _exit([*run, "stages=[aggregate]"]) == 0  # every row there: the tables are whole
    for part in results.glob("runs/*/*/scores/*/part-*.parquet"):
        part.write_bytes(b"PAR1 not a parquet file")
    capsys.readouterr()
    assert _exit([*run, "stages=[aggregate]"]) == 1
    err = capsys.readouterr().err
    assert "aggregate: this run's leaderboard rows cover no scored query (basic: PARTIAL 0/14" in err
    assert pd.read_csv(results / "leaderboard.csv").iloc[0]["n_ok"] == 0


def test_missing_edits_are_counted_missing_not_already_done(tmp_path, capsys, restore_logging):
    """`editmeter score` on a folder missing 2 of 14 files said "12 edited, 0 failed, 2 already done", and on an
    empty folder "14 already done": a missing edit is missing."""
    queries = _mini()
    edits = tmp_path / "edits"
    _sources_as_edits(edits, queries[:12])
    common = [*COMMON, "metrics=basic"]
    assert _exit(["score", "--edits", str(edits), "--name", "theirs", f"paths.results={tmp_path / 'a'}", *common]) == 0
    out = capsys.readouterr().out
    assert "edit: 12 edited, 0 failed, 0 already done, 2 missing (no edit in the folder)" in out
    assert _exit(["score", "--edits", str(edits), "--name", "theirs", f"paths.results={tmp_path / 'a'}", *common]) == 0
    assert "edit: 0 edited, 0 failed, 12 already done, 2 missing" in capsys.readouterr().out
    (tmp_path / "none").mkdir()
    _exit(["score", "--edits", str(tmp_path / "none"), "--name", "theirs", f"paths.results={tmp_path / 'b'}", *common])
    assert "edit: 0 edited, 0 failed, 0 already done, 14 missing" in capsys.readouterr().out


def test_a_long_reason_is_cut_at_a_word_and_marked():
    from benchmark.io.console import shorten
    from benchmark.stages.edit import failure_summary

    reason = ("edit is 256x128, source is 256x256: their aspect ratios differ by 100%, over the 5% that is resized "
              "to the source's size (pixel metrics compare aligned pixels); make the edit at the source's aspect "
              "ratio, or crop it to it")
    short = shorten(reason)
    assert len(short) <= 200 and short.endswith("…") and reason.startswith(short[:-1])
    assert short == reason[: len(short) - 1] + "…" and reason[len(short) - 1] == " "  # cut before a space
    assert shorten("short reason") == "short reason" and shorten("x" * 300).endswith("…")
    line = failure_summary(1, 14, ((short, 1),), "failures.log")
    assert "the source's aspect…; tracebacks in failures.log" in line  # whole words, the cut marked


def test_the_weights_fix_for_edits_made_elsewhere_names_a_command_that_works(tmp_path, capsys, monkeypatch,
                                                                             restore_logging):
    """`editmeter score --name blur-make` with pretrained weights missing said "Fix: editmeter weights
    editor=blur-make", which answers "unknown editor"; the fix names editor=external, and that command runs."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # nothing cached, whatever this machine has
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty-torch-home"))
    edits = tmp_path / "edits"
    _sources_as_edits(edits, _mini())
    rc = _exit(["score", "--edits", str(edits), "--name", "blur-make", "queryset=demo_mini", "metrics=hatie",
                f"paths.results={tmp_path / 'r'}", "progress=false"])
    err = capsys.readouterr().err
    assert rc != 0 and "Fix: editmeter weights editor=external metrics=hatie" in err, err[-1500:]
    assert "editor=blur-make" not in err
    assert _exit(["weights", "editor=external", "metrics=hatie", "--list"]) == 0

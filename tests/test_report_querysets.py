"""The report's sources and ground truth for derived query sets: a set is loaded as its runs recorded it (run.json
`queryset_config`, or for an older run.json a sample's recorded draw), for samples, nested samples, GEdit-Bench's
language splits, multi-turn sets and their samples; a recorded loader no config names is refused."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from benchmark.commands.report.collect import resolve_queryset


def _recorded(*overrides: str, **paths: str) -> tuple[object, dict]:
    """(the set, run.json's query-set fields) as a run composed with `overrides` records them."""
    from omegaconf import OmegaConf

    from benchmark.commands.run import compose
    from benchmark.plan.config import instantiate, portable

    cfg, _ = compose([*overrides, *(f"queryset.{k}={v}" for k, v in paths.items())])
    spec = OmegaConf.to_container(cfg.queryset, resolve=True)
    qs = instantiate(spec)
    return qs, {"queryset": qs.name, "queryset_hash": qs.hash, "sample": qs.meta.get("sample"),
                "queryset_config": portable(spec)}


def _resolves(qs, meta: dict) -> None:
    loaded, why = resolve_queryset(meta["queryset"], meta["queryset_hash"], metas=[meta])
    assert why == "" and loaded.name == qs.name and loaded.hash == qs.hash
    assert [q.id for q in loaded.queries] == [q.id for q in qs.queries]


@pytest.mark.parametrize("overrides", [
    ("queryset=demo", "queryset.sample=14"),
    ("queryset=demo_editval", "queryset.sample=5", "queryset.sample_seed=3"),
    ("queryset=demo_sessions",),  # multi-turn
    ("queryset=demo_sessions", "queryset.sample=2"),  # a sample of whole sessions
])
def test_a_derived_set_is_loaded_from_its_recorded_config(overrides):
    qs, meta = _recorded(*overrides)
    assert qs.name != overrides[0].split("=")[1] or len(overrides) == 1
    _resolves(qs, meta)


def test_nested_samples_of_one_set_each_resolve_to_their_own_draw():
    small, meta_small = _recorded("queryset=demo", "queryset.sample=14")
    large, meta_large = _recorded("queryset=demo", "queryset.sample=28")
    assert {q.id for q in small.queries} < {q.id for q in large.queries}
    _resolves(small, meta_small)
    _resolves(large, meta_large)
    # both runs' metas offered for one set: the one that makes its name and hash is used
    loaded, why = resolve_queryset(small.name, small.hash, metas=[meta_large, meta_small])
    assert why == "" and loaded.hash == small.hash


def test_a_sample_recorded_before_the_config_was_is_drawn_again_from_its_parent():
    """The issue's case: run.json of `queryset=demo queryset.sample=14` without `queryset_config`."""
    for overrides in (("queryset=demo", "queryset.sample=14"), ("queryset=demo_sessions", "queryset.sample=2"),
                      ("queryset=demo_mini", "queryset.sample=3", "queryset.sample_types=[obj_add,obj_rep]")):
        qs, meta = _recorded(*overrides)
        del meta["queryset_config"]
        _resolves(qs, meta)


def test_gedit_language_splits_and_their_samples_resolve(tmp_path):
    from test_gedit_builder import gedit_dataset

    from benchmark.querysets.gedit import build

    root = tmp_path / "gedit"
    build(gedit_dataset(tmp_path), root)
    names = set()
    for extra in (("queryset.language=en",), ("queryset.language=cn",), ("queryset.language=both",),
                  ("queryset.language=cn", "queryset.subset=intersection"),
                  ("queryset.language=en", "queryset.sample=2")):
        qs, meta = _recorded("queryset=gedit", *extra, root=str(root))
        names.add(qs.name)
        _resolves(qs, meta)
    assert names == {"gedit-en", "gedit-cn", "gedit", "gedit-cn-intersection", "gedit-en-sample2-seed0"}
    # an older run.json (no queryset_config) of a split: no config is named gedit-en, and the note says what to do
    qs, meta = _recorded("queryset=gedit", "queryset.language=en", root=str(root))
    del meta["queryset_config"]
    loaded, why = resolve_queryset(qs.name, qs.hash, metas=[meta])
    assert loaded is None and "records no query-set config" in why and "stages=[aggregate]" in why


def test_files_changed_since_the_run_and_foreign_loaders_are_not_shown(tmp_path):
    qs, meta = _recorded("queryset=demo", "queryset.sample=14")
    loaded, why = resolve_queryset(qs.name, "0" * 64, metas=[meta])
    assert loaded is None and "the runs were made on 0000000000" in why
    for bad in ({**meta["queryset_config"], "_target_": "os.system"},
                {**meta["queryset_config"], "_target_": "benchmark.querysets.io.load_sampled", "loader": "os.getcwd"}):
        loaded, why = resolve_queryset(qs.name, qs.hash, metas=[{**meta, "queryset_config": bad, "sample": None}])
        assert loaded is None and "is not one a query-set config names" in why


def test_the_report_of_a_sampled_run_shows_its_sources_and_ground_truth(tmp_path, monkeypatch):
    """A real run on a sample records its config; the report's grid has each query's source and ground truth."""
    import sys

    from benchmark.commands.report import build_report
    from benchmark.commands.run import compose, run_pipeline

    monkeypatch.setitem(sys.modules, "benchmark.commands.compare", None)
    results = tmp_path / "results"
    cfg, choices = compose(["queryset=demo_mini", "queryset.sample=7", "profile=tiny", "editor=identity",
                            "metrics=basic", f"paths.results={results}", "progress=false",
                            "aggregate.bootstrap_resamples=20"])
    run_pipeline(cfg, choices["editor"])
    meta = json.loads(next(results.glob("runs/*/*/run.json")).read_text())
    assert meta["queryset"] == "demo_mini-sample7-seed0" and meta["queryset_config"]["sample"] == 7
    assert meta["queryset_config"]["root"].startswith("<root>/")  # portable across clones
    out = tmp_path / "report"
    build_report(results, out)
    rows = []
    for path in sorted(out.glob("data/grid/*/chunk-*.js")):
        m = re.fullmatch(r'EM\.chunk\("[^"]+",\d+,(.*)\);\n', path.read_text(encoding="utf-8"), re.S)
        rows += json.loads(m.group(1))
    assert len(rows) == 7 and all(r["src"] and r["gt"] for r in rows)
    assert "could not be loaded" not in (out / "index.html").read_text(encoding="utf-8")
    shutil.rmtree(out)

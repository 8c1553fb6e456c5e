"""The demo's HATIE table discriminates: on the oracle segmenter (exact masks of the demo world's renders, a declared
fallback for other edits) the oracle editor beats identity and overedit, and the table names its segmenter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

DEMO = ROOT / "datasets" / "demo"


@pytest.fixture(scope="module")
def demo_hatie(tmp_path_factory, single_thread_torch) -> pd.DataFrame:
    """`make demo`'s HATIE step for the weight-free editors: demo_mini, tiny backbones, metrics=hatie_oracle."""
    from benchmark.commands.run import compose, run_pipeline

    results = tmp_path_factory.mktemp("results")
    for editor in ("identity", "oracle", "overedit"):
        cfg, choices = compose([f"editor={editor}", "queryset=demo_mini", "profile=tiny", "metrics=hatie_oracle",
                                f"paths.results={results}", "progress=false", "aggregate.bootstrap_resamples=50"])
        run_pipeline(cfg, choices["editor"])
    return pd.read_csv(results / "leaderboard.csv").set_index("editor")


def test_oracle_beats_identity_and_overedit_on_total_and_of(demo_hatie):
    t = demo_hatie
    assert t["complete"].all()
    for col in ("Total", "OF"):
        assert t.loc["oracle", col] > t.loc["identity", col], col
        assert t.loc["oracle", col] > t.loc["overedit", col], col


def test_identity_beats_overedit_on_what_it_preserves(demo_hatie):
    """Identity keeps every object and the background; overedit destroys both."""
    t = demo_hatie
    for col in ("Total", "OC", "BC"):
        assert t.loc["identity", col] > t.loc["overedit", col], col


def test_the_rows_name_their_segmenter(demo_hatie):
    """The oracle and its fallback are both in the recorded segmenter (and so in the metric signature)."""
    for comp in demo_hatie["components"]:
        seg = json.loads(comp)["segmenter"]
        assert seg.startswith("oracle-demo-render|else:torchvision/") and "tiny" in seg
    assert (demo_hatie["metric_set"] == "hatie_oracle").all()


class _Stub:
    """A fallback that 'detects' nothing and counts its calls."""

    signature = "stub/none"

    def __init__(self) -> None:
        self.seen = 0

    def segment(self, images):
        self.seen += len(images)
        return [{} for _ in images]


def _inputs(qs, paths: list[Path]) -> list[np.ndarray]:
    from benchmark.io.imageio import load_rgb
    from benchmark.metrics.hatie.suite import segmenter_input

    return [segmenter_input(load_rgb(p)) for p in paths]


def test_the_fallback_gets_only_what_the_oracle_does_not_know(demo_qs, capsys):
    from benchmark.metrics.hatie.oracle import ORACLE_SIGNATURE, OracleSegmenter

    stub = _Stub()
    oracle = OracleSegmenter(DEMO, fallback=stub)
    q = next(q for q in demo_qs.queries if q.edit_type == "attr_chg")
    known, other = _inputs(demo_qs, [demo_qs.path(q.image), demo_qs.path(q.target_image)])
    other = other.copy()
    other[0, 0, 0] ^= 1  # one bit off an exact render
    segs = oracle.segment([known, other, known])
    assert q.target.name in segs[0] and segs[1] == {} and q.target.name in segs[2]
    assert stub.seen == 1 and oracle.counts == {"oracle": 2, "fallback": 1}
    assert oracle.signature == f"{ORACLE_SIGNATURE}|else:stub/none" != OracleSegmenter(DEMO).signature
    assert "segmented by the fallback stub/none" in capsys.readouterr().out


def test_a_build_segmenter_fallback_is_keyed_before_it_loads():
    """The fallback's identity is resolved without loading it; runs whose edits are all renders never load it."""
    from functools import partial

    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.models.segmenter import build_segmenter

    seg = load_oracle_segmenter(str(DEMO), fallback=partial(build_segmenter, backend="torchvision", weights="tiny"))
    assert seg.signature == "oracle-demo-render|else:" + seg.fallback.signature
    assert seg.fallback._model is None

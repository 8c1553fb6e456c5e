"""One engine across the newer suites: EditVal, AugCLIP and BPM encode through the process-wide feature cache, so an
input one suite already gave an encoder is not encoded again by another in the same process, and no row changes."""

from functools import partial

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from benchmark.metrics.features import shared_cache

DEMO = ROOT / "datasets" / "demo"
N_QUERIES = 6


def _score(suite, qs, queries, paths):
    rows = [r for b in suite.score_queries(qs, queries, paths, work_dir=None, progress=False) for r in b]
    return pd.DataFrame(rows).set_index("query_id").loc[[q.id for q in queries]]


def _encoded() -> int:
    return sum(shared_cache().forward_items.values())


def _apart_and_together(make_a, make_b, score):
    """(rows of a, rows of b, inputs encoded: a alone + b alone (fresh cache each), a then b in one process)."""
    cache = shared_cache()
    cache.clear()
    a_alone = score(make_a())
    separate = _encoded()
    cache.clear()
    b_alone = score(make_b())
    separate += _encoded()
    cache.clear()
    a_together = score(make_a())
    after_a = _encoded()
    b_together = score(make_b())
    together = _encoded()
    cache.clear()
    return (a_alone, a_together), (b_alone, b_together), separate, together, together - after_a


def _assert_same_rows(alone, together):
    # float32 scores, alone and sharing the feature cache: max 5.1e-8 apart (0.7% of the tolerance), measured
    # here (tests/helpers/spread_probe.py, the project's 2-core machine)
    assert list(alone.columns) == list(together.columns) and (alone["status"] == "ok").all()
    num = [c for c in alone.columns if pd.api.types.is_numeric_dtype(alone[c])]
    assert np.allclose(alone[num].to_numpy(float), together[num].to_numpy(float), atol=1e-6, equal_nan=True)


def test_editval_and_conventional_share_dino_vitb16(single_thread_torch):
    """EditVal's DINO ViT-B/16 (resize224) and the conventional suite's `dino_ev` get the same inputs (the decoded
    source and edit): scored after the conventional suite, EditVal encodes nothing new, and its DINO_context
    equals the conventional dino_ev column."""
    from benchmark.metrics.conventional.suite import ConventionalSuite
    from benchmark.metrics.editval.oracle import load_oracle_detector
    from benchmark.metrics.editval.suite import EditValSuite
    from benchmark.models.dino_v1 import load_dino_v1
    from benchmark.querysets.demo import load_editval_demo

    qs = load_editval_demo(str(DEMO))
    queries = list(qs.queries)[:N_QUERIES]
    paths = [qs.path(q.target_image) for q in queries]  # the exact edits (oracle)
    dino = partial(load_dino_v1, weights="tiny", model_id="facebook/dino-vitb16", recipe="resize224")
    conv = lambda: ConventionalSuite(dino_ev=dino, device="cpu")  # noqa: E731
    ev = lambda: EditValSuite(detector=partial(load_oracle_detector, root=str(DEMO)), dino=dino, fid=None,  # noqa: E731
                              device="cpu")
    (c1, c2), (e1, e2), separate, together, ev_new = _apart_and_together(
        conv, ev, lambda s: _score(s, qs, queries, paths))
    assert 0 < together < separate and ev_new == 0, (separate, together, ev_new)
    _assert_same_rows(c1, c2)
    _assert_same_rows(e1, e2)
    assert np.allclose(e2["DINO_context"], c2["dino_ev"], atol=1e-5)


def test_augclip_and_conventional_share_clip_texts(single_thread_torch):
    """With one CLIP (the conventional suite set to AugCLIP's ViT-B/16), a caption the conventional suite encoded
    is not encoded again by AugCLIP; the rows of both are those of separate processes."""
    from benchmark.metrics.augclip.attributes import StructuredExtractor
    from benchmark.metrics.augclip.suite import AugClipSuite
    from benchmark.metrics.conventional.suite import ConventionalSuite
    from benchmark.models.clip import load_clip
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(DEMO, name="demo_mini")
    queries = [q for q in qs.queries if q.target_caption and q.source_caption][:N_QUERIES]
    paths = [qs.path(q.image) for q in queries]  # identity edits
    clip = partial(load_clip, weights="tiny", arch="ViT-B-16-quickgelu", tag="openai")
    conv = lambda: ConventionalSuite(clip=clip, device="cpu")  # noqa: E731
    aug = lambda: AugClipSuite(clip=clip, extractor=StructuredExtractor, device="cpu")  # noqa: E731
    (c1, c2), (a1, a2), separate, together, _ = _apart_and_together(conv, aug, lambda s: _score(s, qs, queries, paths))
    assert 0 < together < separate, (separate, together)
    _assert_same_rows(c1, c2)
    _assert_same_rows(a1, a2)


@pytest.mark.parametrize("metrics", ["augclip", "bpm"])
def test_a_second_suite_instance_encodes_nothing_again(metrics, single_thread_torch):
    """Every CLIP input of AugCLIP / BPM goes through the shared cache: another instance of the suite (another
    editor of a sweep, a re-run) scoring the same edits in the process encodes nothing, with equal rows."""
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(DEMO, name="demo_mini", first=2 * N_QUERIES)
    queries = list(qs.queries)
    paths = [qs.path(q.image) for q in queries]
    make = lambda: instantiate(compose([f"metrics={metrics}", "profile=tiny", "device=cpu"])[0].metrics[metrics])  # noqa: E731
    (x1, x2), (y1, y2), separate, together, second_new = _apart_and_together(
        make, make, lambda s: _score(s, qs, queries, paths))
    assert separate == 2 * together > 0 and second_new == 0, (separate, together, second_new)
    assert (x1["status"] == "ok").any()
    for a, b in ((x1, y2), (x1, x2), (y1, y2)):
        num = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c])]
        assert list(a.columns) == list(b.columns) and a["status"].equals(b["status"])
        assert np.allclose(a[num].to_numpy(float), b[num].to_numpy(float), atol=1e-6, equal_nan=True)

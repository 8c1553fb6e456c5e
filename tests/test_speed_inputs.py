"""HATIE's faster input pipeline changes no number: the fast primitives equal the release's formulas bit for bit,
the loader's per-source memo gives the items a fresh decode gives, and scoring many queries per chunk (shared
caches, one plan set) equals the per-query loop exactly at the same forward batch size."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import torch

from benchmark.metrics.hatie import primitives as P

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"


# -- the release's formulas, as editmeter computed them before (float masks multiplied over the whole image) ----
def _crop_ref(img, mask, bbox):
    x0, y0, x1, y1 = (int(v) for v in bbox)
    src = img if mask is None else img * mask.unsqueeze(0)
    return P.square_pad(src[:, y0:y1, x0:x1])


def _background_ref(img, *masks):
    out = img
    for m in masks:
        out = out * (1 - m).unsqueeze(0)
    return out


def _com_ref(mask):
    m = mask.double()
    area = m.sum()
    x = float((m.sum(dim=0) * torch.arange(m.shape[1], dtype=torch.float64)).sum() / area)
    y = float((m.sum(dim=1) * torch.arange(m.shape[0], dtype=torch.float64)).sum() / area)
    return x, y


def _pos_ref(m_edit, m_orig):
    (xa, ya), (xb, yb) = _com_ref(m_edit), _com_ref(m_orig)
    d = math.hypot(xa - xb, ya - yb) / math.sqrt(float(m_edit.sum()))
    return (P.POS_MAX_DISTANCE - d) / P.POS_MAX_DISTANCE


def _random_mask(g, size):
    """A blob or a box: {0, 1} float, never empty."""
    if torch.rand(1, generator=g) < 0.5:
        m = (torch.rand(size // 8, size // 8, generator=g) < torch.rand(1, generator=g)).float()
        m = torch.nn.functional.interpolate(m[None, None], size=(size, size), mode="nearest")[0, 0]
    else:
        x0, y0 = (int(v) for v in torch.randint(0, size - 8, (2,), generator=g))
        x1, y1 = x0 + int(torch.randint(2, size - x0, (1,), generator=g)), y0 + int(torch.randint(2, size - y0, (1,), generator=g))
        m = torch.zeros(size, size)
        m[y0:y1, x0:x1] = 1
    m[int(torch.randint(0, size, (1,), generator=g)), int(torch.randint(0, size, (1,), generator=g))] = 1
    return m


def test_fast_primitives_equal_the_release_formulas_bit_for_bit():
    from benchmark.models.segmenter import bbox_from_mask

    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        size = int(torch.randint(16, 96, (1,), generator=g))
        img = torch.randint(0, 256, (3, size, size), generator=g).float() / 255  # as decoded images are
        a, b, c = (_random_mask(g, size) for _ in range(3))
        box = bbox_from_mask(a.bool().numpy())
        assert torch.equal(P.crop(img, a, box), _crop_ref(img, a, box))
        assert torch.equal(P.crop(img, None, box), _crop_ref(img, None, box))
        for masks in ((), (a,), (a, b), (a, b, c)):
            fast, ref = P.background(img, *masks), _background_ref(img, *masks)
            assert torch.equal(fast, ref) and fast.dtype == ref.dtype
            assert torch.equal(torch.signbit(fast), torch.signbit(ref))  # no -0.0 where the release has +0.0
        assert P.com(a) == _com_ref(a) and P.com(a.bool().numpy()) == _com_ref(a)
        assert P.pos(a, b) == _pos_ref(a, b)
        r = math.sqrt(float(b.sum()) / float(a.sum()))
        for mode in ("enlarge", "shrink", "keep"):
            assert P.size(a, b, mode) == P.size(a.bool().numpy(), b.bool().numpy(), mode)
        assert P.area(b) == float(b.sum()) and math.sqrt(P.area(b) / P.area(a)) == r


def test_float_conversion_equals_the_numpy_recipe_for_every_byte_value():
    """Exhaustive over the 256 values a pixel channel can take: the float conversion every suite uses (HATIE's from
    arrays, the others' from PIL images) gives numpy's float32(x) / 255 and its channels-last strides (reductions
    follow them), for RGB images and images converted to RGB."""
    from PIL import Image

    from benchmark.io.imageio import float_chw, to_float_tensor

    arr = (np.arange(16 * 16 * 3) % 256).astype(np.uint8).reshape(16, 16, 3)
    ref = torch.from_numpy((np.asarray(arr, dtype=np.float32) / 255.0).copy()).permute(2, 0, 1)
    for fast in (float_chw(arr.copy()), to_float_tensor(Image.fromarray(arr)),
                 to_float_tensor(Image.fromarray(arr).convert("RGBA"))):
        assert torch.equal(ref, fast) and ref.stride() == fast.stride() and ref.dtype == fast.dtype


def test_the_loader_memo_gives_what_a_fresh_decode_gives(demo_qs):
    """Originals and masks decoded once per source equal those of a loader that decodes each query afresh."""
    from benchmark.metrics.hatie.suite import _HatieSamples

    queries = sorted(demo_qs.queries, key=lambda q: (q.image, q.id))[:20]
    paths = [demo_qs.path(q.target_image) for q in queries]
    memo = _HatieSamples(demo_qs, queries, paths)
    for i in range(len(queries)):
        got, fresh = memo[i], _HatieSamples(demo_qs, queries, paths)[i]
        assert not got.error and not fresh.error
        assert torch.equal(got.original, fresh.original) and torch.equal(got.edit, fresh.edit)
        assert np.array_equal(got.edit_u8, fresh.edit_u8) and got.edit_sha == fresh.edit_sha
        assert got.gt_masks.keys() == fresh.gt_masks.keys()
        assert all(torch.equal(got.gt_masks[k], fresh.gt_masks[k]) for k in got.gt_masks)


def _score(demo_qs, queries, tmp_path, chunk_size):
    from benchmark.metrics.features import shared_cache
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import HatieSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    shared_cache().clear()
    suite = HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(DEMO)), clip=partial(load_clip, "tiny"),
                       dino=partial(load_dino, "tiny"), lpips=partial(load_lpips, "tiny"), fid=None, device="cpu",
                       batch_size=1, chunk_size=chunk_size, cache_size=4096 if chunk_size > 1 else 0)
    rows = [r for rs in suite.score_queries(demo_qs, queries, [demo_qs.path(q.target_image) for q in queries],
                                            work_dir=tmp_path, progress=False) for r in rs]
    shared_cache().clear()
    return {r["query_id"]: r for r in rows}


def test_chunked_scoring_equals_the_per_query_loop_exactly(demo_qs, tmp_path, single_thread_torch):
    """Many queries per chunk (shared plans, feature reuse across queries, the loader memo) against one query per
    chunk with no reuse: every raw sub-score and criterion is the same float (forward batch size 1 in both, so the
    backbones' numerics are the same; only the scheduling differs)."""
    queries = [q for t in ("attr_chg", "obj_resize", "obj_rep", "obj_add", "obj_remove", "bg_chg", "style_chg")
               for q in [x for x in demo_qs.queries if x.edit_type == t][:2]]
    batched = _score(demo_qs, queries, tmp_path / "a", chunk_size=32)
    loop = _score(demo_qs, queries, tmp_path / "b", chunk_size=1)
    assert batched.keys() == loop.keys() and len(batched) == len(queries)
    assert any(r["branch"] == "detected" for r in batched.values())
    for qid, row in batched.items():
        other = loop[qid]
        assert row["status"] == other["status"] == "ok" and row["branch"] == other["branch"]
        nums = [k for k, v in row.items() if isinstance(v, float)]
        assert nums and all(row[k] == other[k] or (math.isnan(row[k]) and math.isnan(other[k])) for k in nums), qid


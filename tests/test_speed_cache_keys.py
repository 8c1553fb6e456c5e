"""HATIE's feature-cache keys name what determines an input (file digests, the query, the segmentation, the
transform) instead of hashing every input: different files or crops never share a key, the same ones always do,
and a second scoring of the same inputs encodes nothing."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import torch
from PIL import Image

from benchmark.io.types import ObjectRef, Query
from benchmark.metrics.features import shared_cache
from benchmark.metrics.hatie.engine import SimilarityEngine
from benchmark.metrics.hatie.workflows import WORKFLOWS, InputIds, QueryInput
from benchmark.models.segmenter import Detection, bbox_from_mask

S = 512
OBJ = ObjectRef(id="7", name="cup", mask="unused.png")


def _scene(x0=200):
    g = torch.Generator().manual_seed(1)
    img = torch.randint(0, 256, (3, S, S), generator=g).float() / 255
    m = torch.zeros(S, S)
    m[200:260, x0 : x0 + 50] = 1
    return img, m


def _png_sha(img: torch.Tensor, level: int) -> str:
    """sha256 of the PNG of `img` saved at zlib `level` (same pixels at every level, different bytes)."""
    buf = io.BytesIO()
    arr = (img * 255).round().byte().permute(1, 2, 0).numpy()
    Image.fromarray(arr).save(buf, format="PNG", compress_level=level)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def _input(img, m, det_mask, ids):
    q = Query(id="q1", image="images/x.png", edit_type="attr_chg", instruction="make it blue", target=OBJ,
              attribute_after="blue")
    mk = det_mask.bool().numpy()
    seg = {"cup": Detection("cup", 0.9, bbox_from_mask(mk), mk)}
    return QueryInput(q, img, img.clone(), {"7": m}, seg, ids=ids)


def _named_keys(x):
    plan = WORKFLOWS[x.query.edit_type](x)
    return {k for k in plan.images if k not in plan.by_content}, plan


def test_keys_follow_the_files_the_query_and_the_crop():
    img, m = _scene()
    src, low, high, mask = _png_sha(img, 6), _png_sha(img, 1), _png_sha(img, 9), "m" * 64
    assert low != high  # same pixels, different bytes
    a, _ = _named_keys(_input(img, m, m, InputIds(src, low, {"7": mask})))
    again, _ = _named_keys(_input(img, m, m, InputIds(src, low, {"7": mask})))
    other_bytes, _ = _named_keys(_input(img, m, m, InputIds(src, high, {"7": mask})))
    _, moved = _scene(x0=230)
    other_crop, _ = _named_keys(_input(img, m, moved, InputIds(src, low, {"7": mask})))
    other_mask, _ = _named_keys(_input(img, m, m, InputIds(src, low, {"7": "n" * 64})))
    assert a == again
    edit_side = {k for k in a if k.startswith("q:")}
    assert edit_side and not edit_side & other_bytes and not edit_side & other_crop
    gt = {k for k in a if ":gt:" in k and not k.startswith("q:")}  # the source's crop by the GT mask
    assert gt and gt <= other_bytes and not gt & other_mask  # the edit's bytes do not name the source's crop


def test_without_file_ids_the_tensors_name_the_inputs():
    img, m = _scene()
    a, _ = _named_keys(_input(img, m, m, None))
    assert a == _named_keys(_input(img.clone(), m.clone(), m, None))[0]
    brighter = (img * 0.5).clamp(0, 1)
    assert not {k for k in a if k.startswith("q:")} & _named_keys(_input(brighter, m, m, None))[0]


def test_the_same_inputs_are_a_cache_hit_and_score_the_same():
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    img, m = _scene()
    ids = InputIds(_png_sha(img, 6), _png_sha(img, 1), {"7": "m" * 64})
    models = (load_clip("tiny"), load_dino("tiny"), load_lpips("tiny"))
    cache = shared_cache()
    cache.clear()
    outs, encoded = [], []
    for edit_sha in (ids.edit, ids.edit, _png_sha(img, 9)):
        before = sum(cache.forward_items.values())
        eng = SimilarityEngine(*models, batch_size=8)  # a fresh engine: only the process-wide cache remembers
        outs.append(eng.run([WORKFLOWS["attr_chg"](_input(img, m, m, InputIds(ids.source, edit_sha, ids.masks)))])[0])
        encoded.append(sum(cache.forward_items.values()) - before)
    cache.clear()
    assert encoded[0] > 0 and encoded[1] == 0 and encoded[2] > 0, encoded
    # the edit's other bytes are encoded again, the source's inputs (named by the source file) are not
    assert encoded[2] < encoded[0]
    assert outs[1] == outs[0]  # the hit: the very same features, the very same floats
    # re-encoded in other batches: the same up to the backbones' batch numerics
    assert all(np.isclose(outs[2][k], v, atol=1e-6) for k, v in outs[0].items() if isinstance(v, float))


def test_equal_images_under_different_names_are_encoded_once():
    """What hashing every input used to catch: a region the edit left untouched is one encoder input."""
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    img, _ = _scene()
    shared_cache().clear()
    eng = SimilarityEngine(load_clip("tiny"), load_dino("tiny"), load_lpips("tiny"), batch_size=8)
    eng._named = {"q:x:bg:e", "q:x:bg:o"}
    other = img.clone()
    other[0, 0, 0] = 1 - other[0, 0, 0]  # one value apart: a different input
    sims = eng.pair_similarities([("q:x:bg:e", "q:x:bg:o"), ("q:x:bg:e", "src:y")],
                                 {"q:x:bg:e": img, "q:x:bg:o": img.clone(), "src:y": other})
    shared_cache().clear()
    assert eng.forward_items["clip image"] == 2 and eng.forward_items["dino"] == 2
    assert sims[("q:x:bg:e", "q:x:bg:o")]["clip"] == 1.0 or abs(sims[("q:x:bg:e", "q:x:bg:o")]["clip"] - 1) < 1e-6


def test_only_whole_images_are_digested_their_pyramid_levels_are_named():
    """style_chg: a whole edit or original is keyed by its input's digest (other suites share it); every other input,
    the whole images' edge maps and degradation pyramids included, by name. A second scoring with a fresh engine
    encodes nothing."""
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    img, _ = _scene()
    edit = (img * 0.7).clamp(0, 1)
    q = Query(id="q2", image="images/x.png", edit_type="style_chg", instruction="as a painting", style="painting")
    ids = InputIds(_png_sha(img, 6), _png_sha(edit, 6), {})
    models = (load_clip("tiny"), load_dino("tiny"), load_lpips("tiny"))
    cache = shared_cache()
    cache.clear()
    encoded = []
    for _ in range(2):
        before = sum(cache.forward_items.values())
        SimilarityEngine(*models, batch_size=8).run([WORKFLOWS["style_chg"](QueryInput(q, img, edit, {}, {}, ids=ids))])
        encoded.append(sum(cache.forward_items.values()) - before)
    image_keys = [k for _, k in cache._data if not k.startswith("text\x00")]
    cache.clear()
    digests = [k for k in image_keys if not k.startswith("hatie-input:")]
    assert encoded[0] > 0 and encoded[1] == 0, encoded
    assert len(digests) == 1, digests  # the whole edit's CLIP input (for the style text): the only whole image encoded
    assert any(":degA" in k for k in image_keys)  # the pyramid levels, by name

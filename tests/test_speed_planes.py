"""Gray and edge images are views of one plane repeated to 3 channels (stride 0), resized as that one plane: every
resize, similarity and layout-sensitive reduction gives bit for bit what the materialised `.repeat` tensors gave."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmark.metrics.hatie import primitives as P
from benchmark.metrics.hatie.engine import _square_resize

# every interpolation the scoring pipeline runs on images (primitives.resize; the CLIP and DINOv2 square resizes)
MODES = [{"mode": "bilinear"}, {"mode": "bilinear", "antialias": True, "align_corners": False},
         {"mode": "bicubic", "antialias": True, "align_corners": False}]
SIDES = (2, 3, 5, 8, 17, 31, 64, 100, 128, 224, 256, 333, 512)


def _gray_ref(img):
    return img.mean(dim=0, keepdim=True).repeat(3, 1, 1)  # what gray3 returned before


@pytest.fixture(params=[1, 2], ids=lambda n: f"{n}threads")
def threads(request):
    """torch's CPU resize kernels choose their algorithm by thread count too: check both ways."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("kw", MODES, ids=lambda kw: f"{kw['mode']}{'-aa' if kw.get('antialias') else ''}")
def test_a_repeated_plane_resizes_as_its_materialised_image(kw, threads):
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        h, w = (SIDES[int(i)] for i in torch.randint(0, len(SIDES), (2,), generator=g))
        w = h if bool(torch.rand(1, generator=g) < 0.6) else w
        out = SIDES[int(torch.randint(0, len(SIDES), (1,), generator=g))]
        color = (torch.randint(0, 256, (h, w, 3), generator=g).float() / 255).permute(2, 0, 1)  # decoded layout
        view = P.gray3(color)
        assert view.stride(0) == 0 and P.one_plane(view) is not None
        ref = F.interpolate(_gray_ref(color).unsqueeze(0), size=(out, out), **kw).squeeze(0)
        fast = P.interpolate(view, (out, out), **kw)
        assert torch.equal(fast, ref), (h, w, out)
        assert P.dense(fast).is_contiguous() and torch.equal(P.dense(fast), ref)


def test_gray_and_edge_images_equal_the_materialised_ones_and_their_scores_too(threads):
    g = torch.Generator().manual_seed(2)
    for _ in range(12):
        h, w = (int(v) for v in torch.randint(8, 160, (2,), generator=g))
        a = (torch.randint(0, 256, (h, w, 3), generator=g).float() / 255).permute(2, 0, 1)
        b = (torch.randint(0, 256, (h + 3, w + 5, 3), generator=g).float() / 255).permute(2, 0, 1)
        ga, gb = P.gray3(a), P.gray3(b)
        assert torch.equal(P.dense(ga), _gray_ref(a)) and P.dense(ga).stride() == _gray_ref(a).stride()
        # l2 sums over the materialised planes: the same float as before, also after resizing b to a's size
        ref_b = F.interpolate(_gray_ref(b).unsqueeze(0), size=(h, w), mode="bilinear").squeeze(0)
        assert P.l2_sim(ga, gb) == 1.0 - float(((_gray_ref(a) - ref_b) ** 2).mean())
        assert torch.equal(P.dense(P.deg_b_image(a)), F.interpolate(
            _gray_ref(a).unsqueeze(0), size=(max(4, int(h / 20)), max(4, int(w / 20))), mode="bilinear").squeeze(0))
        e = P.edge_map(a)
        assert e.stride(0) == 0 and torch.equal(P.dense(e), e[:1].repeat(3, 1, 1))
        for mode in ("bicubic", "bilinear"):
            assert torch.equal(_square_resize(e, 224, mode), F.interpolate(
                P.dense(e).unsqueeze(0), size=(224, 224), mode=mode, antialias=True, align_corners=False).squeeze(0))
    # a color image is untouched by dense (its layout decides the order of its reductions)
    assert P.one_plane(a) is None and P.dense(a) is a


def test_background_keeps_the_layout_of_the_masked_fill_it_replaced():
    """The l2 similarity of a background pair sums in its layout's order: it must stay the old fill's layout."""
    g = torch.Generator().manual_seed(3)
    img = (torch.randint(0, 256, (64, 64, 3), generator=g).float() / 255).permute(2, 0, 1)
    m = (torch.rand(64, 64, generator=g) < 0.3).float()
    old = img.masked_fill((m != 0).unsqueeze(0), 0.0)
    new = P.background(img, m)
    assert torch.equal(new, old) and new.stride() == old.stride()
    m2 = (torch.rand(64, 64, generator=g) < 0.3).float()  # two masks: the release's two products
    old2 = (img * (1 - m)) * (1 - m2)
    new2 = P.background(img, m, m2)
    assert torch.equal(new2, old2) and new2.is_contiguous() and new2.dtype == img.dtype


def test_centre_of_mass_of_an_empty_mask_is_nan():
    assert all(np.isnan(P.com(np.zeros((5, 7), dtype=bool))))

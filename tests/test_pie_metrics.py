"""The PIE-Bench metric suite (docs/pie.md): each official formula on hand-worked cases, the structure distance's
input recipes, the background properties (identity; an edit only inside the mask), NaN rules, refusal of a set
without masks, and an end-to-end run on demo_mini (identity vs overedit)."""

import math

import pytest
import torch

from benchmark.io.types import Query
from benchmark.metrics.pie.formulas import clip_score, mse, psnr, self_similarity, ssim, structure_distance
from benchmark.metrics.pie.suite import BACKGROUND, COLUMN_INFO, NO_BACKGROUND, NO_CAPTION, PieSuite, _Loaded
from benchmark.plan.config import read_plan

SIZE = 48


@pytest.fixture(scope="module")
def suite(single_thread_torch):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg, _ = compose(["metrics=pie", "profile=tiny", "device=cpu"])
    return instantiate(cfg.metrics.pie)


def image(seed, size=SIZE):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(3, 6, 6, generator=g)
    return torch.nn.functional.interpolate(base[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def box(size=SIZE, y0=10, y1=30, x0=12, x1=36):
    m = torch.zeros(size, size, dtype=torch.bool)
    m[y0:y1, x0:x1] = True
    return m


def item(qid="q1", src=None, edit=None, mask=None, caption="a blue ball on grass"):
    src = image(0) if src is None else src
    q = Query(id=qid, image=f"{qid}.png", edit_type="attr_chg", target_caption=caption, edit_mask="m.png")
    return _Loaded(q, source=src, edit=src.clone() if edit is None else edit, mask=box() if mask is None else mask)


def row_of(suite, it):
    rows = suite.score_items([it])
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    return rows[0]


# -- the formulas, by hand ------------------------------------------------------------------------------------------
def test_mse_and_psnr_hand_worked():
    a, b = torch.zeros(3, 4, 4), torch.full((3, 4, 4), 0.1)
    assert mse(a, b) == pytest.approx(0.01)
    assert psnr(a, b) == pytest.approx(20.0)  # 10 log10(1 / 0.01)
    b[0, 0, 0] = 1.0  # one element off by 1: MSE (47 * 0.01 + 1) / 48
    assert mse(a, b) == pytest.approx((47 * 0.01 + 1) / 48)
    assert psnr(a, a) == math.inf and psnr(a, a, cap=100.0) == 100.0 and psnr(a, b, cap=100.0) < 100.0


def test_ssim_hand_worked_on_constant_images():
    """Constant images: no variance, so SSIM = (2 mu_a mu_b + c1) / (mu_a^2 + mu_b^2 + c1) everywhere, c1 = 0.01^2."""
    a, b, c = (torch.full((1, 3, 16, 16), v) for v in (0.0, 0.125, 0.375))  # exact in float32
    for crop in (True, False):
        assert float(ssim(a, b, crop=crop)[0]) == pytest.approx(1e-4 / (0.015625 + 1e-4), rel=1e-9)
        assert float(ssim(a, a, crop=crop)[0]) == pytest.approx(1.0, abs=1e-12)
        assert float(ssim(c, b, crop=crop)[0]) == pytest.approx((2 * 0.375 * 0.125 + 1e-4) /
                                                                (0.375**2 + 0.125**2 + 1e-4), rel=1e-9)


def test_ssim_crop_drops_the_maps_five_pixel_border():
    """torchmetrics before September 2024 averaged the SSIM map without its 5 px border (PIE-Bench's numbers). A
    change to the outermost pixel row lowers the map mostly at centres in rows 0-5; the cropped mean keeps only
    row 5 of those, so it is the higher of the two; a change in the middle counts for both."""
    a = image(1, 32)[None]
    b = a.clone()
    b[..., 0, :] = 1 - b[..., 0, :]
    kept, full = float(ssim(a, b, crop=True)[0]), float(ssim(a, b, crop=False)[0])
    assert full < kept < 1
    b = a.clone()
    b[..., 16, :] = 1 - b[..., 16, :]
    # rows 11-21 of the map are hit; 11 of 22 kept rows vs 11 of 32 rows: the cropped mean drops more
    assert float(ssim(a, b, crop=True)[0]) < float(ssim(a, b, crop=False)[0]) < 1


def test_self_similarity_and_structure_distance_hand_worked():
    eye = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    same = torch.tensor([[1.0, 0.0], [3.0, 0.0]])
    assert torch.allclose(self_similarity(eye), torch.eye(2, dtype=torch.float64))
    assert torch.allclose(self_similarity(same), torch.ones(2, 2, dtype=torch.float64))
    assert structure_distance(eye, same) == pytest.approx(0.5)  # (0 + 1 + 1 + 0) / 4
    assert structure_distance(same, eye) == pytest.approx(0.5) and structure_distance(eye, 5 * eye) == 0.0
    # a zero key: its norm product is clamped (1e-8), so its row and column are 0, not NaN
    zero = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    assert torch.allclose(self_similarity(zero), torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="token count"):
        structure_distance(eye, torch.ones(3, 2))


def test_clip_score_is_100_cos_clamped_at_zero():
    t = torch.tensor([1.0, 0.0])
    assert clip_score(torch.tensor([2.0, 0.0]), t) == pytest.approx(100.0)
    assert clip_score(torch.tensor([1.0, math.sqrt(3)]), t) == pytest.approx(50.0)  # cos 60 degrees
    assert clip_score(torch.tensor([0.0, 1.0]), t) == 0.0
    assert clip_score(torch.tensor([-1.0, 0.2]), t) == 0.0  # negative cosine: clamped, as CLIPScore does


# -- the structure distance's input ---------------------------------------------------------------------------------
def test_resize_follows_torchvision_resize_224_max_480():
    from torchvision.transforms import Resize

    from benchmark.models.dino_keys import resized_shape

    for h, w, want in ((512, 512, (224, 224)), (512, 768, (224, 336)), (300, 1000, (144, 480)), (1000, 300, (480, 144))):
        assert resized_shape(h, w) == want
        assert tuple(Resize(224, max_size=480, antialias=False)(torch.zeros(3, h, w)).shape[-2:]) == want


def test_official_recipe_normalises_0_255_values_and_corrected_divides_first():
    from benchmark.models.dino_keys import load_dino_keys

    off = load_dino_keys("tiny", recipe="official")
    cor = load_dino_keys("tiny", recipe="corrected")
    white = torch.ones(1, 3, 224, 224)
    assert off.prepare(white)[0, :, 0, 0].tolist() == pytest.approx([(255 - 0.485) / 0.229, (255 - 0.456) / 0.224,
                                                                     (255 - 0.406) / 0.225], rel=1e-6)
    assert cor.prepare(white)[0, :, 0, 0].tolist() == pytest.approx([(1 - 0.485) / 0.229, (1 - 0.456) / 0.224,
                                                                     (1 - 0.406) / 0.225], rel=1e-6)
    assert off.signature != cor.signature
    keys = off.embed_images(image(3, 64)[None])
    assert keys.shape == (1, 1 + 28 * 28, 32)  # CLS + (224 / 8)^2 tokens, heads concatenated (tiny width 32)


# -- the suite ------------------------------------------------------------------------------------------------------
def test_identity_edit_is_perfect(suite):
    r = row_of(suite, item())
    assert r["structure_1e3"] == 0.0 and r["mse_bg_1e4"] == 0.0 and r["lpips_bg_1e3"] == 0.0
    assert r["psnr_bg"] == 100.0 and r["ssim_bg_1e2"] == pytest.approx(100.0, abs=1e-9)
    uncapped = PieSuite(device="cpu", psnr_cap=None)
    assert uncapped.score_items([item()])[0]["psnr_bg"] == math.inf


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_edit_only_inside_the_mask_keeps_every_background_metric_perfect(suite, seed):
    g = torch.Generator().manual_seed(seed)
    y0, x0 = (int(v) for v in torch.randint(0, SIZE // 2, (2,), generator=g))
    mask = box(y0=y0, y1=y0 + 8 + seed, x0=x0, x1=x0 + 12)
    src = image(seed)
    edit = torch.where(mask, torch.rand(3, SIZE, SIZE, generator=g), src)
    r = row_of(suite, item(src=src, edit=edit, mask=mask))
    assert r["mse_bg_1e4"] == 0.0 and r["lpips_bg_1e3"] == 0.0 and r["psnr_bg"] == 100.0
    assert r["ssim_bg_1e2"] == pytest.approx(100.0, abs=1e-9)
    assert r["structure_1e3"] > 0  # the structure distance compares whole images
    # the same change one pixel outside the mask is seen by every background metric
    grown = mask.clone()
    grown[y0 - 1 if y0 else y0 + 8 + seed, x0] = True
    r2 = row_of(suite, item(src=src, edit=torch.where(grown, edit + 0.5 * (~mask), src).clamp(0, 1), mask=mask))
    assert r2["mse_bg_1e4"] > 0 and r2["lpips_bg_1e3"] > 0 and r2["psnr_bg"] < 100 and r2["ssim_bg_1e2"] < 100


def test_background_metrics_follow_the_formulas_on_masked_images(suite):
    """Both images multiplied by (1 - mask), compared over the whole image (zeros inside the mask included)."""
    src, edit, mask = image(4), image(5), box()
    r = row_of(suite, item(src=src, edit=edit, mask=mask))
    keep = (~mask).float()
    e, s = edit * keep, src * keep
    assert r["mse_bg_1e4"] == pytest.approx(1e4 * float(((e - s) ** 2).mean()), rel=1e-6)
    assert r["psnr_bg"] == pytest.approx(-10 * math.log10(float(((e - s) ** 2).mean())), rel=1e-6)
    assert r["ssim_bg_1e2"] == pytest.approx(100 * float(ssim(e[None], s[None])[0]), rel=1e-9)
    lp = suite._get("lpips")
    assert r["lpips_bg_1e3"] == pytest.approx(1e3 * float(lp.distance(e[None], s[None])[0]), rel=1e-5)


def test_clip_whole_and_edited(suite):
    from benchmark.metrics.conventional.suite import clip_input

    src, edit, mask = image(6), image(7), box()
    r = row_of(suite, item(src=src, edit=edit, mask=mask))
    clip = suite._get("clip")
    t = clip.embed_texts(["a blue ball on grass"])[0]
    whole = clip.embed_images(clip_input(edit, clip.image_size)[None])[0]
    edited = clip.embed_images(clip_input(edit * mask, clip.image_size)[None])[0]
    assert r["clip_whole"] == pytest.approx(max(100 * float(whole @ t), 0.0), abs=1e-4)
    assert r["clip_edited"] == pytest.approx(max(100 * float(edited @ t), 0.0), abs=1e-4)


def test_nan_with_a_reason(suite):
    full = row_of(suite, item(edit=image(8), mask=torch.ones(SIZE, SIZE, dtype=torch.bool)))
    assert all(math.isnan(full[c]) for c in BACKGROUND) and full["bg_note"] == NO_BACKGROUND
    assert not math.isnan(full["structure_1e3"]) and not math.isnan(full["clip_whole"])
    empty = row_of(suite, item(edit=image(8), mask=torch.zeros(SIZE, SIZE, dtype=torch.bool)))
    assert math.isnan(empty["clip_edited"]) and "empty" in empty["clip_note"] and empty["mse_bg_1e4"] > 0
    nocap = row_of(suite, item(caption=""))
    assert math.isnan(nocap["clip_whole"]) and math.isnan(nocap["clip_edited"]) and nocap["clip_note"] == NO_CAPTION


def test_scores_do_not_depend_on_batching(suite):
    items = [item(f"q{i}", src=image(10 + i // 2), edit=image(20 + i)) for i in range(4)]
    together = suite.score_items(items)
    alone = [suite.score_items([it])[0] for it in items]
    for a, b in zip(together, alone, strict=True):
        for c in COLUMN_INFO:
            assert a[c] == pytest.approx(b[c], rel=1e-5, abs=1e-6), c


def test_null_components_drop_their_columns_and_components_are_signed():
    s = PieSuite(device="cpu")
    assert s.columns == ("psnr_bg", "mse_bg_1e4", "ssim_bg_1e2")
    from benchmark.commands.run import compose
    from benchmark.plan.config import metric_signature

    sigs = set()
    for extra in ([], ["metrics.pie.dino.recipe=corrected"], ["metrics.pie.ssim_crop=false"]):
        cfg, _ = compose(["metrics=pie", "profile=tiny", "device=cpu", *extra])
        sigs.add(metric_signature(cfg.metrics, {"pie": PieSuite.info}))
    assert len(sigs) == 3


def test_a_set_without_masks_is_refused_up_front():
    from benchmark.commands.run import compose
    from benchmark.io.errors import PreflightError
    from benchmark.plan.preflight import check_applicable

    class NoMasks:
        name, meta = "nomask", {}
        queries = [Query(id="a", image="a.png", edit_type="gedit_subject_add", instruction="add a cat")]

        def __len__(self):
            return 1

    cfg, _ = compose(["metrics=pie", "profile=tiny", "device=cpu"])
    with pytest.raises(PreflightError, match=r"metrics=pie: pie does not apply to query set nomask: none of its 1 "
                                             r"queries has an edit mask"):
        check_applicable(read_plan(cfg), NoMasks())
    assert PieSuite(device="cpu").applies_to(item().query, "description")


def test_an_edit_of_another_size_is_a_failed_row(tmp_path):
    from PIL import Image

    from benchmark.metrics.pie.suite import _Samples

    Image.new("RGB", (32, 32)).save(tmp_path / "src.png")
    Image.new("L", (32, 32)).save(tmp_path / "m.png")
    Image.new("RGB", (64, 64)).save(tmp_path / "edit.png")

    class Folder:
        def path(self, rel):
            return tmp_path / rel

    q = Query(id="q", image="src.png", edit_type="x", edit_mask="m.png")
    got = _Samples(Folder(), [q], [tmp_path / "edit.png"])[0]
    assert "edit is 64x64, source is 32x32" in got.error


def test_demo_mini_identity_is_perfect_and_overedit_worse(tmp_path, single_thread_torch):
    import pandas as pd

    from benchmark.commands.run import compose, run_pipeline

    means = {}
    for editor in ("identity", "overedit"):
        cfg, choices = compose(["queryset=demo_mini", "profile=tiny", "metrics=pie", f"editor={editor}", "limit=7",
                                f"paths.results={tmp_path}", "progress=false", "aggregate.bootstrap_resamples=20"])
        summary = run_pipeline(cfg, choices["editor"])
        assert summary["score"].failed == 0
    board = pd.read_csv(tmp_path / "leaderboard.csv").set_index("editor")
    means = {e: board.loc[e] for e in ("identity", "overedit")}
    ident, over = means["identity"], means["overedit"]
    assert ident["structure_1e3"] == 0 and ident["mse_bg_1e4"] == 0 and ident["lpips_bg_1e3"] == 0
    assert ident["psnr_bg"] == 100 and ident["ssim_bg_1e2"] == pytest.approx(100)
    assert ident["n_no_background"] == 1  # demo000-bg_chg's mask is the whole image (style_chg is past limit=7)
    assert over["structure_1e3"] > 0 and over["mse_bg_1e4"] > 0 and over["lpips_bg_1e3"] > 0
    assert over["psnr_bg"] < 100 and over["ssim_bg_1e2"] < 100
    by_type = pd.read_csv(tmp_path / "leaderboard_by_type.csv")
    assert {"structure_1e3", "psnr_bg", "clip_whole"} <= set(by_type.columns)
    assert set(by_type["edit_type"]) >= {"obj_add", "attr_chg"}

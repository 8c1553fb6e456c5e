"""The conventional suite (docs/metrics.md): metamorphic properties on tiny random-weight encoders, the masked-region
rule, missing inputs, column declarations and config composition."""

import math

import numpy as np
import pytest
import torch

from benchmark.io.types import Query
from benchmark.metrics.conventional.columns import ALIASES, COLUMN_INFO
from benchmark.metrics.conventional.suite import ConventionalSuite, _Loaded, clip_input

OUT_COLS = ("lpips_out", "l1_out", "l2_out", "psnr_out", "ssim_out")
GT_COLS = ("clip_i_gt", "dino_gt", "l1_gt", "l2_gt")


@pytest.fixture(scope="module")
def suite(single_thread_torch):
    from benchmark.commands.run import compose

    cfg, _ = compose(["metrics=conventional", "profile=tiny", "device=cpu"])
    from hydra.utils import instantiate

    return instantiate(cfg.metrics.conventional)


def image(seed, size=64):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(3, 8, 8, generator=g)
    return torch.nn.functional.interpolate(base[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def q(qid="q1", **kw):
    fields = {"source_caption": "a red ball on grass", "target_caption": "a blue ball on grass",
              "instruction": "make the ball blue"} | kw
    return Query(id=qid, image=f"{qid}.png", edit_type="attr_chg", **fields)


def box_mask(size=64, box=(16, 16, 40, 40)):
    m = torch.zeros(size, size, dtype=torch.bool)
    m[box[1]:box[3], box[0]:box[2]] = True
    return m


def row_of(suite, item):
    rows = suite.score_items([item])
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    return rows[0]


def test_identity_edit(suite):
    src = image(0)
    r = row_of(suite, _Loaded(q(), source=src, edit=src.clone(), mask=box_mask(), target=image(1)))
    for col in ("clip_i", "dino_ev", "dino_mb"):
        assert r[col] == pytest.approx(1.0, abs=1e-6), col
    for col in ("lpips", "lpips_out", "l1", "l2", "l1_out", "l2_out"):
        assert r[col] == 0.0, col
    assert r["psnr_out"] == pytest.approx(100.0) and r["ssim_out"] == pytest.approx(1.0, abs=1e-6)
    # no image direction: MD / clip_dir undefined (NaN, with the reason), never 0 or a noisy cosine
    assert math.isnan(r["md"]) and math.isnan(r["clip_dir"]) and "identity" in r["dir_note"]
    assert all(math.isfinite(r[c]) for c in GT_COLS) and r["has_target"] and r["has_mask"]


def test_swapping_source_and_edit_negates_md_and_md_is_clip_dir(suite):
    a, b = image(2), image(3)
    fwd, back = suite.score_items([_Loaded(q("f"), source=a, edit=b), _Loaded(q("b"), source=b, edit=a)])
    assert math.isfinite(fwd["md"]) and fwd["md"] != 0
    assert back["md"] == -fwd["md"]  # exactly: the same features, the image direction negated
    for r in (fwd, back):
        assert r["md"] == r["clip_dir"] and ALIASES["md"] == "clip_dir"


def test_identical_captions_leave_md_undefined(suite):
    a, b = image(4), image(5)
    r = row_of(suite, _Loaded(q(target_caption="a red ball on grass"), source=a, edit=b))
    assert math.isnan(r["md"]) and "identical text" in r["dir_note"]
    r = row_of(suite, _Loaded(q(source_caption=""), source=a, edit=b))
    assert math.isnan(r["md"]) and "caption" in r["dir_note"] and math.isfinite(r["clip_t"])


def test_masked_metrics_ignore_pixels_inside_the_mask(suite):
    src, mask = image(6), box_mask()
    g = torch.Generator().manual_seed(7)
    rows = []
    for _ in range(2):  # two edits that differ only inside the mask (random noise there, the source elsewhere)
        edit = torch.where(mask, torch.rand(3, 64, 64, generator=g), src)
        rows.append(row_of(suite, _Loaded(q(), source=src, edit=edit, mask=mask)))
    assert rows[0]["l1"] != rows[1]["l1"] and rows[0]["lpips"] != rows[1]["lpips"]  # the full-image values see it
    for col in OUT_COLS:
        assert rows[0][col] == rows[1][col], col
    assert rows[0]["l1_out"] == 0 and rows[0]["lpips_out"] == 0
    # a change outside the mask does count
    moved = src.clone()
    moved[:, 50:60, 50:60] = 1 - moved[:, 50:60, 50:60]
    r = row_of(suite, _Loaded(q(), source=src, edit=moved, mask=mask))
    assert r["l1_out"] > 0 and r["lpips_out"] > 0


def test_masked_mean_runs_over_valid_pixels_only(suite):
    """A constant offset outside the mask gives that offset whatever the mask's area (zeroing the hole and averaging
    over the whole image would shrink it in proportion to the area)."""
    src = image(8) * 0.5
    vals = []
    for box in ((8, 8, 16, 16), (4, 4, 56, 56)):
        mask = box_mask(box=box)
        edit = torch.where(mask, src, src + 0.25)
        vals.append(row_of(suite, _Loaded(q(), source=src, edit=edit, mask=mask))["l1_out"])
    assert vals == pytest.approx([0.25, 0.25], abs=1e-6)


def test_full_mask_and_missing_inputs_are_missing_values(suite):
    src, edit = image(9), image(10)
    full = row_of(suite, _Loaded(q(), source=src, edit=edit, mask=torch.ones(64, 64, dtype=torch.bool)))
    none = row_of(suite, _Loaded(q(), source=src, edit=edit))
    for r in (full, none):
        assert all(isinstance(r[c], float) and math.isnan(r[c]) for c in OUT_COLS)
        assert all(math.isnan(r[c]) for c in GT_COLS) and not r["has_target"]
    assert full["has_mask"] and not none["has_mask"]
    assert math.isfinite(full["lpips"]) and math.isfinite(full["l1"])


def test_clip_t_text_field_per_query_kind(suite):
    src = image(11)
    caption = row_of(suite, _Loaded(q(), source=src, edit=image(12)))
    mb = row_of(suite, _Loaded(q(source_caption="", target_caption=""), source=src, edit=image(12)))  # MagicBrush
    assert caption["clip_t_text"] == "target_caption" and mb["clip_t_text"] == "instruction"
    assert math.isfinite(mb["clip_t"]) and caption["clip_t"] != mb["clip_t"]
    strict = ConventionalSuite(clip=suite._factories["clip"], clip_t_text="target_caption", device="cpu")
    r = row_of(strict, _Loaded(q(source_caption="", target_caption=""), source=src, edit=image(12)))
    assert math.isnan(r["clip_t"]) and r["clip_t_text"] == ""


def test_scores_do_not_depend_on_batching(suite):
    items = [_Loaded(q(f"q{i}"), source=image(20 + i % 2), edit=image(30 + i), mask=box_mask(), target=image(40))
             for i in range(5)]
    batched = suite.score_items(items)
    one = ConventionalSuite(**suite._factories, device="cpu", batch_size=1)
    from benchmark.metrics.features import shared_cache

    shared_cache().clear()  # recompute every feature at batch size 1
    single = [row_of(one, it) for it in items]
    for a, b in zip(batched, single, strict=True):
        for col in COLUMN_INFO:
            # batch of 5 against batch size 1: max 6.5e-7 apart, 6% of the tolerance, measured here
            # (tests/helpers/spread_probe.py, the project's 2-core machine)
            assert np.isclose(a[col], b[col], atol=1e-5, equal_nan=True), col


def test_columns_declared_and_null_components_drop_theirs(suite):
    assert suite.columns == tuple(COLUMN_INFO)
    assert all(isinstance(hib, bool) and desc for hib, desc in suite.column_info.values())
    assert suite.column_info["lpips"][0] is False and suite.column_info["md"][0] is True
    assert suite.info.version and suite.components()["clip"].startswith("arch=ViT-B-32-quickgelu")
    pixel_only = ConventionalSuite(device="cpu")
    assert set(pixel_only.columns) == {"l1", "l2", "l1_out", "l2_out", "psnr_out", "ssim_out", "l1_gt", "l2_gt"}
    r = row_of(pixel_only, _Loaded(q(), source=image(1), edit=image(2)))
    assert "md" not in r and "l1" in r
    with pytest.raises(ValueError, match="clip_t_text"):
        ConventionalSuite(clip_t_text="caption")


@pytest.mark.parametrize("arch", ["RN101-quickgelu", "ViT-B-16", "ViT-L-14"])
def test_md_encoder_is_configurable(arch, single_thread_torch):
    """The MD paper's encoders (RN101, ViT variants) build in the tiny profile from open_clip's own config."""
    from benchmark.models.clip import load_clip, tiny_clip_config

    enc = load_clip("tiny", arch, "openai")
    assert enc.embed_images(torch.rand(1, 3, 64, 64)).shape == (1, 32)
    assert enc.signature != load_clip("tiny").signature  # tiny stand-ins of different archs never share features
    assert isinstance(tiny_clip_config(arch)["vision_cfg"]["layers"], list) == arch.startswith("RN")


def test_an_edit_of_another_size_is_resized_as_image_eval_does_unless_stretched(tmp_path):
    """MagicBrush's image_eval.py resizes the generated image to its reference's size (PIL bicubic) before L1 / L2:
    a 16x16 edit of a 32x32 source is scored on its bicubic upscale, while CLIP and DINO see the edit as made; a
    16x32 edit (its aspect ratio halved) would be stretched and is a failed row naming both sizes."""
    import numpy as np
    from PIL import Image

    from benchmark.metrics.conventional.suite import _Samples

    class QS:
        def path(self, rel):
            return tmp_path / rel

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "q1.png")
    small = Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
    small.save(tmp_path / "edit.png")
    item = _Samples(QS(), [q()], [tmp_path / "edit.png"])[0]
    assert not item.error
    expected = np.asarray(small.resize((32, 32), Image.Resampling.BICUBIC), dtype=np.float32) / 255
    np.testing.assert_allclose(item.edit.permute(1, 2, 0).numpy(), expected, atol=1e-6)
    assert tuple(item.encoded_edit.shape[-2:]) == (16, 16)

    Image.new("RGB", (16, 32)).save(tmp_path / "edit.png")
    item = _Samples(QS(), [q()], [tmp_path / "edit.png"])[0]
    assert "edit is 16x32, source is 32x32" in item.error
    rows = ConventionalSuite(device="cpu").score_items([item])
    assert rows[0]["status"] == "failed" and "16x32" in rows[0]["reason"]


def test_lpips_columns_agree_with_the_lpips_package(suite):
    """`lpips` is the package's own distance; with nothing masked, `lpips_out` is the mean of its spatial map."""
    src, edit = image(13), image(14)
    r = row_of(suite, _Loaded(q(), source=src, edit=edit, mask=torch.zeros(64, 64, dtype=torch.bool)))
    lp = suite._get("lpips")
    assert r["lpips"] == pytest.approx(float(lp.distance(edit[None], src[None])[0]), abs=1e-6)
    assert r["lpips_out"] == pytest.approx(r["lpips"], rel=0.05)


def test_clip_and_dino_columns_follow_their_definitions(suite):
    """Each column against its formula, computed here from the encoders' own features with numpy (not from the
    suite's code): CLIP-T = cos(E(edit), E(text)), CLIP-I = cos(E(edit), E(source)), MD = cos(E(edit) - E(source),
    E(target caption) - E(source caption)), the ground-truth variants against the target image, DINO = cos of CLS
    features. A reversed direction, a swapped caption or the wrong image in any of them fails here."""
    src, edit, tgt = image(50), image(51), image(52)
    r = row_of(suite, _Loaded(q(), source=src, edit=edit, target=tgt))
    cos = lambda u, v: float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))  # noqa: E731
    clip = suite._get("clip")
    ie, i_s, it = clip.embed_images(torch.stack([clip_input(x, clip.image_size) for x in (edit, src, tgt)])).double().numpy()
    t_tgt, t_src = clip.embed_texts([q().target_caption, q().source_caption]).double().numpy()
    expected = {"clip_t": cos(ie, t_tgt), "clip_i": cos(ie, i_s), "md": cos(ie - i_s, t_tgt - t_src),
                "clip_i_gt": cos(ie, it)}
    for name in ("dino_ev", "dino_mb"):
        fe, fs, ft = suite._get(name).embed_images(torch.stack([edit, src, tgt])).double().numpy()
        expected[name] = cos(fe, fs)
        if name == "dino_mb":
            expected["dino_gt"] = cos(fe, ft)
    for col, want in expected.items():
        assert r[col] == pytest.approx(want, abs=1e-5), col
    assert abs(expected["md"]) > 1e-3 and abs(expected["md"] - cos(ie - i_s, t_src - t_tgt)) > 1e-3  # sign matters

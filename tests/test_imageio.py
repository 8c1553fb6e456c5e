"""Input images: documented lossless conversions, clear errors for everything else."""

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import ImageInputError, load_mask, load_rgb, save_png


def test_missing_file(tmp_path):
    with pytest.raises(ImageInputError, match="image file not found"):
        load_rgb(tmp_path / "nope.png")


def test_corrupt_file(tmp_path):
    p = tmp_path / "bad.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    with pytest.raises(ImageInputError, match="bad.png: cannot decode image"):
        load_rgb(p)


def test_truncated_png(tmp_path):
    p = tmp_path / "trunc.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(p)
    p.write_bytes(p.read_bytes()[:400])
    with pytest.raises(ImageInputError, match="trunc.png"):
        load_rgb(p)


def test_grayscale_is_repeated_to_rgb(tmp_path):
    arr = np.arange(256, dtype=np.uint8).reshape(16, 16)
    Image.fromarray(arr, mode="L").save(tmp_path / "g.png")
    out = np.asarray(load_rgb(tmp_path / "g.png"))
    assert out.shape == (16, 16, 3)
    assert (out == arr[..., None]).all()


def test_opaque_rgba_drops_alpha_transparent_rgba_is_refused(tmp_path):
    rgb = np.random.default_rng(1).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    opaque = np.dstack([rgb, np.full((8, 8), 255, np.uint8)])
    Image.fromarray(opaque, mode="RGBA").save(tmp_path / "o.png")
    assert (np.asarray(load_rgb(tmp_path / "o.png")) == rgb).all()
    opaque[0, 0, 3] = 10
    Image.fromarray(opaque, mode="RGBA").save(tmp_path / "t.png")
    with pytest.raises(ImageInputError, match="transparent pixels"):
        load_rgb(tmp_path / "t.png")


def test_16bit_is_scaled_not_clipped(tmp_path):
    arr = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    Image.fromarray(arr).save(tmp_path / "w.png")
    with Image.open(tmp_path / "w.png") as im:
        assert im.mode.startswith("I")
    out = np.asarray(load_rgb(tmp_path / "w.png"))[..., 0]
    assert out.tolist() == [[0, 1, 128, 255]]


def test_mask_size_mismatch_is_an_error(tmp_path):
    Image.fromarray(np.zeros((4, 5), np.uint8)).save(tmp_path / "m.png")
    assert load_mask(tmp_path / "m.png").shape == (4, 5)
    with pytest.raises(ImageInputError, match="mask is 5x4, image is 8x8"):
        load_mask(tmp_path / "m.png", size=(8, 8))


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_png_level_changes_bytes_never_pixels(tmp_path, level):
    """The edit stage saves at a fast zlib level: any level must decode to the same pixels, and the same pixels at
    the same level give the same bytes (edit hashes stay reproducible)."""
    rng = np.random.default_rng(level)
    arr = np.clip(rng.normal(128, 40, (37, 53, 3)), 0, 255).astype(np.uint8)  # odd size, partly compressible
    first, again = tmp_path / "a.png", tmp_path / "b.png"
    save_png(Image.fromarray(arr), first, level)
    save_png(Image.fromarray(arr), again, level)
    assert np.array_equal(np.asarray(load_rgb(first)), arr)
    assert first.read_bytes() == again.read_bytes()

"""Weight-free building blocks of HATIE's workflows: crops, masks, spatial scores, structure-only transforms.

Images are float tensors (3, H, W) in [0, 1]; masks are float {0, 1} tensors (H, W); boxes are
`[x0, y0, x1, y1]` with inclusive max (HATIE's convention), cropped as `[y0:y1, x0:x1]` exactly as the release does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

IMAGE_SIZE = 512  # originals and edits are scored at 512 x 512
MIN_OBJECT_AREA = 0.003  # the dataset's minimum object area (fraction of the image); sets pos's normaliser
POS_MAX_DISTANCE = math.sqrt(2) / math.sqrt(MIN_OBJECT_AREA)  # D ~ 25.82
# pos() normalises by the area of its FIRST argument; the release always passes the edited mask first, the paper
# says "original mask size". editmeter follows the release (its numbers decide) and callers pass edited first.
POS_NORMALIZE_BY = "edited"
SIZE_ENLARGE_R = 1.6  # r above this: full enlarge fidelity
SIZE_SHRINK_R = 0.6  # r below this: full shrink fidelity
SIZE_KEEP_MAX_RATIO = 1 / MIN_OBJECT_AREA  # largest possible linear growth of a kept object
CANNY_LOW, CANNY_HIGH = 100, 400
DEG_A_THRESHOLD = 0.9  # degradation test A: a similarity "passes" above this
DEG_A_LEVELS = 10  # sizes 512 / 2**p; the release stops before a size below 2 px, so p = 0..8 are evaluated
DEG_A_MIN_SIZE = 2
DEG_B_LEVEL = 20  # degradation test B: downscale by this factor
DEG_B_MIN_SIZE = 4


def square_pad(img: Any) -> Any:
    """Zero-pad the shorter side symmetrically (the odd pixel goes right / bottom)."""
    import torch.nn.functional as F

    h, w = img.shape[-2:]
    if h > w:
        d = h - w
        return F.pad(img, (d // 2, d - d // 2))
    if w > h:
        d = w - h
        return F.pad(img, (0, 0, d // 2, d - d // 2))
    return img


def crop(img: Any, mask: Any | None, bbox: tuple[int, int, int, int]) -> Any:
    """`(img * mask)[:, y0:y1, x0:x1]`, square-padded (mask None: no masking, used for the union box)."""
    x0, y0, x1, y1 = (int(v) for v in bbox)
    box = img[:, y0:y1, x0:x1]
    # masking only the box multiplies the same pixel pairs as masking the whole image first: same values
    return square_pad(box if mask is None else box * mask[y0:y1, x0:x1].unsqueeze(0))


def union_box(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int, int]:
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


def background(img: Any, *masks: Any) -> Any:
    """The image with every given mask's pixels zeroed (the release multiplies by 1 - mask, mask by mask; on
    images in [0, 1] and {0, 1} masks one product with the masks' common outside gives the same values: x * 1 = x,
    x * 0 = +0, as each of the release's products). A product runs about 2x faster than the masked fill this
    replaced; its output is contiguous as the fill's was (the l2 similarity's mean sums in that layout's order)."""
    import torch

    if not masks:
        return img
    keep = masks[0] == 0
    for m in masks[1:]:
        keep &= m == 0
    # a {0, 1} mask of the image's dtype: the same products as the bool's promotion, without promoting per element
    keep = keep.to(img.dtype)
    return torch.mul(img, keep.unsqueeze(0), out=torch.empty(img.shape, dtype=img.dtype, device=img.device))


def _bool(mask: Any) -> np.ndarray:
    """A {0, 1} mask (tensor or array) as a bool array."""
    arr = mask.numpy() if hasattr(mask, "numpy") else np.asarray(mask)
    return arr if arr.dtype == bool else arr != 0


def area(mask: Any) -> int:
    """Pixels inside a {0, 1} mask."""
    return int(np.count_nonzero(_bool(mask)))


def com(mask: Any) -> tuple[float, float]:
    """Centre of mass (x, y) in pixels of a {0, 1} mask. Integer sums: the release's float64 sums of 0 / 1 weights
    are exact integers too (below 2**53), and one correctly rounded division gives the same float. The sums come
    from the row and column counts (the same integers as summing every pixel's coordinates, without listing them)."""
    b = _bool(mask)
    cols, rows = np.count_nonzero(b, axis=0), np.count_nonzero(b, axis=1)
    n = int(cols.sum())
    if n == 0:
        return math.nan, math.nan
    return int(cols @ np.arange(cols.size)) / n, int(rows @ np.arange(rows.size)) / n


def pos(m_edit: Any, m_orig: Any) -> float:
    """Position consistency (D - d) / D, d = centre distance / sqrt(area(first argument)). Not clipped."""
    (xa, ya), (xb, yb) = com(m_edit), com(m_orig)
    d = math.hypot(xa - xb, ya - yb) / math.sqrt(float(area(m_edit)))
    return (POS_MAX_DISTANCE - d) / POS_MAX_DISTANCE


def size(m_orig: Any, m_edit: Any, mode: str) -> float:
    """Size fidelity / consistency from r = sqrt(area(edit) / area(orig)); mode in enlarge, shrink, keep."""
    r = math.sqrt(float(area(m_edit)) / float(area(m_orig)))
    if mode == "enlarge":
        return 1.0 if r > SIZE_ENLARGE_R else 0.0 if r < 1.0 else (r - 1.0) / (SIZE_ENLARGE_R - 1.0)
    if mode == "shrink":
        return 1.0 if r < SIZE_SHRINK_R else 0.0 if r > 1.0 else (1.0 - r) / (1.0 - SIZE_SHRINK_R)
    if mode == "keep":
        if r == 1.0:
            return 1.0
        return 1.0 - (r - 1.0) / (SIZE_KEEP_MAX_RATIO - 1.0) if r > 1.0 else r
    raise ValueError(f"size mode must be enlarge, shrink or keep, not {mode!r}")


def g(x: float) -> float:
    """Background-fidelity calibration (piecewise; continuous at 0.54 and 0.66 to ~1e-4)."""
    if x < 0.54:
        return 0.05 * x
    if x < 0.66:
        return -3318.33833 * (0.3564 * x - 0.6 * x**2 + 0.333333 * x**3 - 0.0698399) + (0.05 * 0.54 + 1 - 0.05 * 0.34) / 2
    return 0.983 + 0.05 * (x - 0.66)


def gray3(img: Any) -> Any:
    """Channel mean repeated to 3 channels, as a view of the one plane (stride 0 along channels): resizes then work
    on one plane (`interpolate`), and `dense` materialises it where a reduction's order depends on the layout."""
    return img.mean(dim=0, keepdim=True).expand(3, -1, -1)


def one_plane(img: Any) -> Any | None:
    """The plane of a 3-channel image that repeats one plane by a stride-0 view (`gray3`, `edge_map`), else None."""
    return img[:1] if img.dim() == 3 and img.shape[0] == 3 and img.stride(0) == 0 else None


def dense(img: Any) -> Any:
    """A repeated-plane view as the materialised (3, H, W) tensor `.repeat` gave; any other image unchanged (so its
    layout, and the order of any reduction over it, stays what it was)."""
    return img.contiguous() if one_plane(img) is not None else img


def interpolate(img: Any, hw: tuple[int, int], **kwargs: Any) -> Any:
    """`F.interpolate(img.unsqueeze(0), size=hw, **kwargs).squeeze(0)`. A repeated-plane image on the CPU is resized
    as its one plane and repeated again by a view: the kernels compute each plane on its own, so the values are those
    of the materialised image (tests/test_speed_planes.py checks it bit for bit) for a third of the work."""
    import torch
    import torch.nn.functional as F

    plane = one_plane(img)
    # torch's CPU bilinear kernel without antialiasing picks its algorithm by the channel count on one thread (for
    # more than 128 output rows + columns: the separable one for 3 channels, the generic one for 1), and the two
    # round differently: there the materialised image is resized, as before
    one_thread_3ch = (kwargs.get("mode") == "bilinear" and not kwargs.get("antialias")
                      and torch.get_num_threads() == 1 and hw[0] + hw[1] > 128)
    if plane is None or img.device.type != "cpu" or one_thread_3ch:
        return F.interpolate(dense(img).unsqueeze(0), size=hw, **kwargs).squeeze(0)
    return F.interpolate(plane.unsqueeze(0), size=hw, **kwargs).squeeze(0).expand(3, -1, -1)


def resize(img: Any, hw: tuple[int, int]) -> Any:
    """Bilinear, no antialiasing (F.interpolate's defaults, as the release)."""
    return interpolate(img, hw, mode="bilinear")


def edge_map(img: Any) -> Any:
    """Canny(100, 400) of the grayscale image (8-bit by truncation, as the release), as a 3-channel float (a view of
    one plane repeated, as `gray3`)."""
    import cv2
    import torch

    arr = img.mul(255).permute(1, 2, 0).to(torch.uint8).cpu().numpy()
    edges = cv2.Canny(cv2.cvtColor(np.ascontiguousarray(arr), cv2.COLOR_RGB2GRAY), CANNY_LOW, CANNY_HIGH)
    return torch.from_numpy(edges).float().div(255).unsqueeze(0).expand(3, -1, -1)  # one plane, repeated (gray3)


def deg_b_image(img: Any) -> Any:
    """Degradation test B: grayscale, downscaled by 20 (at least 4 px a side)."""
    h, w = img.shape[-2:]
    return resize(gray3(img), (max(DEG_B_MIN_SIZE, int(h / DEG_B_LEVEL)), max(DEG_B_MIN_SIZE, int(w / DEG_B_LEVEL))))


def l2_sim(a: Any, b: Any) -> float:
    """1 - MSE(a, b resized to a's size); MSE(0, 1) = 1 so no further scaling."""
    if b.shape[-2:] != a.shape[-2:]:
        b = resize(b, tuple(a.shape[-2:]))
    # repeated planes materialised: the mean sums the 3 planes in the order the materialised tensors gave; the
    # square in place is the same kernel as `** 2` without a second buffer
    return 1.0 - float((dense(a) - dense(b)).pow_(2).mean())


def relation_phrase(relation: str) -> str:
    """HATIE's wording of a relation word in the obj_add position text."""
    if relation in ("left", "right"):
        return f"on the {relation} side of"
    if relation == "front":
        return "in front of"
    return relation

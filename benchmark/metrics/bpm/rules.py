"""BPM's region-aware judge (docs/bpm.md, "Region-aware"): S_position and S_size in {0, 1} from boxes and mask
areas, with every threshold a keyword argument (configs/metrics/bpm.yaml). Boxes are [x0, y0, x1, y1] pixels;
image y grows downwards, so "up" is a negative dy."""

from __future__ import annotations

from dataclasses import dataclass

from benchmark.models.locate import Box


def iou(a: Box, b: Box) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def centre(b: Box) -> tuple[float, float]:
    return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2


@dataclass(frozen=True)
class PositionRule:
    """min_shift: the centre must move at least this share of the image side in the asked direction;
    max_cross_shift: and at most this share along the other axis (no unwanted move); max_iou_moved: the boxes
    before / after (or object / reference) must overlap less than this (a salient move); min_iou_unchanged: an
    unmoved object keeps at least this IoU."""

    min_shift: float = 0.05
    max_cross_shift: float = 0.1
    max_iou_moved: float = 0.5
    min_iou_unchanged: float = 0.5

    def __call__(self, before: Box, after: Box, state: str, size: tuple[int, int]) -> tuple[int, str]:
        """(S_position, why) for the move from `before` (the original object, or the reference object for a
        relative placement) to `after` (the object in the edit); `size` = (width, height)."""
        overlap = iou(before, after)
        if state == "unchanged":
            ok = overlap >= self.min_iou_unchanged
            return int(ok), "" if ok else f"moved: IoU {overlap:.2f} < {self.min_iou_unchanged}"
        (bx, by), (ax, ay) = centre(before), centre(after)
        w, h = size
        dx, dy = (ax - bx) / w, (ay - by) / h
        main, cross = {"left": (-dx, dy), "right": (dx, dy), "up": (-dy, dx), "down": (dy, dx)}[state]
        if main < self.min_shift:
            return 0, f"not moved {state} (shift {main:+.3f} < {self.min_shift})"
        if abs(cross) > self.max_cross_shift:
            return 0, f"unwanted move in the other axis ({cross:+.3f}, limit {self.max_cross_shift})"
        if overlap >= self.max_iou_moved:
            return 0, f"move not salient (IoU {overlap:.2f} >= {self.max_iou_moved})"
        return 1, ""


@dataclass(frozen=True)
class SizeRule:
    """larger: area ratio (after / before) >= larger_ratio; smaller: <= smaller_ratio; unchanged: within
    [unchanged_low, unchanged_high]."""

    larger_ratio: float = 1.2
    smaller_ratio: float = 0.8
    unchanged_low: float = 0.8
    unchanged_high: float = 1.25

    def __call__(self, area_before: float, area_after: float, state: str) -> tuple[int, str]:
        if area_before <= 0:
            return 0, "empty original mask"
        r = area_after / area_before
        if state == "larger":
            ok, why = r >= self.larger_ratio, f"area ratio {r:.2f} < {self.larger_ratio}"
        elif state == "smaller":
            ok, why = r <= self.smaller_ratio, f"area ratio {r:.2f} > {self.smaller_ratio}"
        else:
            ok = self.unchanged_low <= r <= self.unchanged_high
            why = f"area ratio {r:.2f} outside [{self.unchanged_low}, {self.unchanged_high}]"
        return int(ok), "" if ok else why

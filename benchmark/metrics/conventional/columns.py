"""Columns of the conventional suite: one definition per metric, the component each needs, and aliases.

A metric registered under two names (directional CLIP, which the MD paper calls Manipulation Direction) is computed
once; its alias column is a copy of the same value, so the two can never disagree.
"""

from __future__ import annotations

VERSION = "1.1"  # 1.1: CLIP and DINO (MagicBrush) inputs made as MagicBrush's script makes them

# name -> (higher_is_better, description), in table order
COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "clip_t": (True, "CLIP-T: cos(E(edit), E(text)); text = the target caption, or the instruction where the query "
                     "has none (MagicBrush); the row's clip_t_text names the field"),
    "clip_i": (True, "CLIP-I: cos(E(edit), E(source))"),
    "clip_dir": (True, "directional CLIP: cos(E(edit) - E(source), E(target caption) - E(source caption)); NaN when "
                       "a caption is missing or either direction is zero (identity edit, identical captions)"),
    "md": (True, "Manipulation Direction (MD paper): the value of clip_dir, registered once under both names"),
    "dino_ev": (True, "DINO ViT-B/16 CLS cosine, edit vs source, input resized to 224 (EditVal)"),
    "dino_mb": (True, "DINO ViT-S/16 CLS cosine, edit vs source, short side 256 + centre crop 224 (MagicBrush)"),
    "lpips": (False, "LPIPS (AlexNet), edit vs source, at the source's resolution"),
    "l1": (False, "mean absolute difference, edit vs source, images in [0, 1]"),
    "l2": (False, "mean squared difference, edit vs source, images in [0, 1]"),
    "lpips_out": (False, "LPIPS outside the edit mask: the edit's masked pixels set to the source's, LPIPS's "
                         "spatial map averaged over unedited pixels only"),
    "l1_out": (False, "L1 outside the edit mask (mean over unedited pixels)"),
    "l2_out": (False, "L2 (MSE) outside the edit mask (mean over unedited pixels)"),
    "psnr_out": (True, "PSNR outside the edit mask, capped at 100 dB"),
    "ssim_out": (True, "SSIM outside the edit mask (normalised convolution over unedited pixels)"),
    "clip_i_gt": (True, "CLIP-I against the ground-truth target (MagicBrush); NaN where the query has none"),
    "dino_gt": (True, "DINO ViT-S/16 cosine against the ground-truth target (MagicBrush); NaN where none"),
    "l1_gt": (False, "L1 against the ground-truth target (MagicBrush); NaN where none"),
    "l2_gt": (False, "L2 against the ground-truth target (MagicBrush); NaN where none"),
}
ALIASES = {"md": "clip_dir"}  # alias -> the column whose value it repeats
# component -> the columns that need it (a component configured as null drops its columns)
NEEDS = {"clip": ("clip_t", "clip_i", "clip_dir", "md", "clip_i_gt"), "dino_ev": ("dino_ev",),
         "dino_mb": ("dino_mb", "dino_gt"), "lpips": ("lpips", "lpips_out")}
# model-level counts the suite's summary adds to every leaderboard row (benchmark.tables.summaries)
SUMMARY_INFO: dict[str, tuple[bool, str]] = {
    "n_no_target": (False, "ok queries without a ground-truth target (their _gt columns are NaN)"),
    "n_no_mask": (False, "ok queries without an edit mask (their _out columns are NaN)"),
    "n_dir_undefined": (False, "ok queries whose clip_dir / md is undefined (NaN; the row's dir_note says why)"),
}

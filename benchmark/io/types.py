"""Typed records shared by every stage: queries (schema v1), edit records and score rows.

Everything here is a frozen dataclass of plain values so records hash, compare and serialise predictably.
Validation lives in `benchmark.querysets.io`; these classes only describe shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SCHEMA_VERSION = 1

# HATIE's seven edit types (HATIE paper Sec. 3.1).
HATIE_TYPES: tuple[str, ...] = (
    "obj_add",
    "obj_remove",
    "obj_rep",
    "attr_chg",
    "obj_resize",
    "bg_chg",
    "style_chg",
)
# EditVal's thirteen edit types (EditVal paper Table 1; spec/editval.md).
EDITVAL_TYPES: tuple[str, ...] = (
    "object_addition",
    "object_replacement",
    "positional_addition",
    "size",
    "position_replacement",
    "alter_parts",
    "background",
    "texture",
    "style",
    "color",
    "shape",
    "action",
    "viewpoint",
)
# Sources whose edits carry no type, only a free-form instruction (MagicBrush). Added in schema v1 as an extra
# allowed value: older files stay valid, and their hashes do not change.
FREEFORM_TYPES: tuple[str, ...] = ("free_form",)
# GEdit-Bench's eleven task categories (its `task_type` values; Step1X-Edit's GEdit-Bench), namespaced `gedit_` so
# they never collide with a HATIE or EditVal name (`benchmark.querysets.gedit.TASK_TYPES` maps the release's names).
# Like free_form, a later schema v1 addition: older files stay valid and keep their hashes.
GEDIT_TYPES: tuple[str, ...] = (
    "gedit_background_change",
    "gedit_color_alter",
    "gedit_material_alter",
    "gedit_motion_change",
    "gedit_ps_human",
    "gedit_style_change",
    "gedit_subject_add",
    "gedit_subject_remove",
    "gedit_subject_replace",
    "gedit_text_change",
    "gedit_tone_transfer",
)
# PIE-Bench's ten editing types (its `editing_type_id` "0".."9", in that order; PnP Inversion, ICLR 2024), namespaced
# `pie_` (`benchmark.querysets.pie.TYPE_IDS` maps the ids). A later schema v1 addition like GEDIT_TYPES.
PIE_TYPES: tuple[str, ...] = (
    "pie_random",
    "pie_change_object",
    "pie_add_object",
    "pie_delete_object",
    "pie_change_content",
    "pie_change_pose",
    "pie_change_color",
    "pie_change_material",
    "pie_change_background",
    "pie_change_style",
)
# ImgEdit-Bench Basic's nine edit types (PKU-YuanGroup/ImgEdit `Benchmark/Basic/basic_edit.json`'s `edit_type`;
# `compose` is the paper's "Hybrid"), namespaced `imgedit_` (`benchmark.querysets.imgedit.EDIT_TYPES` maps the
# release's names). A later schema v1 addition like GEDIT_TYPES.
IMGEDIT_TYPES: tuple[str, ...] = (
    "imgedit_add",
    "imgedit_adjust",
    "imgedit_extract",
    "imgedit_replace",
    "imgedit_remove",
    "imgedit_background",
    "imgedit_style",
    "imgedit_compose",
    "imgedit_action",
)
# KRIS-Bench's twenty task folders (mercurystraw/Kris_Bench `KRIS_Bench/<task>/annotation.json`; the paper lists 22
# tasks, lmms-eval's KRIS-Bench task splits temporal prediction into three by its target frame), namespaced `kris_` with '-' as '_' (`benchmark.querysets.kris.TASKS`
# maps the release's names). A later schema v1 addition like GEDIT_TYPES.
KRIS_TYPES: tuple[str, ...] = (
    "kris_count_change",
    "kris_color_change",
    "kris_size_adjustment",
    "kris_part_completion",
    "kris_anomaly_correction",
    "kris_viewpoint_change",
    "kris_position_movement",
    "kris_temporal_prediction",
    "kris_humanities",
    "kris_practical_knowledge",
    "kris_biology",
    "kris_chemistry",
    "kris_geography",
    "kris_medicine",
    "kris_mathematics",
    "kris_physics",
    "kris_abstract_reasoning",
    "kris_rule_based_reasoning",
    "kris_multi_element_composition",
    "kris_multi_instruction_execution",
)
# RISEBench's four reasoning categories (PhoenixZ810/RISEBench `data_total.json`'s `category`: temporal_reasoning,
# causal_reasoning, spatial_reasoning, logical_reasoning), namespaced `rise_` (`benchmark.querysets.rise.CATEGORIES`
# maps the release's names). A later schema v1 addition like GEDIT_TYPES.
RISE_TYPES: tuple[str, ...] = (
    "rise_temporal",
    "rise_causal",
    "rise_spatial",
    "rise_logical",
)
EDIT_TYPES: tuple[str, ...] = (HATIE_TYPES + EDITVAL_TYPES + FREEFORM_TYPES + GEDIT_TYPES + PIE_TYPES + IMGEDIT_TYPES
                               + KRIS_TYPES + RISE_TYPES)
FREEFORM_CLASS = "free-form"

# Types that change the whole image rather than one object; grouped as one pseudo-class.
WHOLE_IMAGE_TYPES = frozenset({"bg_chg", "style_chg", "background", "style", "viewpoint"})
WHOLE_IMAGE_CLASS = "whole image"

# Fields each type needs beyond the common ones (id, image, prompt text).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "obj_add": ("new_class", "anchor", "relation"),
    "obj_remove": ("target",),
    "obj_rep": ("target", "new_class"),
    "attr_chg": ("target", "attribute_after"),
    "obj_resize": ("target", "size_change"),
    "bg_chg": ("background",),
    "style_chg": ("style",),
    "object_addition": ("target", "new_class"),
    "object_replacement": ("target", "new_class"),
    "positional_addition": ("target", "new_class", "relation"),
    "size": ("target", "size_change"),
    "position_replacement": ("target", "relation"),
    "alter_parts": ("target", "attribute_after"),
    "background": ("background",),
    "texture": ("target", "attribute_after"),
    "style": ("style",),
    "color": ("target", "attribute_after"),
    "shape": ("target", "attribute_after"),
    "action": ("target", "attribute_after"),
    "viewpoint": ("attribute_after",),
    "free_form": (),
    **{t: () for t in GEDIT_TYPES},
    # every PIE-Bench entry has both prompts (the methods it compares are description-based)
    **{t: ("source_caption", "target_caption") for t in PIE_TYPES},
    **{t: () for t in IMGEDIT_TYPES},
    **{t: () for t in KRIS_TYPES},
    **{t: () for t in RISE_TYPES},
}

SizeChange = Literal["enlarge", "shrink"]
PromptKind = Literal["instruction", "description"]


@dataclass(frozen=True)
class ObjectRef:
    """One object instance of the source image.

    `bbox` is `[x0, y0, x1, y1]` corner coordinates in pixels (never centre/size); `mask` is a path relative to
    the query set root (a {0,255} grayscale PNG).
    """

    id: str
    name: str
    mask: str | None = None
    bbox: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class Query:
    """One edit request on one source image (schema v1).

    Paths (`image`, `edit_mask`, `target_image`, object masks) are relative to the query set root.
    `edit_mask` marks the pixels the edit may change (1 = may change); consistency metrics use its complement.
    `target_image` is a ground-truth edit where the source provides one (demo, MagicBrush).
    A bilingual source (GEdit-Bench) gives one query per instruction: `instruction` in `language`, and both
    languages' texts in `instruction_en` / `instruction_zh` where the pair exists.
    """

    id: str
    image: str
    edit_type: str
    instruction: str = ""
    source_caption: str = ""
    target_caption: str = ""
    image_id: str = ""
    target: ObjectRef | None = None
    anchor: ObjectRef | None = None
    new_class: str | None = None
    relation: str | None = None
    attribute_before: str | None = None
    attribute_after: str | None = None
    size_change: SizeChange | None = None
    background: str | None = None
    style: str | None = None
    editable_objects: tuple[ObjectRef, ...] = ()
    edit_mask: str | None = None
    target_image: str | None = None
    # Optional, added after the first sets were built (defaults are omitted on disk, so older hashes do not change).
    language: str | None = None  # language of `instruction` (BCP 47: "en", "zh"); None = not recorded
    instruction_en: str | None = None  # the edit's instruction in English / Chinese where the source gives both
    instruction_zh: str | None = None
    subsets: tuple[str, ...] = ()  # the source's named subsets this query belongs to (GEdit-Bench: "intersection")
    # PIE-Bench's `blended_word`: the edited word of the source prompt and of the target prompt, space-separated
    # ("cat dog"), as the release gives it; its P2P script builds the local blend from it
    blended_word: str | None = None
    # KRIS-Bench's `explain_en`: the real-world knowledge the judge is told the edit should show (its knowledge tasks'
    # dual prompt quotes it); never shown to an editor
    explanation: str | None = None
    # an image a judged protocol compares the edit with, never given to the editor (RISEBench's `reference_img`: the
    # intended result, or a logic puzzle's answer); not a ground-truth edit of the source (`target_image`), so the
    # metrics that compare an edit with `target_image` never see it
    reference_image: str | None = None
    # facts of the release that a judged protocol needs and the editor never sees, as (name, value) text pairs sorted
    # by name; on disk a JSON object {name: text} (RISEBench: the reference answer, the subtask, the release's flags)
    judge_hints: tuple[tuple[str, str], ...] = ()
    # Multi-turn sources (MagicBrush): the edit session this query is one turn of, and its 1-based turn index.
    # Both or neither; within a query set a session's turns are 1..n, each once. A multi-turn protocol edits turn t
    # from the editor's own output of turn t-1; the single-turn protocol edits every turn from its own `image`.
    session: str | None = None
    turn: int | None = None

    def hint(self, name: str, default: str | None = None) -> str | None:
        """The judge hint `name`, or `default` where the query has none."""
        return dict(self.judge_hints).get(name, default)

    @property
    def object_class(self) -> str:
        """The class a per-class table groups this query under.

        obj_add / object_addition group by the class being added; every other object task by the class of the
        object being edited (for obj_rep: the original object); whole-image tasks form one pseudo-class, and
        free-form edits (MagicBrush, and GEdit-Bench and PIE-Bench, whose edits name no annotated object) another.
        """
        if self.edit_type in WHOLE_IMAGE_TYPES:
            return WHOLE_IMAGE_CLASS
        if (self.edit_type in FREEFORM_TYPES or self.edit_type in GEDIT_TYPES or self.edit_type in PIE_TYPES
                or self.edit_type in IMGEDIT_TYPES or self.edit_type in KRIS_TYPES
                or self.edit_type in RISE_TYPES):
            return FREEFORM_CLASS
        if self.edit_type in ("obj_add", "object_addition", "positional_addition") and self.new_class:
            return self.new_class
        if self.target is not None:
            return self.target.name
        return WHOLE_IMAGE_CLASS


@dataclass(frozen=True)
class EditRecord:
    """Outcome of editing one query (one line of `edits.jsonl`)."""

    query_id: str
    status: Literal["ok", "failed"]
    seed: int
    seconds: float | None = None
    reason: str = ""  # failed: "<exception type>: <message>" (the traceback is in the run's failures.log)
    run_id: str = ""
    recovered: bool = False  # the image exists but its record was lost to an interrupted run
    error_type: str = ""  # failed: the exception's class name, e.g. "RuntimeError"
    # the text the query was edited with, by an editor that rewrites instructions (`Editor.rewrites_instruction`);
    # None (and absent from edits.jsonl) for every other editor
    rewritten: str | None = None


@dataclass(frozen=True)
class MetricInfo:
    """Metadata a metric declares, torchmetrics-style."""

    name: str
    version: str
    higher_is_better: bool
    needs: frozenset[str] = field(default_factory=frozenset)
    description: str = ""

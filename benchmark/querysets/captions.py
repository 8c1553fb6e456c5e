"""Source / target captions for description-based editors, built from a scene graph.

HATIE (App. B.2) drafted captions with Llama 3 and refined them with GPT-4; that is neither reproducible nor
available offline. editmeter's default is `TemplateCaptioner`: a deterministic caption from the editable objects
(exact class names, as HATIE requires), their attributes and the scene's location, and a target caption derived by
the same template from the edited scene. `LLMCaptioner` is the pluggable alternative: it takes any
`generate(prompt) -> text` callable (a local pinned model, with cached outputs), checks that the exact object names
survive, and falls back to the template (counted in the build summary) when they do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# How a relation word of HATIE's vocabulary reads in a sentence.
RELATION_PHRASES: dict[str, str] = {
    "left": "to the left of", "right": "to the right of", "front": "in front of", "behind": "behind",
    "under": "under", "above": "above", "in": "in", "on": "on", "next to": "next to",
}


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


@dataclass(frozen=True)
class CaptionObject:
    """An object as a caption mentions it: class name and the attribute words to show (in order)."""

    oid: str
    name: str
    attributes: tuple[str, ...] = ()

    def phrase(self) -> str:
        words = " ".join((*self.attributes, self.name))
        return f"{article(words)} {words}"


@dataclass(frozen=True)
class Scene:
    """What the captioner sees: the objects to mention, where the scene is, and an optional style."""

    objects: tuple[CaptionObject, ...]
    location: str | None = None
    style: str | None = None
    extra: tuple[str, ...] = field(default=())  # extra phrases (an added object with its relation)


@dataclass(frozen=True)
class EditSpec:
    """The edit a target caption must describe (the fields of one query the captioner needs)."""

    edit_type: str
    target: str | None = None  # object id
    new_class: str | None = None
    anchor: str | None = None  # object id
    relation: str | None = None
    attribute_before: str | None = None
    attribute_after: str | None = None
    size_change: str | None = None
    background: str | None = None
    style: str | None = None


def _join(parts: Sequence[str]) -> str:
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def render(scene: Scene) -> str:
    """Template caption of a scene: 'a photo of a red car and a dog in a street'."""
    things = _join([o.phrase() for o in scene.objects] + list(scene.extra))
    where = f" in {article(scene.location)} {scene.location}" if scene.location else ""
    body = f"{things}{where}" if things else (f"{article(scene.location)} {scene.location}" if scene.location else "an empty scene")
    return f"{article(scene.style)} {scene.style} of {body}" if scene.style else f"a photo of {body}"


def edited_scene(scene: Scene, edit: EditSpec) -> Scene:
    """The scene after `edit`, as the template captioner describes it."""
    objs = list(scene.objects)
    by_id = {o.oid: i for i, o in enumerate(objs)}
    t = edit.edit_type
    if t == "obj_add":
        anchor = objs[by_id[edit.anchor]].name if edit.anchor in by_id else "scene"
        phrase = f"{article(edit.new_class or '')} {edit.new_class} {RELATION_PHRASES.get(edit.relation or '', edit.relation)} the {anchor}"
        return Scene(tuple(objs), scene.location, scene.style, (*scene.extra, phrase))
    if t == "obj_remove":
        return Scene(tuple(o for o in objs if o.oid != edit.target), scene.location, scene.style, scene.extra)
    i = by_id.get(edit.target or "")
    if t == "obj_rep" and i is not None:
        objs[i] = CaptionObject(objs[i].oid, edit.new_class or "", ())
    elif t == "attr_chg" and i is not None:
        attrs = tuple(edit.attribute_after if a == edit.attribute_before else a for a in objs[i].attributes)
        objs[i] = CaptionObject(objs[i].oid, objs[i].name, attrs)
    elif t == "obj_resize" and i is not None:
        objs[i] = CaptionObject(objs[i].oid, objs[i].name, ("bigger" if edit.size_change == "enlarge" else "smaller", *objs[i].attributes))
    elif t == "bg_chg":
        return Scene(tuple(objs), edit.background, scene.style, scene.extra)
    elif t == "style_chg":
        return Scene(tuple(objs), scene.location, edit.style, scene.extra)
    return Scene(tuple(objs), scene.location, scene.style, scene.extra)


class Captioner(Protocol):
    name: str

    def captions(self, scene: Scene, edit: EditSpec) -> tuple[str, str]:
        """(source caption, target caption) for one query."""
        ...


class TemplateCaptioner:
    """Deterministic template captions (the default)."""

    name = "template"

    def captions(self, scene: Scene, edit: EditSpec) -> tuple[str, str]:
        return render(scene), render(edited_scene(scene, edit))


class LLMCaptioner:
    """Captions from a language model: `generate(prompt) -> str` is any local, pinned text generator.

    The prompts follow HATIE App. B.2 (write a short caption using the exact object names; rewrite it for the
    edit). Outputs that drop a required name are retried `max_tries` times, then the template caption is used and
    `fallbacks` counts it, so a build summary can say how many captions are template-made.
    """

    name = "llm"

    def __init__(self, generate: Callable[[str], str], max_tries: int = 3, max_words: int = 60) -> None:
        self.generate = generate
        self.max_tries = max_tries
        self.max_words = max_words
        self.fallbacks = 0
        self._template = TemplateCaptioner()

    def _ask(self, prompt: str, required: Sequence[str]) -> str | None:
        for _ in range(self.max_tries):
            text = " ".join(self.generate(prompt).split())
            if text and all(r.lower() in text.lower() for r in required) and len(text.split()) <= self.max_words:
                return text
        return None

    def captions(self, scene: Scene, edit: EditSpec) -> tuple[str, str]:
        draft = render(scene)
        names = [o.name for o in scene.objects]
        src = self._ask(
            f"Write one natural caption of at most {self.max_words} words for a photo described as: {draft}. "
            f"Use exactly these object names: {', '.join(names)}.", names)
        target_draft = render(edited_scene(scene, edit))
        target_names = [o.name for o in edited_scene(scene, edit).objects]
        tgt = None
        if src is not None:
            tgt = self._ask(
                f"Rewrite the caption '{src}' so that it describes this edited scene instead: {target_draft}. Change "
                f"only what the edit changes and keep these object names: {', '.join(target_names)}.", target_names)
        if src is None or tgt is None:
            self.fallbacks += 1
            return self._template.captions(scene, edit)
        return src, tgt

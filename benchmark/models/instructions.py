"""What an edit asks for, as BPM needs it (docs/bpm.md, "Instruction parsing"): the source object o1 (None for an
addition), the target object o2 (None for a removal), the size state (larger / smaller / unchanged) and the
position state (left / right / up / down / unchanged), plus an optional reference object for relative positions.

Generated query sets carry these as fields (`from_query`); free-form instructions (MagicBrush) go through a
rule-based parser (`RuleParser`) and, optionally, a local LLM (`LLMInstructionParser`) for what the rules miss.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmark.io.types import Query

SIZES = ("larger", "smaller", "unchanged")
POSITIONS = ("left", "right", "up", "down", "unchanged")
# whole-image edit types (HATIE, EditVal, GEdit-Bench, PIE-Bench): no object for BPM to locate
GLOBAL_TYPES = frozenset({"bg_chg", "style_chg", "background", "style", "viewpoint", "gedit_background_change",
                          "gedit_style_change", "gedit_tone_transfer", "pie_change_background",
                          "pie_change_style"})


@dataclass(frozen=True)
class ParsedEdit:
    """o1 / o2 are detector prompts (object names); `source_text` / `target_text` are what CLIP's text encoder
    sees for them (an attribute change keeps the object and changes the words: "red car" -> "blue car")."""

    source_object: str | None
    target_object: str | None
    size: str = "unchanged"
    position: str = "unchanged"
    reference: str | None = None
    source_text: str | None = None
    target_text: str | None = None

    def __post_init__(self) -> None:
        if self.size not in SIZES or self.position not in POSITIONS:
            raise ValueError(f"size must be in {SIZES} and position in {POSITIONS}, not {self.size!r} / {self.position!r}")
        if self.source_object is None and self.target_object is None:
            raise ValueError("an edit needs a source or a target object")

    @property
    def kind(self) -> str:
        return "add" if self.source_object is None else "remove" if self.target_object is None else "modify"

    @property
    def o1_text(self) -> str | None:
        return self.source_text or self.source_object

    @property
    def o2_text(self) -> str | None:
        return self.target_text or self.target_object


class ParseError(ValueError):
    """The instruction could not be parsed (a failure row with this message)."""


_REL = {"to the left of": "left", "left of": "left", "on the left of": "left", "to the right of": "right",
        "right of": "right", "on the right of": "right", "above": "up", "on top of": "up", "over": "up",
        "below": "down", "under": "down", "beneath": "down", "underneath": "down"}
_DIR = {"left": "left", "right": "right", "up": "up", "upward": "up", "upwards": "up", "top": "up", "higher": "up",
        "down": "down", "downward": "down", "downwards": "down", "bottom": "down", "lower": "down"}
_WHOLE = {"it", "this", "that", "image", "picture", "photo", "scene", "everything", "all", "background", "sky",
          "weather", "season", "style", "painting"}
_BIG = {"bigger", "larger", "huge", "big", "large", "enormous", "giant", "taller", "longer", "wider"}
_SMALL = {"smaller", "tiny", "small", "little", "shorter", "tinier", "narrower"}


def relation_position(relation: str | None) -> str:
    """Position state of an "X <relation> Y" placement ("to the left of" -> left); other relations: unchanged."""
    r = " ".join((relation or "").lower().split())
    return next((v for k, v in sorted(_REL.items(), key=lambda kv: -len(kv[0])) if r.startswith(k)), "unchanged")


def from_query(q: Query) -> ParsedEdit:
    """The parse of a generated query, from its fields (HATIE and EditVal types). Raises ParseError for types
    without an object (global edits) and for free-form queries (use a parser)."""
    name = q.target.name if q.target is not None else None
    t = q.edit_type
    if t in ("obj_add", "object_addition", "positional_addition"):
        if not q.new_class:
            raise ParseError(f"{t} query {q.id} has no new_class")
        ref = q.anchor.name if q.anchor is not None else name
        return ParsedEdit(None, q.new_class, position=relation_position(q.relation), reference=ref)
    if name is None:
        raise ParseError(f"{t} query {q.id} names no object: BPM judges object edits (global edits are excluded)")
    if t in ("obj_remove",):
        return ParsedEdit(name, None)
    if t in ("obj_rep", "object_replacement"):
        return ParsedEdit(name, q.new_class or name)
    if t in ("obj_resize", "size"):
        return ParsedEdit(name, name, size="larger" if q.size_change == "enlarge" else "smaller")
    if t == "position_replacement":
        rel = (q.relation or "").lower()
        pos = relation_position(rel) if relation_position(rel) != "unchanged" else next(
            (v for k, v in _DIR.items() if re.search(rf"\b{k}\b", rel)), "unchanged")
        return ParsedEdit(name, name, position=pos)
    if q.attribute_after:  # attr_chg, color, texture, shape, alter_parts, action
        before = f"{q.attribute_before} {name}" if q.attribute_before else name
        return ParsedEdit(name, name, source_text=before, target_text=f"{q.attribute_after} {name}")
    raise ParseError(f"{t} query {q.id}: no rule maps this edit type to objects")


# -- free-form instructions ---------------------------------------------------------------------------------

_ART = r"(?:the |a |an |some |this |that |his |her |their |its )?"
_COLORS = {"red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "gray", "grey",
           "golden", "gold", "silver", "beige", "violet", "colorful", "transparent", "wooden", "metal", "glass",
           "striped", "spotted", "shiny", "dark", "bright", "rusty", "old", "new", "wet", "dry", "snowy", "happy",
           "sad", "smiling", "angry", "young", "older", "younger"}


def _np(s: str) -> str:
    """A noun phrase without leading article / trailing filler ("the big dog in the picture" -> "big dog")."""
    s = re.sub(r"^(?:the|a|an|some|this|that|his|her|their|its)\s+", "", s.strip())
    s = re.sub(r"\s+(?:in|from|of) (?:the )?(?:picture|image|photo|scene|frame)$", "", s)
    return s.strip(" .,!")


def _is_attribute(words: str) -> bool:
    return bool(words) and all(w in _COLORS or w.endswith(("ish", "ed", "en")) for w in words.split()) \
        and len(words.split()) <= 3


class RuleParser:
    """Regular-expression rules for the common shapes of editing instructions (MagicBrush's style):
    add / put / place, remove / delete / get rid of, replace ... with, turn / change / make ... into,
    make ... bigger / smaller, move ... to the left / right / up / down, make / color / paint ... <attribute>,
    "what if ... was ...", "let ... wear / hold ...". The patterns and their order are listed in docs/bpm.md."""

    version = "rules-v1"
    signature = version

    def _rules(self, s: str) -> ParsedEdit | None:  # noqa: C901 - one flat list of patterns reads best
        m = re.match(rf"^(?:move|shift|slide|drag|put|place)\s+{_ART}(.+?)\s+(?:further |more |a bit |slightly )?"
                     r"(?:to the |to |towards the |towards |over to the )?(left|right|up|upward|upwards|down|downward|"
                     r"downwards|top|bottom)(?:\s+(?:side|part|corner|edge))?(?:\s+of\s+(?:the )?(.+))?$", s)
        if m:
            obj, ref = _np(m.group(1)), m.group(3)
            return ParsedEdit(obj, obj, position=_DIR[m.group(2)], reference=_np(ref) if ref else None)
        m = re.match(rf"^(?:make|have)\s+{_ART}(.+?)\s+(?:look |appear |be )?(?:much |a lot |a bit |slightly )?"
                     r"(\w+)$", s)
        if m and (m.group(2) in _BIG or m.group(2) in _SMALL):
            obj = _np(m.group(1))
            return ParsedEdit(obj, obj, size="larger" if m.group(2) in _BIG else "smaller")
        m = re.match(rf"^(enlarge|shrink|increase the size of|decrease the size of|reduce the size of)\s+{_ART}(.+)$", s)
        if m:
            obj = _np(m.group(2))
            return ParsedEdit(obj, obj, size="larger" if m.group(1) in ("enlarge", "increase the size of") else "smaller")
        m = re.match(r"^(?:remove|delete|erase|get rid of|take away|take out|eliminate|cut out)\s+(?:all )?"
                     rf"{_ART}(.+?)(?:\s+(?:from|in|on|off)\s+.+)?$", s) or \
            re.match(r"^(?:there should be|let there be|have) no\s+(.+)$", s)
        if m:
            return ParsedEdit(_np(m.group(m.lastindex or 1)), None)
        m = re.match(rf"^(?:replace|swap|substitute|exchange)\s+{_ART}(.+?)\s+(?:with|for|by)\s+{_ART}(.+)$", s)
        if m:
            return self._change(_np(m.group(1)), _np(m.group(2)))
        m = re.match(rf"^(?:turn|change|transform|convert|make|switch)\s+{_ART}(.+?)\s+(?:into|to|in to|to be|"
                     rf"become)\s+{_ART}(.+)$", s) or \
            re.match(rf"^(?:what if|imagine if|imagine)\s+{_ART}(.+?)\s+(?:was|were|is|became)\s+{_ART}(.+)$", s) or \
            re.match(rf"^{_ART}(.+?)\s+(?:should be|is now|becomes|turns into|is)\s+{_ART}(.+)$", s)
        if m:
            return self._change(_np(m.group(1)), _np(m.group(2)))
        m = re.match(rf"^(?:color|colour|paint|dye)\s+{_ART}(.+?)\s+(\w+(?: \w+)?)$", s)
        if m:
            obj = _np(m.group(1))
            return ParsedEdit(obj, obj, source_text=obj, target_text=f"{m.group(2)} {obj}")
        m = re.match(rf"^(?:make|have)\s+{_ART}(.+?)\s+(\w+(?: \w+)?)$", s)
        if m and _is_attribute(m.group(2)):
            obj = _np(m.group(1))
            return ParsedEdit(obj, obj, source_text=obj, target_text=f"{m.group(2)} {obj}")
        m = re.match(rf"^(?:let|have|make)\s+{_ART}(.+?)\s+(?:wear|hold|carry|have|has|wearing|holding)\s+{_ART}(.+)$", s) \
            or re.match(rf"^(?:give)\s+{_ART}(.+?)\s+{_ART}(.+)$", s)
        if m:
            return ParsedEdit(None, _np(m.group(2)), reference=_np(m.group(1)))
        m = re.match(rf"^(?:add|put|place|insert|include|draw|paint|there should be|let there be|there is|"
                     rf"there are|show)\s+{_ART}(.+)$", s)
        if m:
            rest = m.group(1)
            for rel in sorted(_REL, key=len, reverse=True):
                parts = re.split(rf"\s+{re.escape(rel)}\s+", rest, maxsplit=1)
                if len(parts) == 2:
                    return ParsedEdit(None, _np(parts[0]), position=_REL[rel], reference=_np(parts[1]))
            parts = re.split(r"\s+(?:on|in|at|near|next to|beside|behind|in front of|to|onto|into)\s+", rest, maxsplit=1)
            return ParsedEdit(None, _np(parts[0]), reference=_np(parts[1]) if len(parts) == 2 else None)
        return None

    @staticmethod
    def _change(o1: str, o2: str) -> ParsedEdit:
        if _is_attribute(o2):  # "turn the car red": the object stays, an attribute changes
            return ParsedEdit(o1, o1, source_text=o1, target_text=f"{o2} {o1}")
        return ParsedEdit(o1, o2)

    def parse(self, instruction: str) -> ParsedEdit:
        s = " ".join(instruction.lower().replace("\u2019", "'").split()).strip(" .!?")
        s = re.sub(r"^(?:please|can you|could you|let's|lets|i want to|i'd like to|now)\s+", "", s)
        s = re.sub(r"\s+please$", "", s)
        parsed = self._rules(s)
        if parsed is None:
            raise ParseError(f"the rule-based parser does not recognise the instruction {instruction!r}")
        if {parsed.source_object, parsed.target_object} & _WHOLE:
            raise ParseError(f"{instruction!r} edits the whole image: BPM judges object edits")
        return parsed


def parse_objects(instruction: str) -> ParsedEdit | None:
    """AugCLIP's `parse_instruction` hook: the rule-based parse, or None when the rules do not apply."""
    try:
        return RuleParser().parse(instruction)
    except ParseError:
        return None


parse_objects.signature = RuleParser.signature  # type: ignore[attr-defined]


# -- optional: a local LLM for what the rules miss ------------------------------------------------------------

LLM_PROMPT = (
    "Parse the image editing instruction. Answer with one JSON object only, with keys source_object (the object "
    "edited in the original image, null when the instruction adds something), target_object (the object in the "
    'edited image, null when the instruction removes something), size ("larger", "smaller" or "unchanged") and '
    'position ("left", "right", "up", "down" or "unchanged").\n'
    'EXAMPLE INPUT: "Replace the clock with a street sign"\nEXAMPLE OUTPUT: {"source_object": "clock", '
    '"target_object": "street sign", "size": "unchanged", "position": "unchanged"}\n'
    'INPUT: "{instruction}"\nOUTPUT:')
LLM_PROMPT_VERSION = "bpm-json-v1"


def parse_llm_answer(text: str) -> ParsedEdit:
    """The first JSON object in `text` with the four keys and allowed values; ParseError otherwise."""
    for m in re.finditer(r"\{[^{}]*\}", text, re.S):
        try:
            d = json.loads(m.group(0))
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        o1, o2 = d.get("source_object"), d.get("target_object")
        size, pos = str(d.get("size", "unchanged")).lower(), str(d.get("position", "unchanged")).lower()
        if (o1 is None or isinstance(o1, str)) and (o2 is None or isinstance(o2, str)) and (o1 or o2) \
                and size in SIZES and pos in POSITIONS:
            return ParsedEdit(_np(o1) if o1 else None, _np(o2) if o2 else None, size=size, position=pos)
    raise ParseError(f"no usable JSON parse in the LLM's answer ({' '.join(text.split())[:80]!r})")


class LLMInstructionParser:
    """Asks a local causal LM (`benchmark.models.llm`, the model AugCLIP's extractor uses) for the parse; `generate` is its only model call."""

    def __init__(self, weights: str = "pretrained", model_id: str = "Qwen/Qwen2.5-0.5B-Instruct",
                 revision: str = "7ae557604adf67be50417f59c2c2f167def9a775", *, max_new_tokens: int = 64,
                 device: str = "cpu") -> None:
        from benchmark.models.llm import llm_name

        self.weights, self.model_id, self.revision = weights, model_id, revision
        self.max_new_tokens, self.device = max_new_tokens, device
        self.signature = f"llm:{llm_name(weights, self.model_id, self.revision)}|{LLM_PROMPT_VERSION}|new{max_new_tokens}"
        self._lm: Any = None

    def generate(self, prompts: Sequence[str]) -> list[str]:
        from benchmark.models.llm import generate_greedy, load_causal_lm

        if self._lm is None:
            self._lm = load_causal_lm(self.weights, self.model_id, self.revision, self.device)[:2]
        return generate_greedy(*self._lm, list(prompts), max_new_tokens=self.max_new_tokens, device=self.device)

    def parse_many(self, instructions: Sequence[str]) -> list[ParsedEdit | str]:
        out: list[ParsedEdit | str] = []
        for text in self.generate([LLM_PROMPT.replace("{instruction}", i) for i in instructions]):
            try:
                out.append(parse_llm_answer(text))
            except ParseError as err:
                out.append(str(err))
        return out

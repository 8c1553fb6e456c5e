"""Where AugCLIP's attribute lists come from (docs/augclip.md, "Attributes").

Three sources, each with a `signature` that becomes part of the metric's signature (scores from different
extractors never share a results folder):

- `StructuredExtractor`: derived from the query's own fields (object class, attribute before / after, background,
  style, size change, relation, captions); no model, deterministic.
- `LLMExtractor` (`load_llm_extractor`): a local causal language model through transformers, prompted as in the
  paper's Appendix C (text only: it sees the captions / instruction, not the image). Its output is parsed robustly
  (`parse_attribute_list`); an output with no usable list is a failure of that query, with the reason.
- `FileExtractor`: attributes written by anything else (e.g. GPT-4V, as the paper used), read from a JSON file.

`AttributeCache` stores extracted attributes in one JSON file keyed by extractor signature and query id (with a
hash of the query's fields, so an edited query is never served stale attributes); it is validated on read.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.errors import RunError
from benchmark.io.hashing import stable_hash
from benchmark.io.types import Query

MAX_ATTRIBUTE_CHARS = 200  # longer "attributes" are model rambling, not short visual descriptions


@dataclass(frozen=True)
class Attributes:
    """Short visual descriptions: `source` (D_S, what the source shows) and `target` (D_T, what the edit should)."""

    source: tuple[str, ...]
    target: tuple[str, ...]


class AttributeParseError(ValueError):
    """A model's output holds no usable list of attributes."""


class AttributeFileError(RunError, ValueError):
    """An attribute file (input or cache) is malformed; the message names the file, the key and the fix. Raised
    when the suite is built, before any edit."""


def query_fingerprint(q: Query) -> str:
    """Hash of every field of the query: cached attributes are valid only for the query they were made from."""
    return stable_hash(dataclasses.asdict(q), 16)


def _clean(items: Sequence[str], limit: int) -> tuple[str, ...]:
    out: list[str] = []
    for s in items:
        s = " ".join(str(s).split()).strip(" .,;")
        if s and s.lower() not in {o.lower() for o in out}:
            out.append(s)
    return tuple(out[:limit])


# -- (a) structured: the query's own fields -------------------------------------------------------------------

def _a(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


class StructuredExtractor:
    """D_S / D_T from the query's fields, no model (docs/augclip.md lists the phrase for each field).

    Free-form queries (MagicBrush) carry only an instruction: `parse_instruction` maps it to (source object,
    target object); by default BPM's rule-based parser (`benchmark.models.instructions.parse_objects`), so
    "turn the dog into a cat" gives "a dog" to D_S and "a cat" to D_T. Pass `use_instruction_parser=False` to
    skip it."""

    version = "structured-v1"

    def __init__(self, max_attributes: int = 16, parse_instruction: Callable[[str], Any] | None = None,
                 use_instruction_parser: bool = True, device: str = "cpu") -> None:
        if parse_instruction is None and use_instruction_parser:
            from benchmark.models.instructions import parse_objects

            parse_instruction = parse_objects
        self.max_attributes = max_attributes
        self.parse_instruction = parse_instruction
        self.signature = f"{self.version}|max{max_attributes}|parser:{getattr(parse_instruction, 'signature', None)}"

    def attributes(self, q: Query) -> Attributes:
        src: list[str] = []
        tgt: list[str] = []
        name = q.target.name if q.target is not None else None
        if q.source_caption:
            src.append(q.source_caption)
        if q.target_caption:
            tgt.append(q.target_caption)
        for o in (q.target, q.anchor, *q.editable_objects):
            if o is not None:
                src.append(_a(o.name))
        if name and q.attribute_before:
            src.append(f"{_a(q.attribute_before)} {name}")
        if q.new_class:
            tgt.append(_a(q.new_class))
            if q.relation and q.anchor is not None:
                tgt.append(f"{_a(q.new_class)} {q.relation} the {q.anchor.name}")
        if q.attribute_after:
            tgt.append(f"{_a(q.attribute_after)} {name}" if name else q.attribute_after)
        if q.size_change and name:
            tgt.append(f"a {'bigger' if q.size_change == 'enlarge' else 'smaller'} {name}")
        if q.relation and name and not q.new_class:
            tgt.append(f"{_a(name)} {q.relation}")
        if q.background:
            tgt.append(f"a photo with {_a(q.background)} background")
        if q.style:
            tgt.append(f"an image in the style of {_a(q.style)}")
        if q.edit_type in ("obj_remove",) and name:
            tgt.append(f"a scene without {_a(name)}")
        if q.instruction and self.parse_instruction is not None and q.edit_type == "free_form":
            parsed = self.parse_instruction(q.instruction)
            o1, o2 = getattr(parsed, "source_object", None), getattr(parsed, "target_object", None)
            if o1:
                src.append(_a(o1))
            if o2:
                tgt.append(_a(o2))
        if q.instruction and not q.target_caption:
            tgt.append(q.instruction)  # free-form sets carry no target description: the request itself
        return Attributes(_clean(src, self.max_attributes), _clean(tgt, self.max_attributes))

    def extract(self, queries: Sequence[Query]) -> list[Attributes | str]:
        """One Attributes per query, or a failure reason (str)."""
        return [self.attributes(q) for q in queries]


# -- (b) a local language model -----------------------------------------------------------------------------

_LIST = re.compile(r"\[[^\[\]]*\]", re.S)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$")


def parse_attribute_list(text: str, max_items: int = 16) -> tuple[str, ...]:
    """The attributes in a model's answer: the first bracketed list of strings (JSON or Python syntax) in it,
    else its bulleted / numbered lines. Raises AttributeParseError when neither gives a usable item."""
    for m in _LIST.finditer(text):
        chunk = m.group(0)
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(chunk)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                items = _clean([v for v in value if len(v.strip()) <= MAX_ATTRIBUTE_CHARS], max_items)
                if items:
                    return items
    bullets = [m.group(1) for line in text.splitlines() if (m := _BULLET.match(line))]
    items = _clean([b.strip("\"'") for b in bullets if len(b) <= MAX_ATTRIBUTE_CHARS], max_items)
    if items:
        return items
    shown = " ".join(text.split())[:80]
    raise AttributeParseError(f"no list of attributes in the model's output ({len(text)} chars: {shown!r})")


SOURCE_PROMPT = (
    "You are a helpful text-generation assistant. Given a textual description of an image, parse it into specific "
    "visual attributes. Answer with a Python list of short sentences only.\n"
    'EXAMPLE INPUT: "a large, dark-colored dog standing in a grassy field"\n'
    'EXAMPLE OUTPUT: ["A dog is large", "A dog is dark-colored", "A dog is standing", '
    '"A dog is standing on a grassy field", "A grass is green"]\n'
    'INPUT: "{text}"\nOUTPUT:')
TARGET_PROMPT = (
    "You are a helpful text-generation assistant. If visual attributes with similar meanings would repeat, use "
    "only one. Answer with a Python list of short sentences only.\n"
    "EXAMPLE INPUT: In order to make a person into a standing posture, what visual attributes of the image should "
    "be changed?\n"
    'EXAMPLE OUTPUT: ["Standing person has straight legs", "Standing person is upright", '
    '"Standing person is on their feet"]\n'
    "INPUT: In order to edit an image of {source} so that it shows {target}, what visual attributes of the image "
    "should be changed?\nOUTPUT:")
PROMPT_VERSION = "paper-appC-text-v1"


class LLMExtractor:
    """D_S from the source description, D_T from the target text, each by one greedy generation of a causal LM.

    The only model call is `_generate` (the integrator's feature cache may route it); everything else is
    prompting and parsing."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str, max_new_tokens: int = 128,
                 max_attributes: int = 16, batch_size: int = 8, device: str = "cpu") -> None:
        self.model, self.tokenizer, self.name, self.device = model, tokenizer, name, device
        self.max_new_tokens, self.max_attributes, self.batch_size = max_new_tokens, max_attributes, batch_size
        self.signature = self.signature_of(name, max_new_tokens, max_attributes)

    @staticmethod
    def signature_of(name: str, max_new_tokens: int, max_attributes: int) -> str:
        return f"llm:{name}|{PROMPT_VERSION}|greedy|new{max_new_tokens}|max{max_attributes}"

    @staticmethod
    def prompts(q: Query) -> tuple[str, str]:
        """(source prompt, target prompt) of one query."""
        source = q.source_caption or f"a scene to be edited with the instruction {q.instruction!r}"
        target = q.target_caption or q.instruction
        return SOURCE_PROMPT.format(text=source), TARGET_PROMPT.format(source=source, target=target)

    def _generate(self, prompts: list[str]) -> list[str]:
        """Greedy completions of `prompts` (the new text only)."""
        from benchmark.models.llm import generate_greedy

        return generate_greedy(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size, device=self.device)

    def extract(self, queries: Sequence[Query]) -> list[Attributes | str]:
        pairs = [self.prompts(q) for q in queries]
        texts = self._generate([p for pair in pairs for p in pair])
        out: list[Attributes | str] = []
        for i in range(len(queries)):
            parsed: list[tuple[str, ...]] = []
            try:
                for k in range(2):
                    parsed.append(parse_attribute_list(texts[2 * i + k], self.max_attributes))
            except AttributeParseError as err:
                which = ("source", "target")[len(parsed)]
                out.append(f"attribute extraction ({self.name}, {which} attributes): {err}")
                continue
            out.append(Attributes(*parsed))
        return out


# -- (c) attributes from a file -----------------------------------------------------------------------------

def _check_attr_list(value: Any, where: str, path: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise AttributeFileError(f"{path}: {where} must be a list of non-empty strings, not {value!r:.80}")
    return tuple(" ".join(v.split()) for v in value)


class FileExtractor:
    """Attributes made elsewhere (e.g. by GPT-4V, as in the paper), read from a JSON file:

        {"extractor": "<who made them>", "queries": {"<query id>": {"source": [...], "target": [...]}}}

    The whole file is validated when the extractor is built; its sha256 is part of the signature."""

    def __init__(self, path: str | Path, max_attributes: int | None = None, device: str = "cpu") -> None:
        import hashlib

        self.path = Path(path)
        try:
            raw = self.path.read_bytes()
            data = json.loads(raw)
        except OSError as err:
            raise AttributeFileError(f"{self.path}: cannot read the attribute file ({err.strerror})") from err
        except ValueError as err:
            raise AttributeFileError(f"{self.path}: not valid JSON ({err})") from err
        if not isinstance(data, dict) or not isinstance(data.get("extractor"), str) or \
                not isinstance(data.get("queries"), dict):
            raise AttributeFileError(f'{self.path}: want {{"extractor": "<name>", "queries": {{"<id>": '
                                     '{"source": [...], "target": [...]}}}} (docs/augclip.md)')
        self.table: dict[str, Attributes] = {}
        for qid, entry in data["queries"].items():
            if not isinstance(entry, dict):
                raise AttributeFileError(f"{self.path}: queries.{qid} must be an object with source and target")
            src = _check_attr_list(entry.get("source"), f"queries.{qid}.source", self.path)
            tgt = _check_attr_list(entry.get("target"), f"queries.{qid}.target", self.path)
            self.table[qid] = Attributes(src[:max_attributes], tgt[:max_attributes])
        self.signature = (f"file:{data['extractor']}|sha256:{hashlib.sha256(raw).hexdigest()[:16]}"
                          f"|max{max_attributes}")

    def extract(self, queries: Sequence[Query]) -> list[Attributes | str]:
        return [self.table.get(q.id, f"no attributes for query {q.id} in {self.path}") for q in queries]


# -- the cache --------------------------------------------------------------------------------------------

CACHE_FORMAT = "editmeter-augclip-attribute-cache"
CACHE_VERSION = 1


class AttributeCache:
    """JSON file {format, version, entries: {extractor signature: {query id: {query, source, target}}}}.

    Read (and validated) once when built; `put` merges new entries into the file under a lock and writes it
    atomically, so shards writing at once lose nothing and a kill never leaves half a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.entries = self._read()

    def _read(self) -> dict[str, dict[str, dict[str, Any]]]:
        if not self.path.exists():
            return {}
        fix = "delete it (it is rebuilt) or point attribute_cache at another file"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise AttributeFileError(f"{self.path}: unreadable attribute cache ({err}); {fix}") from err
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("version") != CACHE_VERSION:
            raise AttributeFileError(f"{self.path}: not an AugCLIP attribute cache (format {CACHE_FORMAT!r} "
                                     f"version {CACHE_VERSION}); {fix}")
        entries = data.get("entries")
        if not isinstance(entries, dict):
            raise AttributeFileError(f"{self.path}: `entries` must be an object; {fix}")
        for sig, table in entries.items():
            if not isinstance(table, dict):
                raise AttributeFileError(f"{self.path}: entries[{sig!r}] must be an object; {fix}")
            for qid, e in table.items():
                where = f"entries[{sig!r}][{qid!r}]"
                if not isinstance(e, dict) or not isinstance(e.get("query"), str):
                    raise AttributeFileError(f"{self.path}: {where} needs query, source and target; {fix}")
                _check_attr_list(e.get("source"), f"{where}.source", self.path)
                _check_attr_list(e.get("target"), f"{where}.target", self.path)
        return entries

    def get(self, signature: str, q: Query) -> Attributes | None:
        e = self.entries.get(signature, {}).get(q.id)
        if e is None or e["query"] != query_fingerprint(q):
            return None
        return Attributes(tuple(e["source"]), tuple(e["target"]))

    def put(self, signature: str, items: dict[Query, Attributes]) -> None:
        """Add `items` (query -> attributes) and write the file."""
        import fcntl

        from benchmark.io.fileio import atomic_write_text

        if not items:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.entries = self._read()  # what other writers added since
            table = self.entries.setdefault(signature, {})
            for q, a in items.items():
                table[q.id] = {"query": query_fingerprint(q), "source": list(a.source), "target": list(a.target)}
            atomic_write_text(self.path, json.dumps({"format": CACHE_FORMAT, "version": CACHE_VERSION,
                                                     "entries": self.entries}, indent=1, sort_keys=True) + "\n")

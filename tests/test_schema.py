"""Query schema v1: validation with file/line/reason, round trips, content hash."""

import dataclasses
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmark.io.types import EDIT_TYPES, REQUIRED_FIELDS, ObjectRef, Query
from benchmark.querysets.io import (
    QuerySetError,
    canonical_line,
    content_hash,
    file_digests,
    query_from_dict,
    query_to_dict,
    read_queries,
    write_queries,
)

GOOD = {"id": "q1", "image": "images/a.png", "edit_type": "obj_remove", "instruction": "Remove the cup.",
        "target": {"id": "3", "name": "cup", "mask": "masks/a/3.png", "bbox": [1, 2, 30, 40]}}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_demo_set_covers_every_hatie_type(demo_qs):
    from benchmark.querysets.demo import EDITVAL_DEMO_TYPES

    hatie = [q for q in demo_qs if q.edit_type not in EDITVAL_DEMO_TYPES]  # then 21 EditVal-type queries (appended)
    assert {q.edit_type for q in hatie} == {"obj_add", "obj_remove", "obj_rep", "attr_chg", "obj_resize", "bg_chg", "style_chg"}
    assert len(hatie) == 112 and len(demo_qs) == 133


def test_round_trip_of_demo_set(demo_qs, tmp_path):
    write_queries(tmp_path / "q.jsonl", demo_qs.queries)
    again = read_queries(tmp_path / "q.jsonl")
    assert tuple(again) == demo_qs.queries
    assert content_hash(again, file_digests(demo_qs.root, again, demo_qs.meta)) == demo_qs.hash


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps(GOOD | {"colour": "red"}), "unknown field(s) ['colour']"),
        (json.dumps(GOOD | {"id": "../../etc/passwd"}), "is not allowed"),
        (json.dumps(GOOD | {"id": "a/b"}), "is not allowed"),
        (json.dumps(GOOD | {"image": "../outside.png"}), "must not contain '..'"),
        (json.dumps(GOOD | {"image": "/abs.png"}), "must be relative"),
        (json.dumps(GOOD | {"edit_type": "obj_explode"}), "edit_type 'obj_explode' is not one of"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "target"}), "needs field(s) ['target']"),
        (json.dumps(GOOD | {"instruction": ""}), "needs an instruction"),
        (json.dumps(GOOD | {"target": GOOD["target"] | {"bbox": [30, 40, 1, 2]}}), "must be corners"),
        (json.dumps(GOOD | {"target": GOOD["target"] | {"area": 3}}), "unknown field(s) in target"),
        (json.dumps(GOOD | {"size_change": "bigger"}), "size_change must be"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_malformed_line_names_file_line_and_reason(tmp_path, line, reason):
    path = write_lines(tmp_path / "queries.jsonl", [json.dumps(GOOD | {"id": "q0"}), "", line])
    with pytest.raises(QuerySetError) as err:
        read_queries(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: "), msg
    assert reason in msg


def test_duplicate_ids_are_refused(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps(GOOD), json.dumps(GOOD)])
    with pytest.raises(QuerySetError, match=r":2: duplicate query id 'q1' \(first on line 1\)"):
        read_queries(path)


def test_every_type_has_required_fields_declared():
    assert set(REQUIRED_FIELDS) == set(EDIT_TYPES)


def test_content_hash_is_order_free_and_content_sensitive(demo_qs):
    qs = list(demo_qs.queries)
    files = file_digests(demo_qs.root, qs, demo_qs.meta)
    assert len(files) == len(({q.image for q in qs} | {q.edit_mask for q in qs} | {q.target_image for q in qs}
                              | {o.mask for q in qs for o in (q.target, q.anchor, *q.editable_objects) if o}) - {None})
    assert content_hash(qs[::-1], dict(reversed(files.items()))) == demo_qs.hash
    changed = [dataclasses.replace(qs[0], instruction=qs[0].instruction + "!")] + qs[1:]
    assert content_hash(changed, files) != demo_qs.hash
    one_file_changed = files | {qs[0].image: "0" * 64}
    assert content_hash(qs, one_file_changed) != demo_qs.hash


def test_object_class_grouping():
    add = query_from_dict({"id": "a", "image": "i.png", "edit_type": "obj_add", "instruction": "x", "new_class": "cup",
                           "relation": "on", "anchor": {"id": "1", "name": "table"}})
    rep = query_from_dict({"id": "b", "image": "i.png", "edit_type": "obj_rep", "instruction": "x", "new_class": "cup",
                           "target": {"id": "1", "name": "dog"}})
    style = query_from_dict({"id": "c", "image": "i.png", "edit_type": "style_chg", "instruction": "x", "style": "ink"})
    assert (add.object_class, rep.object_class, style.object_class) == ("cup", "dog", "whole image")


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1,
                max_size=30)


@given(instruction=texts, caption=texts, x0=st.integers(0, 500), w=st.integers(0, 500), name=texts)
def test_round_trip_property(instruction, caption, x0, w, name):
    q = Query(id="q-1", image="img/x.png", edit_type="attr_chg", instruction=instruction, source_caption=caption,
              target=ObjectRef(id="7", name=name, bbox=(x0, 0.0, x0 + w, 3.0)), attribute_after="red")
    line = canonical_line(q)
    assert query_from_dict(json.loads(line)) == q
    assert query_to_dict(q)["target"]["bbox"] == [x0, 0.0, x0 + w, 3.0]


names = st.text(alphabet="abcXYZ019_- é", min_size=1, max_size=20)  # path-safe: no '/', '\\' or '..' to refuse


@given(data=st.data(), field=st.sampled_from(["instruction", "source_caption", "target.name", "target.id", "image",
                                              "target.mask"]))
def test_a_nul_character_in_any_text_field_is_refused_naming_the_field(data, field):
    """A NUL (`\\u0000` in the file) is refused wherever the text goes: C libraries, tokenizers' native code and
    terminals end the text there; without it the same record is accepted."""
    kind = names if field in ("image", "target.mask") else texts
    prefix, suffix = data.draw(kind), data.draw(kind)

    def record(value):
        if "." in field:
            outer, inner = field.split(".")
            return GOOD | {outer: GOOD[outer] | {inner: value}}
        return GOOD | {field: value}

    query_from_dict(json.loads(json.dumps(record(prefix + suffix))))
    line = json.dumps(record(prefix + "\x00" + suffix))
    assert "\\u0000" in line
    with pytest.raises(ValueError, match=rf"{re.escape(field)} .* holds a NUL character .* at character "
                                         rf"{len(prefix) + 1}:"):
        query_from_dict(json.loads(line))


@pytest.mark.parametrize("end", ["\n", "\r\n", ""])
@given(pad=st.integers(0, 40), ch=st.integers(0, 0x1F))
def test_json_errors_give_the_column_in_the_line_and_name_a_control_character(end, pad, ch):
    """Hand-worked positions: a raw control character at 0-based index i is at column i + 1 and is named (json's
    message ends in a dangling "at"); a record cut short is at the end of its line whatever ends the line (not at
    column 1 of the next); extra data after a record is at its own column."""
    from benchmark.querysets.io import parse_json_line

    head = '{"id": "' + "a" * pad
    line = head + chr(ch) + '"}'
    with pytest.raises(QuerySetError) as err:
        parse_json_line((line + end).encode(), "q.jsonl:3")
    assert str(err.value) == (f"q.jsonl:3: not valid JSON: Invalid control character U+{ch:04X} in a string at "
                              f"column {len(head) + 1}; a JSON string must write it escaped (\\u{ch:04x})")
    with pytest.raises(QuerySetError) as err:
        parse_json_line((head + '"' + end).encode(), "q.jsonl:3")
    assert str(err.value) == "q.jsonl:3: not valid JSON: Expecting ',' delimiter at the end of the line"
    with pytest.raises(QuerySetError) as err:
        parse_json_line((head + '"} x' + end).encode(), "q.jsonl:3")
    assert str(err.value) == f"q.jsonl:3: not valid JSON: Extra data at column {len(head) + 4}"


def test_a_named_first_n_subset_is_a_set_of_its_own():
    from conftest import ROOT

    from benchmark.querysets.io import load_queryset

    full = load_queryset(ROOT / "datasets" / "demo")
    mini = load_queryset(ROOT / "datasets" / "demo", name="demo_mini", first=14)
    assert mini.queries == full.queries[:14] and mini.name == "demo_mini"
    assert mini.hash != full.hash
    assert full.subset(14).hash == full.hash  # a limit is a partial run of the whole set, same hash
    for bad in (0, -1, True, len(full) + 1):
        with pytest.raises(QuerySetError, match="first="):
            load_queryset(ROOT / "datasets" / "demo", name="x", first=bad)
    with pytest.raises(QuerySetError, match="give it a name"):
        load_queryset(ROOT / "datasets" / "demo", first=3)


def test_a_per_source_subset_keeps_the_first_n_queries_of_each_source():
    from collections import Counter

    from conftest import ROOT

    from benchmark.querysets.io import load_queryset

    full = load_queryset(ROOT / "datasets" / "demo")
    three = load_queryset(ROOT / "datasets" / "demo", name="demo_per_source_3", per_source=3)
    per_image = Counter(q.image for q in full.queries)
    assert Counter(q.image for q in three.queries) == {im: min(n, 3) for im, n in per_image.items()}
    # the first three of each source, in the file's order
    firsts = [q.id for q in full.queries if [x.id for x in full.queries if x.image == q.image].index(q.id) < 3]
    assert [q.id for q in three.queries] == firsts
    assert three.hash != full.hash and three.name == "demo_per_source_3"
    with pytest.raises(QuerySetError, match="give it a name"):
        load_queryset(ROOT / "datasets" / "demo", per_source=3)
    with pytest.raises(QuerySetError, match="positive"):
        load_queryset(ROOT / "datasets" / "demo", name="x", per_source=0)

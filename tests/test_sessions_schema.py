"""Multi-turn sessions in the query schema: both fields or neither, turns 1..n per session."""
import json

import pytest

from benchmark.querysets.io import QuerySetError, query_from_dict, query_to_dict, read_queries

BASE = {"id": "a", "image": "a.png", "edit_type": "free_form", "instruction": "x"}


def test_session_fields_round_trip_and_stay_off_disk_when_unset():
    q = query_from_dict({**BASE, "session": "s1", "turn": 1})
    assert query_to_dict(q)["turn"] == 1
    assert "session" not in query_to_dict(query_from_dict(BASE))


@pytest.mark.parametrize("bad", [{"session": "s1"}, {"turn": 1}, {"session": "s1", "turn": 0},
                                 {"session": "s1", "turn": True}, {"session": "../x", "turn": 1}])
def test_bad_session_fields_are_refused(bad):
    with pytest.raises(ValueError):
        query_from_dict({**BASE, **bad})


def test_a_session_with_a_gap_is_refused(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text("\n".join(json.dumps({**BASE, "id": f"q{i}", "session": "s", "turn": t})
                           for i, t in enumerate([1, 3])))
    with pytest.raises(QuerySetError, match=r"turns \[1, 3\]"):
        read_queries(p)

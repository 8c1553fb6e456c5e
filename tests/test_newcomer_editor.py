"""What a new editor's author meets first: a YAML the class cannot take is an error naming the file, and a strength
that the tiny profile's 3 steps round away is a warning that says which strengths give identical edits."""

import warnings

import numpy as np
import pytest
from conftest import run_demo

from benchmark.editing.base import CoarseSettingWarning, coarse_strengths
from benchmark.plan.config import SettingError

pytestmark = pytest.mark.usefixtures("single_thread_torch")
FAST = ("metrics=basic", "progress=false", "stages=[edit]", "preflight=false")


@pytest.mark.parametrize(("drop", "message"), [
    ("_target_", r"configs/editor/overedit\.yaml has no `_target_` key.*_target_: editors\.<name>\.<Class>"),
    ("noise_std", r"configs/editor/overedit\.yaml: editors\.overedit\.OverEditEditor does not take its keys as "
                  r"written \(missing a required argument: 'noise_std'\)"),
])
def test_a_yaml_the_class_cannot_take_is_an_error_naming_the_file_and_the_key(tmp_path, capsys, drop, message):
    from benchmark.commands.run import main as run_main

    with pytest.raises(SettingError, match=message):
        run_demo(tmp_path / "r", "overedit", *FAST, f"~editor.{drop}")
    assert not (tmp_path / "r" / "runs").exists()  # refused before any work
    with pytest.raises(SystemExit) as exited:  # the command: exit status 1 with the message, no traceback
        run_main(["editor=overedit", f"~editor.{drop}", "queryset=demo", "profile=tiny",
                  f"paths.results={tmp_path / 'r'}", *FAST])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[editmeter] error: configs/editor/overedit.yaml" in err


def test_an_unknown_key_and_an_unimportable_target_name_the_file(tmp_path):
    with pytest.raises(SettingError, match=r"overedit\.yaml: .*got an unexpected keyword argument 'noise_sd'"):
        run_demo(tmp_path / "r", "overedit", *FAST, "+editor.noise_sd=3")
    with pytest.raises(SettingError, match=r"overedit\.yaml: `_target_: editors\.overedit\.OverEdit` cannot be "
                                           r"imported"):
        run_demo(tmp_path / "r", "overedit", *FAST, "editor._target_=editors.overedit.OverEdit")


@pytest.mark.parametrize(("steps", "strength", "lo", "hi", "n"), [
    (3, 0.75, "0.667", "1", 2),   # 3 x 0.75 = 2.25 -> 2 steps; 2/3 <= s < 3/3
    (3, 0.9, "0.667", "1", 2),    # 3 x 0.9 = 2.7 -> 2: the same steps as 0.75
    (3, 0.5, "0.333", "0.667", 1),
    (4, 0.3, "0.25", "0.5", 1),   # 1.2 -> 1
    (3, 0.2, "0", "0.333", 0),    # 0.6 -> 0: nothing denoised
])
def test_coarse_strengths_name_the_interval_worked_out_by_hand(steps, strength, lo, hi, n):
    (note,) = coarse_strengths({"name": "mine", "steps": steps, "strength": strength, "guidance_scale": 7.5})
    assert f"mine: strength={strength:g} runs {n} of its {steps} denoising steps" in note
    assert f"every strength in [{lo}, {hi}) does" in note and ("the edit is the source" in note) == (n == 0)


def test_fine_or_exact_strengths_and_other_keys_give_no_warning():
    assert coarse_strengths({"steps": 50, "strength": 0.75}) == []  # 1/50: neighbours 0.02 apart
    assert coarse_strengths({"steps": 10, "strength": 0.75}) == []  # 1/10: at the threshold
    assert coarse_strengths({"steps": 3, "strength": 1.0}) == []    # every step: no other strength gives it
    assert coarse_strengths({"steps": 3, "guidance_scale": 0.5, "eta": 0.5}) == []
    keys = [n.split("=")[0].split(": ")[1] for n in coarse_strengths(
        {"name": "diffedit", "steps": 3, "inpaint_strength": 0.8, "mask_encode_strength": 0.5})]
    assert keys == ["inpaint_strength", "mask_encode_strength"]


def test_tiny_sdedit_strengths_the_warning_groups_give_identical_edits(tmp_path, monkeypatch, demo_qs):
    """The newcomer's case: strength 0.9 at the tiny profile's 3 steps. The run warns that [0.667, 1) all run 2 steps;
    its editor gives byte-identical edits at 0.75 (inside) and other ones at 0.5 (outside: 1 step)."""
    import benchmark.plan.config
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    built = []
    build = benchmark.plan.config.build_editor
    monkeypatch.setattr(benchmark.plan.config, "build_editor", lambda cfg: built.append(build(cfg)) or built[-1])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_demo(tmp_path / "r", "sdedit", *FAST, "limit=1", "editor.strength=0.9")
    notes = [str(w.message) for w in seen if w.category is CoarseSettingWarning]
    assert len(notes) == 1 and "strength=0.9 runs 2 of its 3 denoising steps" in notes[0] and "[0.667, 1)" in notes[0]
    (editor,) = built
    queries = [q for q in demo_qs.queries if q.target_caption][:2]
    images, seeds = [load_rgb(demo_qs.path(q.image)) for q in queries], [query_seed(0, q.id) for q in queries]
    edits = {}
    for strength in (0.9, 0.75, 0.5):
        editor.strength = strength
        edits[strength] = [np.asarray(im) for im in editor.edit(queries, images, seeds=seeds)]
    assert all(np.array_equal(a, b) for a, b in zip(edits[0.9], edits[0.75], strict=True))
    assert not any(np.array_equal(a, b) for a, b in zip(edits[0.9], edits[0.5], strict=True))

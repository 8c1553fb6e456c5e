"""An edit's key follows the pixels (benchmark.plan.code_identity, docs/architecture.md "What enters an edit's key"):
every module the walk reaches is classified; moving a module, adding a Query field, a method of the Editor base class
for another purpose, a comment or a docstring change no key; a changed line of code that the edit runs changes the
keys of exactly the editors that run it."""

import ast
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from benchmark.plan import code_identity as ci

EDITOR_CONFIGS = sorted((ROOT / "configs" / "editor").glob("*.yaml"))
TARGETS = {p.stem: yaml.safe_load(p.read_text())["_target_"] for p in EDITOR_CONFIGS}


@pytest.fixture(scope="module")
def today() -> dict[str, str]:
    """Every editor's code identity in this checkout."""
    return _keys()


def _copy(tmp_path: Path) -> Path:
    for pkg in ("benchmark", "editors"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _keys(root: Path | None = None, multi_turn: bool = False) -> dict[str, str]:
    index = ci.CodeIndex(root)
    return {name: ci.code_identity(t, multi_turn=multi_turn, index=index).digest for name, t in TARGETS.items()}


def _insert(path: Path, name: str, statement: str) -> None:
    """Put `statement` first in the body of top-level function `name`, or of method `Class.method`."""
    lines = path.read_text().splitlines(keepends=True)
    cls, _, method = name.partition(".")
    node = next(n for n in ast.parse("".join(lines)).body if getattr(n, "name", None) == cls)
    if method:
        node = next(n for n in node.body if getattr(n, "name", None) == method)
    first = node.body[0]
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    path.write_text("".join(lines))


def test_there_is_one_target_per_editor_config():
    assert len(TARGETS) >= 18 and all(isinstance(t, str) and t.startswith("editors.") for t in TARGETS.values())


@pytest.mark.parametrize("multi_turn", [False, True])
def test_every_module_the_walk_reaches_is_classified(multi_turn):
    index = ci.CodeIndex()
    for name, target in TARGETS.items():
        identity = ci.code_identity(target, multi_turn=multi_turn, index=index)
        assert not identity.unclassified, (
            f"{name}: the code that makes its pixels imports {sorted(identity.unclassified)}, which "
            "benchmark.plan.code_identity classifies nowhere: add each to PIXEL_MODULES (it can change pixels) or to "
            "NO_PIXEL_MODULES with the reason it cannot")
        assert not identity.unresolved, f"{name}: EDIT_ROOTS name nothing: {identity.unresolved}"
        assert f"editors.{target.split('.')[1]}" in identity.modules


def test_the_classification_names_existing_modules_only():
    index = ci.CodeIndex()
    stale = [m for m in [*ci.PIXEL_MODULES, *ci.NO_PIXEL_MODULES] if index.module(m) is None]
    assert not stale, f"classified modules that do not exist (moved or removed? update benchmark.plan.code_identity): {stale}"
    assert not set(ci.PIXEL_MODULES) & set(ci.NO_PIXEL_MODULES)


def test_an_unclassified_module_in_the_pixel_path_is_reported(tmp_path):
    root = _copy(tmp_path)
    (root / "benchmark" / "editing" / "fresh_helper.py").write_text("def shade(x):\n    return x\n")
    path = root / "editors" / "identity.py"
    path.write_text(path.read_text().replace("from benchmark.editing.editor import", "from benchmark.editing.fresh_helper "
                                             "import shade\nfrom benchmark.editing.editor import", 1))
    _insert(path, "IdentityEditor.edit", "images = [shade(im) for im in images]")
    identity = ci.code_identity(TARGETS["identity"], index=ci.CodeIndex(root))
    assert set(identity.unclassified) == {"benchmark.editing.fresh_helper"}
    assert "benchmark.editing.fresh_helper" in identity.modules  # followed meanwhile: the safe side


def test_moving_a_module_changes_no_key(tmp_path, today):
    before = today
    root = _copy(tmp_path)
    (root / "benchmark" / "editing" / "inversion.py").rename(root / "benchmark" / "models" / "inversion.py")
    for path in [*root.rglob("*.py")]:
        text = path.read_text()
        moved = (text.replace("benchmark.editing.inversion", "benchmark.models.inversion")
                 .replace("from benchmark.editing import inversion", "from benchmark.models import inversion"))
        if moved != text:
            path.write_text(moved)
    after = _keys(root)
    assert after == before
    p2p = ci.code_identity(TARGETS["p2p"], index=ci.CodeIndex(root))
    assert "benchmark.models.inversion" in p2p.modules  # it was followed at its new place


def test_adding_a_query_field_or_an_editor_method_for_another_purpose_changes_no_key(tmp_path, today):
    before = today
    root = _copy(tmp_path)
    types = root / "benchmark" / "io" / "types.py"
    text = types.read_text()
    assert "    turn: int | None = None\n" in text
    types.write_text(text.replace("    turn: int | None = None\n",
                                  "    turn: int | None = None\n    difficulty: str | None = None\n", 1))
    editor = root / "benchmark" / "editing" / "editor.py"
    editor.write_text(editor.read_text().replace(
        "    def missing(self", "    def describe(self) -> str:\n        return type(self).__name__\n\n"
        "    def missing(self", 1))
    docs = root / "benchmark" / "editing" / "inversion.py"
    docs.write_text("# a comment\n" + docs.read_text().replace('"""', '"""Reworded. ', 1))
    assert _keys(root) == before


def test_a_changed_line_the_edit_runs_changes_the_keys_of_the_editors_that_run_it(tmp_path, today):
    before = today
    root = _copy(tmp_path)
    index = ci.CodeIndex()  # this checkout's modules, parsed once for every editor below
    entered = ci.code_identity(TARGETS["p2p"], index=index).digests
    name = next(k.split(":")[1] for k in sorted(entered) if k.startswith("benchmark.editing.inversion:")
                and not k.endswith(">") and "." not in k.split(":")[1])
    _insert(root / "benchmark" / "editing" / "inversion.py", name, "_scale = 1.0")
    after = _keys(root)
    users = {e for e, t in TARGETS.items()
             if any(k == f"benchmark.editing.inversion:{name}" for k in ci.code_identity(t, index=index).digests)}
    assert "p2p" in users
    assert {e for e in TARGETS if after[e] != before[e]} == users
    assert after["identity"] == before["identity"] and after["ip2p"] == before["ip2p"]


def test_the_edit_path_of_the_editor_base_class_enters_every_key(tmp_path, today):
    before = today
    root = _copy(tmp_path)
    _insert(root / "benchmark" / "editing" / "editor.py", "query_seed", "seed = int(seed) + 0")  # the per-query noise
    after = _keys(root)
    assert all(after[e] != before[e] for e in TARGETS)


def test_the_png_level_and_the_edit_format_enter_the_key(tmp_path, monkeypatch):
    from benchmark.plan.config import editor_signature

    cfg = {"_target_": TARGETS["identity"]}
    sig = editor_signature(cfg, {}, 0, "tiny")
    root = _copy(tmp_path)
    edit = root / "benchmark" / "stages" / "edit.py"
    text = edit.read_text()
    assert "EDIT_PNG_LEVEL = 1\n" in text
    edit.write_text(text.replace("EDIT_PNG_LEVEL = 1\n", "EDIT_PNG_LEVEL = 6\n"))
    assert ci.code_identity(cfg["_target_"], index=ci.CodeIndex(root)).digest != \
        ci.code_identity(cfg["_target_"]).digest
    monkeypatch.setattr(ci, "EDIT_FORMAT", ci.EDIT_FORMAT + 1)
    assert editor_signature(cfg, {}, 0, "tiny") != sig


# -- metric signatures: the same rule for the code that computes scores -------------------------------------------

METRIC_CONFIGS = sorted((ROOT / "configs" / "metrics").rglob("*.yaml"))


def _metric_keys(root: Path | None = None) -> dict[str, str]:
    from benchmark.plan.config import config_targets

    index = ci.CodeIndex(root)
    return {str(p.relative_to(ROOT)): ci.metric_code_identity(config_targets(yaml.safe_load(p.read_text())),
                                                              index=index).digest for p in METRIC_CONFIGS}


def test_every_module_a_metrics_code_reaches_is_classified():
    from benchmark.plan.config import config_targets

    index = ci.CodeIndex()
    assert len(METRIC_CONFIGS) >= 25
    for path in METRIC_CONFIGS:
        identity = ci.metric_code_identity(config_targets(yaml.safe_load(path.read_text())), index=index)
        assert not identity.unclassified, (
            f"{path.name}: the code that computes its values imports {sorted(identity.unclassified)}, which "
            "benchmark.plan.code_identity classifies nowhere: add each to SCORE_MODULES (it can change a score) or to "
            "NO_SCORE_MODULES with the reason it cannot")
        assert not identity.unresolved, f"{path.name}: targets or SCORE_ROOTS that name nothing: {identity.unresolved}"
    stale = [m for m in [*ci.SCORE_MODULES, *ci.NO_SCORE_MODULES] if index.module(m) is None]
    assert not stale, f"classified modules that do not exist (moved or removed?): {stale}"


def test_a_metrics_code_moved_changes_no_metric_signature_and_a_changed_line_changes_only_its_users(tmp_path):
    before = _metric_keys()
    assert len(set(before.values())) >= 15  # the suites' codes differ
    root = _copy(tmp_path)
    # move: the score stage's resizing helper and HATIE's engine, to other folders under other names
    (root / "benchmark" / "metrics" / "sizes.py").rename(root / "benchmark" / "image_sizes.py")
    (root / "benchmark" / "metrics" / "hatie" / "engine.py").rename(root / "benchmark" / "metrics" / "hatie_engine.py")
    for path in root.rglob("*.py"):
        text = path.read_text()
        moved = (text.replace("benchmark.metrics.sizes", "benchmark.image_sizes")
                 .replace("benchmark.metrics.hatie.engine", "benchmark.metrics.hatie_engine")
                 .replace("from benchmark.metrics.hatie import engine", "from benchmark.metrics import hatie_engine as engine")
                 .replace("from .engine import", "from ..hatie_engine import"))
        if moved != text:
            path.write_text(moved)
    assert _metric_keys(root) == before
    # a changed line in a definition HATIE's scores come from: the HATIE sets change, the pixel metrics do not
    hatie = ci.metric_code_identity(["benchmark.metrics.hatie.suite.HatieSuite"], index=ci.CodeIndex(root))
    name = next(k.split(":")[1] for k in sorted(hatie.digests) if k.startswith("benchmark.metrics.hatie_engine:")
                and not k.endswith(">") and "." not in k.split(":")[1] and " " not in k.split(":")[1])
    _insert(root / "benchmark" / "metrics" / "hatie_engine.py", name, "_unused = 0")
    after = _metric_keys(root)
    changed = {k for k in before if after[k] != before[k]}
    assert {"configs/metrics/hatie.yaml", "configs/metrics/hatie_oracle.yaml"} <= changed
    assert "configs/metrics/basic.yaml" not in changed and "configs/metrics/editval.yaml" not in changed


def test_a_metric_signature_holds_its_code(monkeypatch):
    from benchmark.metrics.pixel import PixelMetric
    from benchmark.plan import config

    cfg = {"l1": {"_target_": "benchmark.metrics.pixel.PixelMetric", "statistic": "l1"}}
    infos = {"l1": PixelMetric(statistic="l1").info}
    sig = config.metric_signature(cfg, infos)
    monkeypatch.setattr(config, "_METRIC_CODE", {tuple(config.config_targets(cfg)): "other code"})
    assert config.metric_signature(cfg, infos) != sig


def test_imports_reordered_by_the_import_sorter_change_no_key(tmp_path, today):
    """What a move leaves behind in code: the sorter reorders the imports of the new module paths."""
    root = _copy(tmp_path)
    demo = root / "benchmark" / "querysets" / "demo.py"  # the oracle renders with it
    text = demo.read_text()
    block = ("    from benchmark.io.fileio import atomic_write_text\n"
             "    from benchmark.io.imageio import save_mask, save_png\n")
    assert block in text
    demo.write_text(text.replace(block, "".join(reversed(block.splitlines(keepends=True)))))
    assert _keys(root) == today

"""A run reads top to bottom (benchmark.plan.resolved, docs/architecture.md "How a run resolves its components"): its
query set, shards and components are resolved once, in the plan layer, and the preflight, the budget and the stages
take them as values; none of them builds, imports or reads a component again."""

import ast
from collections import Counter

import pytest
from conftest import ROOT

import benchmark.plan.config as config
import benchmark.querysets.io as qio
from benchmark.commands.run import compose, execute
from benchmark.plan.config import plan_run

DEMO = ("queryset=demo_mini", "profile=tiny", "progress=false", "aggregate.bootstrap_resamples=200")
# what resolves components: Hydra's builders, and the config module's wrappers of them
RESOLVERS = {"instantiate", "locate_class", "read_yaml", "build_editor", "get_class", "get_object", "get_method"}
TAKE_VALUES = ("benchmark/plan/preflight.py", "benchmark/plan/budget.py", "benchmark/plan/judge_budget.py")


def resolving_names(path):
    """The resolver names a module imports or calls (`from benchmark.plan.config import instantiate`,
    `config.locate_class(...)`, `hydra.utils.instantiate`), and the Hydra / omegaconf modules it imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names if a.name in RESOLVERS}
            if node.module and node.module.split(".")[0] in ("hydra", "omegaconf"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in ("hydra", "omegaconf")}
        elif isinstance(node, ast.Attribute) and node.attr in RESOLVERS:
            found.add(node.attr)
    return found


@pytest.mark.parametrize("module", TAKE_VALUES)
def test_preflight_and_budget_resolve_nothing_themselves(module):
    found = resolving_names(ROOT / module)
    assert not found, (f"{module} resolves components itself ({sorted(found)}): resolve them once in "
                       "benchmark.plan.resolved and pass the values down (docs/architecture.md)")


def test_the_check_sees_a_resolver(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(node):\n    from benchmark.plan.config import instantiate\n    return instantiate(node)\n")
    assert resolving_names(bad) == {"instantiate"}
    bad.write_text("def f(node):\n    from benchmark.plan import config\n    return config.locate_class(node)\n")
    assert resolving_names(bad) == {"locate_class"}


def test_a_run_loads_its_query_set_and_builds_each_metric_once(tmp_path, monkeypatch):
    """A whole run (preflight and budget on, every stage): the query set loaded once, each metric built once, the
    editor's class imported once to read its declarations and built once, the cost table read once, the editor's
    code digest (the budget's match of earlier edits, the run folder's key) computed once."""
    calls, built = Counter(), Counter()

    def counting(name, fn, key=None):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            if key is not None:
                built[key(*args, **kwargs)] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(qio, "load_queryset", counting("load_queryset", qio.load_queryset))
    monkeypatch.setattr(config, "instantiate", counting("instantiate", config.instantiate,
                                                        lambda spec, at="": at))
    for name in ("locate_class", "read_yaml", "build_editor", "editor_code_digest"):
        monkeypatch.setattr(config, name, counting(name, getattr(config, name)))
    cfg, choices = compose([*DEMO, "editor=identity", "metrics=basic", f"paths.results={tmp_path / 'results'}"])
    summary = execute(plan_run(cfg, choices["editor"]))
    assert summary["edit"].computed == 14 and summary["score"].computed == 14
    n_metrics = len(cfg.metrics)
    assert calls == {"load_queryset": 1, "instantiate": 2 + n_metrics, "locate_class": 1, "read_yaml": 1,
                     "build_editor": 1, "editor_code_digest": 1}, calls
    assert built == Counter({"queryset": 1, "editor": 1, **{f"metrics.{m}": 1 for m in cfg.metrics}}), built


def test_an_editor_module_that_does_not_parse_stops_the_run_with_one_line_naming_it(tmp_path, monkeypatch):
    """Its code digest is resolved first (benchmark.plan.code_identity.parse_source): the run stops there with the
    file, its line and the parser's message, as a RunError (one line, no traceback), before a preflight or a run
    folder. The module lies outside the checkout (a plug-in on the path); a project module goes the same way."""
    from benchmark.io.errors import RunError
    from benchmark.plan.code_identity import CodeIndex, UnparsableCode, code_identity

    (tmp_path / "plugin_with_a_typo.py").write_text("class Broken:\n    def edit(self)\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    results = tmp_path / "results"
    cfg, choices = compose([*DEMO, "editor=identity", "editor._target_=plugin_with_a_typo.Broken", "metrics=basic",
                            f"paths.results={results}"])
    with pytest.raises(UnparsableCode) as err:
        execute(plan_run(cfg, choices["editor"]))
    assert isinstance(err.value, RunError)
    assert str(err.value).startswith(f"{tmp_path / 'plugin_with_a_typo.py'}, line 2: ")
    assert "SyntaxError" in str(err.value) and "\n" not in str(err.value)
    assert not (results / "runs").exists()
    (tmp_path / "editors").mkdir()
    (tmp_path / "editors" / "typo.py").write_text("x = (\n")
    with pytest.raises(UnparsableCode, match=r"typo\.py, line 1: "):
        code_identity("editors.typo.Editor", index=CodeIndex(tmp_path))

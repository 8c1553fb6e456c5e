"""No import circles among benchmark/ and editors/ modules, and every module imports only its own layer or the
layers below it (docs/architecture.md): entry points, plan, stages, suites and editors, models, I/O.

The graph counts every import statement, top-level or inside a function (heavy libraries and some
siblings are imported lazily; a circle through a lazy import is still a circle in the design)."""

import ast

import pytest
from conftest import ROOT

PACKAGE = "benchmark"
PACKAGES = (PACKAGE, "editors")


def _module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources(root=ROOT):
    """{module name: (path, is_package)} for every benchmark/**/*.py and editors/**/*.py."""
    return {_module_name(p, root): (p, p.name == "__init__.py")
            for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}


def _imported(name, is_package, tree, modules):
    """The benchmark modules one module's import statements name (submodules named by `from pkg import x` count)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            subs = [f"{origin}.{alias.name}" for alias in node.names if f"{origin}.{alias.name}" in modules]
            names_only = len(subs) < len(node.names)
            targets = subs + ([origin] if names_only or not subs and origin in modules else [])
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(root=ROOT):
    sources = _sources(root)
    return {name: _imported(name, is_pkg, ast.parse(path.read_text(encoding="utf-8"), str(path)), sources)
            for name, (path, is_pkg) in sources.items()}


def import_cycles(graph):
    """The strongly connected components with more than one module (Tarjan), each sorted, in sorted order."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # iterative Tarjan: (node, iterator over its successors)
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _describe(cycle, graph):
    members = set(cycle)
    edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph[a] & members)]
    return f"  {{{', '.join(cycle)}}}\n" + "\n".join(f"      {e}" for e in edges)


def test_no_import_cycles_among_benchmark_modules():
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, ("import circles among benchmark/ and editors/ modules (move the shared code below both sides):\n"
                        + "\n".join(_describe(c, graph) for c in cycles))


def test_graph_sees_lazy_relative_and_submodule_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from benchmark.b import g\n    return g\n")
    (pkg / "b.py").write_text("from .sub import c\ndef g():\n    pass\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    (pkg / "d.py").write_text("import benchmark.sub.c\nfrom benchmark import sub\n")
    graph = import_graph(tmp_path)
    assert graph["benchmark.a"] == {"benchmark.b"}
    assert graph["benchmark.b"] == {"benchmark.sub.c"}
    assert graph["benchmark.sub.c"] == {"benchmark.a"}
    assert graph["benchmark.d"] == {"benchmark.sub.c", "benchmark.sub"}
    assert import_cycles(graph) == [["benchmark.a", "benchmark.b", "benchmark.sub.c"]]
    (pkg / "sub" / "c.py").write_text("x = 1\n")
    assert import_cycles(import_graph(tmp_path)) == []


# -- layers ----------------------------------------------------------------------------------------------------------
# docs/architecture.md, top to bottom: a module's layer is the folder it lives in. A module may import its own layer
# and the layers below, never one above. benchmark/ itself holds only the package's face (`benchmark/__init__.py`).
LAYERS = (
    ("commands", ("benchmark/commands",)),
    ("plan", ("benchmark/plan",)),
    ("stages and result tables", ("benchmark/stages", "benchmark/tables")),
    ("suites and editors", ("benchmark/metrics", "benchmark/editing", "editors")),
    ("models", ("benchmark/models",)),
    ("I/O", ("benchmark/io", "benchmark/querysets")),
)
FACE = "benchmark"  # the package's face: its version string, in the lowest layer


def layer_of(module):
    """(index, name) of `module`'s layer (0 = commands), from the folder it lives in; None for a module in no layer's
    folder (a new top-level module of benchmark/, or a new folder: give it a layer here and in the doc)."""
    if module == FACE:
        return len(LAYERS) - 1, LAYERS[-1][0]
    parts = module.split(".")
    folder = "/".join(parts[:1] if parts[0] == "editors" else parts[:2])
    for index, (name, folders) in enumerate(LAYERS):
        if folder in folders:
            return index, name
    return None


# Only these read the configuration object with omegaconf / Hydra: the entry points, and the module that composes
# the config and builds the plan from it.
CONFIG_READERS = ("benchmark.plan.config",)
# Hydra used below the entry points, with why it stays (none now: edit keys hash definitions by content, so nothing
# is kept in place for their sake any more)
HYDRA_BELOW: dict[str, str] = {}
CONFIG_LIBRARIES = ("omegaconf", "hydra", "hydra_plugins")


def upward_imports(graph):
    """['a (layer) -> b (layer above)'] for every import of a layer above the importer's own."""
    out = []
    for module in sorted(graph):
        mine = layer_of(module)
        for target in sorted(graph[module]):
            theirs = layer_of(target)
            if mine and theirs and theirs[0] < mine[0]:
                out.append(f"{module} ({mine[1]}) -> {target} ({theirs[1]})")
    return out


def config_imports(root=ROOT):
    """{module: sorted omegaconf / Hydra modules it imports} for every module that imports one."""
    found = {}
    for name, (path, _) in _sources(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
        hits = sorted(n for n in names if n.split(".")[0] in CONFIG_LIBRARIES)
        if hits:
            found[name] = hits
    return found


def test_every_module_has_a_layer():
    missing = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not missing, (f"modules in no layer's folder: {missing}; put each in the folder of its layer "
                         "(docs/architecture.md, \"Where a new module goes\"), or give a new folder a layer in LAYERS here "
                         "and in the doc")


def test_a_misplaced_module_has_no_layer_and_every_folder_is_a_layer(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "helpers.py").write_text("")  # a new module dropped at the top of benchmark/
    (tmp_path / PACKAGE / "io").mkdir()
    (tmp_path / PACKAGE / "io" / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "io" / "helpers.py").write_text("")
    graph = import_graph(tmp_path)
    assert layer_of("benchmark.helpers") is None and layer_of("benchmark.io.helpers")[1] == "I/O"
    assert sorted(m for m in graph if layer_of(m) is None) == ["benchmark.helpers"]
    folders = {"/".join(p.relative_to(ROOT).parts) for p in (ROOT / PACKAGE).iterdir()
               if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == {f for _, fs in LAYERS for f in fs if f.startswith(PACKAGE + "/")}


def test_no_module_imports_a_layer_above_its_own():
    bad = upward_imports(import_graph())
    assert not bad, ("imports of a layer above the importer's (docs/architecture.md; pass the value down instead, or "
                     "move the shared code down):\n  " + "\n  ".join(bad))


def test_only_the_entry_points_and_the_config_module_import_omegaconf_or_hydra():
    found = config_imports()
    bad = {m: libs for m, libs in found.items()
           if layer_of(m)[0] != 0 and m not in CONFIG_READERS
           and not (m in HYDRA_BELOW and all(lib.split(".")[0] == "hydra" for lib in libs))}
    assert not bad, (f"omegaconf / Hydra imported below the entry points: {bad}. Read the value into the run plan "
                     "(benchmark.plan.config.read_plan, benchmark.plan.run_plan.RunPlan) and pass it down")
    assert set(HYDRA_BELOW) <= set(found), "a HYDRA_BELOW entry no longer imports Hydra: remove it"


def test_no_config_object_parameter_below_the_entry_points():
    """Below the entry points (and the config module), no function takes the config object: no parameter named
    `cfg` or `*_cfg` typed Any or untyped."""
    bad = []
    for name, (path, _) in _sources().items():
        if layer_of(name)[0] == 0 or name in CONFIG_READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                bad += [f"{name}.{node.name}({a.arg})" for a in args
                        if (a.arg == "cfg" or a.arg.endswith("_cfg"))
                        and (a.annotation is None or ast.unparse(a.annotation) == "Any")]
    assert not bad, f"functions below the entry points that take the config object: {bad}; take the plan instead"


@pytest.mark.parametrize("importer, imported, upward", [
    ("benchmark/stages/x.py", "from benchmark.commands.run import main", True),        # a stage reaching up to an entry point
    ("benchmark/querysets/x.py", "from benchmark.models import y", True),    # I/O reaching up to models
    ("benchmark/commands/run.py", "from benchmark.stages import x", False),           # down: fine
    ("benchmark/stages/x.py", "from benchmark.stages import y", False),      # its own layer: fine
])
def test_the_layer_check_sees_an_upward_import(tmp_path, importer, imported, upward):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for sub in ("commands", "stages", "querysets", "models"):
        (tmp_path / PACKAGE / sub).mkdir()
        (tmp_path / PACKAGE / sub / "__init__.py").write_text("")
        (tmp_path / PACKAGE / sub / "y.py").write_text("")
        (tmp_path / PACKAGE / sub / "x.py").write_text("")
    (tmp_path / PACKAGE / "commands" / "run.py").write_text("")
    (tmp_path / importer).write_text(f"def f():\n    {imported}\n")
    assert bool(upward_imports(import_graph(tmp_path))) is upward


def test_the_config_import_check_sees_omegaconf_below_the_entry_points(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for sub in ("commands", "plan"):
        (tmp_path / PACKAGE / sub).mkdir()
        (tmp_path / PACKAGE / sub / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "plan" / "budget.py").write_text("def f():\n    from omegaconf import OmegaConf\n")
    (tmp_path / PACKAGE / "commands" / "run.py").write_text("import hydra\n")
    assert config_imports(tmp_path) == {"benchmark.plan.budget": ["omegaconf"], "benchmark.commands.run": ["hydra"]}

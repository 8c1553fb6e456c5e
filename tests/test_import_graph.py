"""No import circles among benchmark/ modules: every module imports only downward.

The graph counts every import statement, top-level or inside a function (heavy libraries and some
siblings are imported lazily; a circle through a lazy import is still a circle in the design)."""

import ast

from conftest import ROOT

PACKAGE = "benchmark"


def _module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources(root=ROOT):
    """{module name: (path, is_package)} for every benchmark/**/*.py."""
    return {_module_name(p, root): (p, p.name == "__init__.py") for p in sorted((root / PACKAGE).rglob("*.py"))}


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
    assert not cycles, ("import circles among benchmark/ modules (move the shared code below both sides):\n"
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

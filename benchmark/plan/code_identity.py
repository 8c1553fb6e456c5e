"""The code part of an edit's key: the content of the definitions that can change an edit's pixels, and nothing else
(docs/architecture.md, "What enters an edit's key").

An edit depends on the editor class (its whole module file's class), on what that class calls, on how the source is
read (`load_rgb`), on how the query's noise is seeded (`query_seed`) and on how the PNG is written (`save_png` at
`EDIT_PNG_LEVEL`). `code_identity` collects those *definitions* (functions, classes, class members, module
constants), starting from the editor class and `EDIT_ROOTS`, following the names each one uses, and hashes their
syntax trees:

- by content: a definition's digest is that of its syntax tree with docstrings removed and the module path of every
  project import replaced by one placeholder, and the identity is the sorted set of those digests. Moving a module,
  or renaming the module an import names, changes no key; comments and docstrings change no key.
- by use: of a shared base class (`Editor`, `DiffusionEditor`, ...) only the members the edit path reaches enter
  (`ENTRY_MEMBERS`, and every `self.X` / `super().X` used by what entered). A method added to `Editor` for
  another purpose changes no key; the editor's own class enters whole.
- by classification: every project module the walk reaches is in `PIXEL_MODULES` (followed) or `NO_PIXEL_MODULES`
  (not followed, with the reason). `tests/test_code_identity.py` fails when the walk reaches a module in neither,
  so a new module is classified by whoever adds it. Unclassified modules are followed (the safe side).

Nothing here imports the code it hashes: it reads source files, so a signature is computed without torch.
"""

from __future__ import annotations

import ast
import copy
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.io.errors import RunError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("benchmark", "editors")

# A deliberate change of what an edit stores (its PNG's bytes for the same pixels, a new field of the image) bumps
# this number: it enters every editor key.
EDIT_FORMAT = 1

# The definitions every edit depends on besides its editor's: reading and sizing the source, the per-query seed, the
# PNG writer and its compression level. (module, name); a `Class.member` name is one member of a class.
EDIT_ROOTS: tuple[tuple[str, str], ...] = (
    ("benchmark.io.imageio", "load_rgb"),
    ("benchmark.io.imageio", "save_png"),
    ("benchmark.stages.edit", "EDIT_PNG_LEVEL"),
    ("benchmark.editing.editor", "query_seed"),
)
# multi_turn adds the code that feeds turn t the edit of turn t-1 and writes its keyed PNG
MULTI_TURN_ROOTS: tuple[tuple[str, str], ...] = (
    ("benchmark.stages.turn_keys", "save_keyed_png"),
)

# The members of an editor's base classes that the edit stage calls (benchmark.stages.edit, .invert): the entry
# points into an editor. Whatever they reach through `self.X` enters too.
ENTRY_MEMBERS = ("__init__", "__post_init__", "__call__", "prepare", "edit_deferred", "edit", "invert_sources")

# Modules whose definitions can change pixels: followed by the walk.
PIXEL_MODULES = frozenset({
    "benchmark.editing.editor",  # the Editor base class (members reached), query_seed, generators
    "benchmark.io.imageio",  # load_rgb (input reading and sizing), save_png
    "benchmark.io.hashing",  # digests that seed per-source noise (image_digest -> source_seed)
    "benchmark.editing.attention", "benchmark.editing.base", "benchmark.editing.batching",
    "benchmark.editing.determinism", "benchmark.editing.dit", "benchmark.editing.flow_edit",
    "benchmark.editing.flow_solvers", "benchmark.editing.imagic", "benchmark.editing.inversion",
    "benchmark.editing.ip2p", "benchmark.editing.source_inversions", "benchmark.editing.token_maps",
    "benchmark.io.model_cache", "benchmark.models.diffusion", "benchmark.models.dit", "benchmark.models.tokenizer",
    # the oracle renders the demo world's scene graphs: the demo builder's rendering and edit rules
    "benchmark.querysets.demo", "benchmark.querysets.captions", "benchmark.querysets.coco_classes",
    "benchmark.querysets.editval", "benchmark.io.editval_rules",
    "benchmark.stages.turn_keys",  # multi_turn: the keyed PNG writer
})

# Modules the walk reaches that cannot change pixels, and why. They are not followed.
NO_PIXEL_MODULES: dict[str, str] = {
    "benchmark": "the package's face (its version string)",
    "editors": "the plug-in package (a docstring)",
    "benchmark.editing": "a package docstring",
    "benchmark.models": "a package docstring",
    "benchmark.stages": "a package docstring",
    "benchmark.metrics": "re-exports of metric base types",
    "benchmark.querysets": "re-exports of the query-set reader",
    "benchmark.io.types": "data containers (Query, EditRecord ...): a field no code reads changes no pixel, and a "
                       "field an editor reads carries a value of the query set, whose hash names the run folder",
    "benchmark.io.fileio": "atomic writes of the bytes it is given",
    "benchmark.io.locking": "claims and locks between workers",
    "benchmark.editing.work_counter": "counts UNet evaluations; its hook returns the network's output unchanged",
    "benchmark.editing.inversion_store": "stores inversion tensors losslessly (a content digest checks each file); "
                                         "an inversion's own key says what it depends on",
    "benchmark.io.score_cache": "quarantines corrupt cache files",
    "benchmark.io.filehash": "digests of files, for provenance",
    "benchmark.io.download": "fetching files (their sha256 is checked)",
    "benchmark.metrics.base": "metric base types",
    "benchmark.querysets.io": "reading and checking query-set records (their hash names the run folder)",
    "benchmark.querysets.json_stream": "a JSON reader",
    "benchmark.querysets.release": "release folders and their checks",
    "benchmark.querysets.sample": "drawing samples of a query set (the sample is part of the set's hash)",
    "benchmark.io.session_edits": "names of multi-turn output files",
    "benchmark.stages.edit": "the edit stage's bookkeeping; its PNG level is an EDIT_ROOTS entry",
}

_PLACEHOLDER = "<project>"


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)  # top-level name -> the statements binding it
    aliases: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name -> (module, name | None)
    body: list[ast.AST] = field(default_factory=list)  # top-level statements run at import (not defs, imports)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _only_imports(node: ast.AST) -> bool:
    return all(isinstance(n, (ast.Import, ast.ImportFrom, ast.Pass)) or _only_imports(n)
               for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))


class UnparsableCode(RunError):
    """A module on the code path of a run's editor or metrics is not valid Python: nothing can key its results."""


def parse_source(path: Path) -> ast.Module:
    """The module's syntax tree; a file that does not parse raises `UnparsableCode` naming it, its line and the
    parser's message (the run stops with that line, before its preflight, instead of a traceback)."""
    try:
        return ast.parse(path.read_text(encoding="utf-8"), str(path))
    except SyntaxError as err:
        raise UnparsableCode(f"{path}, line {err.lineno}: {err.msg} (SyntaxError). The run's editor or metrics "
                             "use this module: fix it and run again") from None


class CodeIndex:
    """The project's modules under `root`, parsed on demand (source files only, nothing imported)."""

    def __init__(self, root: Path | None = None, packages: Iterable[str] = PACKAGES) -> None:
        self.root = Path(root) if root is not None else PROJECT_ROOT
        self.packages = tuple(packages)
        self._cache: dict[str, _Module | None] = {}
        self.digests: dict[int, str] = {}  # id(node) -> its digest (the nodes live as long as the index)

    def is_project(self, name: str) -> bool:
        return name.split(".")[0] in self.packages

    def module(self, name: str) -> _Module | None:
        """The parsed module `name` (benchmark.* / editors.*), or None when it is no project module."""
        if name in self._cache:
            return self._cache[name]
        found = None
        if self.is_project(name):
            base = self.root.joinpath(*name.split("."))
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    found = self._parse(name, path)
                    break
        self._cache[name] = found
        return found

    def _parse(self, name: str, path: Path) -> _Module:
        tree = parse_source(path)
        mod = _Module(name, path, tree)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mod.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            mod.defs.setdefault(n.id, []).append(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mod.aliases.update(self._bindings(node, mod))
            elif _is_docstring(node) or _only_imports(node):
                for sub in ast.walk(node):  # `if TYPE_CHECKING:` imports bind names too
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        mod.aliases.update(self._bindings(sub, mod))
            else:
                mod.body.append(node)
        return mod

    def _origin(self, node: ast.ImportFrom, mod: _Module) -> str:
        if not node.level:
            return node.module or ""
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        parts = package.split(".")
        parts = parts[:len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def _bindings(self, node: ast.AST, mod: _Module) -> dict[str, tuple[str, str | None]]:
        """Local names an import statement binds to project modules (name None) or project definitions."""
        out: dict[str, tuple[str, str | None]] = {}
        if isinstance(node, ast.Import):
            for a in node.names:
                if self.is_project(a.name):
                    # `import benchmark.x.y` binds `benchmark`; `import benchmark.x.y as z` binds z to the module
                    out[a.asname] = (a.name, None) if a.asname else (a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            origin = self._origin(node, mod)
            if self.is_project(origin):
                for a in node.names:
                    sub = f"{origin}.{a.name}"
                    local = a.asname or a.name
                    out[local] = (sub, None) if self.module(sub) is not None else (origin, a.name)
        return out


def _normalised(node: ast.AST) -> ast.AST:
    """A copy of `node` without docstrings, with each project import reduced to the local names it binds (no module
    path, no imported name: which definition a name binds enters the key through the walk, by content), and with each
    run of consecutive import statements in a fixed order (an import sorter's reordering changes nothing)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            body[0] = ast.Pass()
        if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").split(".")[0] in PACKAGES):
            n.module, n.level = _PLACEHOLDER, 0
            n.names = [ast.alias(a.asname or a.name) for a in n.names]
        elif isinstance(n, ast.Import):
            n.names = [ast.alias(_PLACEHOLDER if a.name.split(".")[0] in PACKAGES else a.name, a.asname)
                       for a in n.names]
    for n in ast.walk(node):
        for attr in ("body", "orelse", "finalbody"):
            stmts = getattr(n, attr, None)
            if isinstance(stmts, list):
                setattr(n, attr, _sorted_import_runs(stmts))
    return node


def _sorted_import_runs(stmts: list[ast.AST]) -> list[ast.AST]:
    out: list[ast.AST] = []
    run: list[ast.AST] = []
    for stmt in [*stmts, None]:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            run.append(stmt)
            continue
        out += sorted(run, key=lambda s: ast.dump(s, include_attributes=False))
        run = []
        if stmt is not None:
            out.append(stmt)
    return out


def _digest(node: ast.AST) -> str:
    return hashlib.sha256(ast.dump(_normalised(node), include_attributes=False).encode("utf-8")).hexdigest()


def _annotation_nodes(node: ast.AST) -> set[int]:
    """ids of every node inside an annotation (names there are types, not code the edit runs)."""
    out: set[int] = set()
    for n in ast.walk(node):
        anns = []
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(n.returns)
            a = n.args
            anns += [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x]
        elif isinstance(n, ast.AnnAssign):
            anns.append(n.annotation)
        for ann in anns:
            if ann is not None:
                out.update(id(x) for x in ast.walk(ann))
    return out


@dataclass
class Identity:
    """What entered a key: one digest per definition, and the modules the walk reached."""

    digests: dict[str, str] = field(default_factory=dict)  # "module:name" -> digest (names: for people, not keys)
    modules: set[str] = field(default_factory=set)  # project modules whose definitions entered
    unclassified: dict[str, set[str]] = field(default_factory=dict)  # module -> the modules that reached it
    unresolved: set[str] = field(default_factory=set)  # roots that name nothing (a moved root: fix EDIT_ROOTS)

    @property
    def digest(self) -> str:
        """The code identity: a hash of the sorted set of definition digests (no module names, no paths)."""
        return hashlib.sha256("\n".join(sorted(set(self.digests.values()))).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Rules:
    """Which project modules a walk follows (`followed`), which it stops at (`stopped`, with reasons), and the
    packages it follows unasked (plug-ins); a module in none of them is followed and reported."""

    followed: frozenset[str]
    stopped: dict[str, str]
    free_prefixes: tuple[str, ...] = ()


EDIT_RULES = Rules(PIXEL_MODULES, NO_PIXEL_MODULES, ("editors.",))


class _Walk:
    def __init__(self, index: CodeIndex, identity: Identity, rules: Rules | None = None) -> None:
        self.index = index
        self.id = identity
        self.rules = rules or EDIT_RULES
        self.done: set[tuple[str, str]] = set()
        self.todo: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []  # (module, name, self's MRO)

    def add(self, module: str, name: str, mro: tuple[tuple[str, str], ...] = (), whole: bool = False) -> None:
        self.todo.append((module, ("*" if whole else "") + name, mro))

    def run(self) -> None:
        while self.todo:
            module, name, mro = self.todo.pop()
            if (module, name) in self.done:
                continue
            self.done.add((module, name))
            self._unit(module, name, mro)

    def _reach(self, module: str, source: str) -> bool:
        """Whether the walk follows into `module` (a project module), recording unclassified ones."""
        if module in self.rules.stopped:
            return False
        if module not in self.rules.followed and not module.startswith(self.rules.free_prefixes):
            self.id.unclassified.setdefault(module, set()).add(source)
        return True

    def _digest(self, node: ast.AST) -> str:
        found = self.index.digests.get(id(node))
        if found is None:
            found = self.index.digests[id(node)] = _digest(node)
        return found

    def _enter(self, mod: _Module, key: str, node: ast.AST, cached: bool = True) -> None:
        """Let `node` (a definition of `mod`) enter the key; `cached` False for a node made here, which the digest
        cache (keyed by id) must not hold."""
        self.id.modules.add(mod.name)
        if mod.body and (mod.name, "<import>") not in self.done:  # what runs at import comes with any definition
            self.done.add((mod.name, "<import>"))
            for i, stmt in enumerate(mod.body):
                self.id.digests[f"{mod.name}:<import {i}>"] = self._digest(stmt)
                self._refs(mod, stmt, ())
        self.id.digests[f"{mod.name}:{key}"] = self._digest(node) if cached else _digest(node)

    def _unit(self, module: str, name: str, mro: tuple[tuple[str, str], ...]) -> None:
        mod = self.index.module(module)
        if mod is None:
            return
        whole = name.startswith("*")
        name = name.lstrip("*")
        if name == "<module>":  # a module used as an object: every definition of it
            for n in list(mod.defs):
                self.add(module, n, whole=True)
            self._enter(mod, "<module>", ast.Module(body=list(mod.body), type_ignores=[]), cached=False)
            return
        cls, _, member = name.partition(".")
        nodes = mod.defs.get(cls)
        if nodes is None:
            if cls in mod.aliases:  # a re-export: the definition it names
                target, attr = mod.aliases[cls]
                if self._reach(target, module):
                    self.add(target, attr or "<module>", mro, whole)
            return
        if member:  # one member of a base class, reached through self
            for node in nodes:
                if isinstance(node, ast.ClassDef):
                    for stmt in node.body:
                        if member in _bound(stmt):
                            self._enter(mod, name, stmt)
                            self._refs(mod, stmt, mro)
            return
        for node in nodes:
            if isinstance(node, ast.ClassDef) and not whole:
                # a base class of the editor: its header (bases, decorators) now, members as they are reached
                header = ast.ClassDef(name=node.name, bases=node.bases, keywords=node.keywords, body=[],
                                      decorator_list=node.decorator_list, type_params=[])
                self._enter(mod, f"{cls} (header)", header, cached=False)
                self._refs(mod, header, mro)
                for member_name in ENTRY_MEMBERS:
                    self.add(module, f"{cls}.{member_name}", mro)
            else:
                self._enter(mod, cls, node)
                self._refs(mod, node, mro)

    def _refs(self, mod: _Module, node: ast.AST, mro: tuple[tuple[str, str], ...]) -> None:
        """Follow the names `node` uses: project definitions, modules, and (with an MRO) members of `self`."""
        skip = _annotation_nodes(node)
        if mro:  # the bases of a class of self's MRO are followed member by member, not whole
            for n in ast.walk(node):
                if isinstance(n, ast.ClassDef) and (mod.name, n.name) in mro:
                    skip.update(id(x) for b in n.bases for x in ast.walk(b))
        local = dict(mod.aliases)
        for n in ast.walk(node):  # imports inside functions bind names too (editors import lazily)
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                local.update(self.index._bindings(n, mod))
        module_attr: set[int] = set()
        for n in ast.walk(node):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                base = n.value.id
                if base in ("self", "cls") and mro:
                    self._member(n.attr, mro)
                elif base in local and local[base][1] is None:  # module.attr
                    module_attr.add(id(n.value))
                    target = local[base][0]
                    sub = f"{target}.{n.attr}"
                    if self.index.module(sub) is not None:
                        if self._reach(sub, mod.name):
                            self.add(sub, "<module>")
                    elif self._reach(target, mod.name):
                        self.add(target, n.attr, whole=True)
            elif (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Call)
                  and isinstance(n.value.func, ast.Name) and n.value.func.id == "super" and mro):
                self._member(n.attr, mro)
        for n in ast.walk(node):
            if id(n) in skip or not isinstance(n, ast.Name) or not isinstance(n.ctx, ast.Load):
                continue
            if n.id in local:
                target, attr = local[n.id]
                if attr is None and id(n) in module_attr:
                    continue
                if self._reach(target, mod.name):
                    self.add(target, attr or "<module>", whole=True)
            elif n.id in mod.defs:
                self.add(mod.name, n.id, whole=True)

    def _member(self, member: str, mro: tuple[tuple[str, str], ...]) -> None:
        for module, cls in mro:
            self.add(module, f"{cls}.{member}", mro)


def _bound(stmt: ast.AST) -> set[str]:
    """Names a class-body statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _mro(index: CodeIndex, module: str, cls: str) -> tuple[tuple[str, str], ...]:
    """(module, class) of `cls` and its project base classes, depth first (the order does not matter for a key)."""
    out: list[tuple[str, str]] = []
    todo = [(module, cls)]
    while todo:
        m, c = todo.pop(0)
        if (m, c) in out:
            continue
        mod = index.module(m)
        if mod is None:
            continue
        node = next((n for n in mod.defs.get(c, []) if isinstance(n, ast.ClassDef)), None)
        if node is None:
            if c in mod.aliases and mod.aliases[c][1] is not None:
                todo.insert(0, mod.aliases[c])  # a re-exported class
            continue
        out.append((m, c))
        for base in node.bases:
            if isinstance(base, ast.Name):
                if base.id in mod.aliases and mod.aliases[base.id][1] is not None:
                    todo.append(mod.aliases[base.id])
                elif base.id in mod.defs:
                    todo.append((m, base.id))
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                    and base.value.id in mod.aliases and mod.aliases[base.value.id][1] is None:
                todo.append((mod.aliases[base.value.id][0], base.attr))
    return tuple(out)


def code_identity(target: str, *, multi_turn: bool = False, index: CodeIndex | None = None) -> Identity:
    """The definitions that make the pixels of an editor's edits (`target`: its `_target_`, module.Class), hashed by
    content (module docstring). A target outside the project (a plug-in installed elsewhere) enters as its whole
    source file."""
    index = index or CodeIndex()
    identity = Identity()
    walk = _Walk(index, identity)
    module, _, cls = target.rpartition(".")
    if index.module(module) is None:
        _outside(module, identity)
    else:
        mro = _mro(index, module, cls)
        walk.add(module, cls, mro, whole=True)  # the editor's own class, whole
        for base_module, base in mro[1:]:
            walk.add(base_module, base, mro)  # its base classes: header, entry members, members reached
    for root_module, name in EDIT_ROOTS + (MULTI_TURN_ROOTS if multi_turn else ()):
        mod = index.module(root_module)
        if mod is None or name.partition(".")[0] not in mod.defs:
            identity.unresolved.add(f"{root_module}:{name}")
        walk.add(root_module, name, whole=True)
    walk.run()
    return identity


# -- metric signatures ---------------------------------------------------------------------------------------------

# What every score depends on besides its metric's code: how the score stage reads the source, the edit (resized to
# the source's size), masks and ground truth, batches them and converts the values (pairwise metrics; a suite reads
# its own inputs, and its code enters through its `_target_`).
SCORE_ROOTS: tuple[tuple[str, str], ...] = (
    ("benchmark.stages.score", "_Samples"),
    ("benchmark.stages.score", "_collate"),
    ("benchmark.stages.score", "_metric_values"),
)

# Metric and model code is followed without a list (whatever lives there computes scores or the features they come
# from); of the rest, the modules a metric's code can reach are listed here.
SCORE_PACKAGES = ("benchmark.metrics.", "benchmark.models.")
SCORE_MODULES = frozenset({
    "benchmark.io.imageio",  # reading images and masks, sizing, float conversion
    "benchmark.io.hashing",  # seeds and cache keys of feature memos
    "benchmark.stages.score",  # SCORE_ROOTS
    # definitions the suites share with the query sets (I/O layer): model cache folders and devices, EditVal's
    # rules, RISEBench's protocol, pinned prompt files
    "benchmark.io.model_cache", "benchmark.io.editval_rules", "benchmark.io.rise_protocol",
    "benchmark.io.pinned_prompts",
    # the oracle segmenter and detector read the demo world's scene graphs and its class lists
    "benchmark.querysets.demo", "benchmark.querysets.captions", "benchmark.querysets.coco_classes",
    "benchmark.querysets.editval",
})
NO_SCORE_MODULES: dict[str, str] = {
    **{m: why for m, why in NO_PIXEL_MODULES.items() if not m.startswith(SCORE_PACKAGES)},
    "benchmark.io.errors": "exception classes (a failed row's reason names them; no value depends on them)",
    "benchmark.io.provenance": "the git sha, versions and device recorded beside scores",
    "benchmark.io.npy_header": "checks the header of a stored feature array before it is read",
    "benchmark.io.score_cache": "quarantines corrupt cache files",
}
SCORE_RULES = Rules(SCORE_MODULES, NO_SCORE_MODULES, SCORE_PACKAGES)


def metric_code_identity(targets: Iterable[str], index: CodeIndex | None = None) -> Identity:
    """The definitions that compute a metric set's values: every `_target_` of its config (a suite class, its
    component loaders, a pairwise metric), whole with what it uses, and `SCORE_ROOTS`; hashed by content, as an
    editor's code is. A target outside the project enters as its whole source file."""
    index = index or CodeIndex()
    identity = Identity()
    walk = _Walk(index, identity, SCORE_RULES)
    for target in sorted(set(targets)):
        module, _, name = target.rpartition(".")
        if index.module(module) is None:
            _outside(module, identity)
        else:
            if name not in index.module(module).defs and name not in index.module(module).aliases:
                identity.unresolved.add(target)
            walk.add(module, name, whole=True)
    for root_module, name in SCORE_ROOTS:
        mod = index.module(root_module)
        if mod is None or name not in mod.defs:
            identity.unresolved.add(f"{root_module}:{name}")
        walk.add(root_module, name, whole=True)
    walk.run()
    return identity


def _outside(module: str, identity: Identity) -> None:
    """An editor module outside this checkout: its whole file (its own imports are its author's to pin)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):  # the editor could not be built either; nothing to hash
        spec = None
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        tree = parse_source(Path(spec.origin))
        identity.digests[f"{module}:<file>"] = _digest(tree)
        identity.modules.add(module)

"""How often the code part of an edit's key changed over the project's history, under the old rule (scheme 1: every
file of every project module the editor imports) and the new one (scheme 2: the content of the definitions that can
change pixels, benchmark.plan.code_identity).

For each of the last N first-parent commits of a branch, the commit's tree is exported to a temporary folder and:
- scheme 1: the rule of `benchmark.plan.config.editor_code` up to 38c7b69 (whole files of the import closure), on that tree;
- scheme 2: this checkout's `code_identity` over that tree (`CodeIndex(root=<tree>)`), each module known by its name
  at the last commit (a module a later commit moved, e.g. in the layout by layers, is classified, and a root
  found, as the last commit does; only names are translated, the tree's own source is hashed);
- the editor's YAML (configs/editor/<name>.yaml), hashed: a change of setting changes the key under both schemes.
It prints, per editor, how many distinct code keys each scheme saw and how many times each changed, and lists the
commits where the scheme-2 key changed (with whether the YAML changed too). With `--pixels`, for every such commit of
the editors named there, it also runs `editor=<e> queryset=demo_mini profile=tiny stages=[edit]` on the commit and on
its predecessor and says whether any PNG changed.

    python scripts/tools/replay_keys.py --commits 150 [--editors identity,oracle,p2p] [--pixels identity,p2p] [--json F]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EDITORS = ("identity", "oracle", "overedit", "ip2p", "p2p", "imagic", "sdedit", "flux_kontext")

# scheme 1, as benchmark.plan.config.editor_code computed it up to 38c7b69: the files of the editor's module, of every
# project module it imports (transitively, imports inside functions too), of their packages' __init__, and of
# benchmark.io.imageio and benchmark.editing.editor, each hashed as its syntax tree without docstrings
OLD_ALWAYS = ("benchmark.io.imageio", "benchmark.editing.editor")


def _module_file(tree: Path, name: str) -> Path | None:
    if name.split(".")[0] not in ("benchmark", "editors"):
        return None
    base = tree.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(node: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = module.split(".")[: len(module.split(".")) - n.level + (1 if is_package else 0)]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in n.names)
    return found


def _normalised(path: Path) -> str:
    node = ast.parse(path.read_text(encoding="utf-8"))
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.dump(node)


def old_code(tree: Path, target: str) -> tuple[str, int]:
    """(digest, files) of scheme 1's code part for `target` on `tree`."""
    module = target.rpartition(".")[0]
    todo, seen = [module, *OLD_ALWAYS], {}
    while todo:
        name = todo.pop()
        if name in seen or (path := _module_file(tree, name)) is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))
        todo.extend(_imports(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py"))
    files = sorted({(str(p.relative_to(tree)), hashlib.sha256(_normalised(p).encode()).hexdigest())
                    for p in seen.values()})
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:12], len(files)


def first_parent(branch: str, n: int) -> list[tuple[str, str]]:
    """(sha, subject) of the last `n` first-parent commits, oldest first."""
    out = subprocess.run(["git", "log", "--first-parent", f"-{n}", "--format=%H %s", branch], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [tuple(line.split(" ", 1)) for line in reversed(out.splitlines())]  # type: ignore[misc]


def export(sha: str, dest: Path) -> None:
    archive = subprocess.run(["git", "archive", "--format=tar", sha, "benchmark", "editors", "configs"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(dest, filter="data")


def _module_name(path: str) -> str | None:
    """benchmark/io/imageio.py -> benchmark.io.imageio; a package's __init__.py -> the package; None for a non-module."""
    if not path.endswith(".py") or path.split("/")[0] not in ("benchmark", "editors"):
        return None
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_moves(commits: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
    """(index of the commit, old module name, new module name) of every module a commit of `commits` moved (git's
    rename detection against its first parent)."""
    out = []
    for i, (sha, _) in enumerate(commits):
        text = subprocess.run(["git", "diff", "-M", "--name-status", "--diff-filter=R", f"{sha}^", sha, "--",
                               "benchmark", "editors"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
        for line in text.splitlines():
            _, old, new = line.split("\t")
            a, b = _module_name(old), _module_name(new)
            if a and b and a != b:
                out.append((i, a, b))
    return out


def later_names(moves: list[tuple[int, str, str]], index: int) -> dict[str, str]:
    """The module names of the tree of commit `index` -> their names at the last commit (the moves after it, in
    order)."""
    names: dict[str, str] = {}
    for i, old, new in moves:
        if i <= index:
            continue
        for k, v in names.items():
            if v == old:
                names[k] = new
        names.setdefault(old, new)
    return names


def _aliased_index(tree: Path, names: dict[str, str]):
    """A CodeIndex of an older tree that knows its modules by their names at the last commit: the rules (which
    modules can change pixels, EDIT_ROOTS) name modules as they are now, so a module moved later is classified, and
    a root found, as the last commit would. Only names change; what is hashed is the tree's own source."""
    from benchmark.plan.code_identity import CodeIndex

    class Aliased(CodeIndex):
        def module(self, name):
            found = super().module(name)
            if found is None and name in self.old_of:
                found = self._cache[name] = super().module(self.old_of[name])
            return found

        def _bindings(self, node, mod):
            return {k: (names.get(m, m), a) for k, (m, a) in super()._bindings(node, mod).items()}

    index = Aliased(root=tree)
    index.old_of = {new: old for old, new in names.items()}
    return index


def keys_at(tree: Path, editors: tuple[str, ...], names: dict[str, str] | None = None) -> dict[str, dict]:
    import yaml

    from benchmark.plan.code_identity import CodeIndex, code_identity

    index = _aliased_index(tree, names) if names else CodeIndex(root=tree)
    out: dict[str, dict] = {}
    for name in editors:
        path = tree / "configs" / "editor" / f"{name}.yaml"
        if not path.is_file():
            continue
        text = path.read_bytes()
        target = (yaml.safe_load(text) or {}).get("_target_")
        entry: dict = {"yaml": hashlib.sha256(text).hexdigest()[:12]}
        try:
            ident = code_identity(names.get(target.rpartition(".")[0], target.rpartition(".")[0]) + "."
                                  + target.rpartition(".")[2] if names else target, index=index)
            entry["new"] = ident.digest[:12]
            entry["unclassified"] = sorted(ident.unclassified)
        except Exception as err:  # noqa: BLE001 - a tree the walker cannot read is reported, not fatal
            entry["new"] = f"error: {type(err).__name__}: {err}"
        try:
            entry["old"], entry["old_files"] = old_code(tree, target)
        except Exception as err:  # noqa: BLE001
            entry["old"] = f"error: {type(err).__name__}: {err}"
        out[name] = entry
    return out


_EDITS: dict[tuple[str, str], dict[str, bytes]] = {}  # (commit, editor) -> demo_mini PNGs, each made once
EDITS_CACHE: Path | None = None  # --edits-cache: <dir>/<commit>/<editor>/*.png kept across invocations


def edits_at(sha: str, editor: str) -> dict[str, bytes]:
    """The PNGs of `editor=<editor> queryset=demo_mini profile=tiny stages=[edit]` run on the commit's own tree (its
    entry point: benchmark/commands/run.py since the layout by layers, benchmark/run.py before)."""
    if (sha, editor) in _EDITS:
        return _EDITS[sha, editor]
    kept = EDITS_CACHE / sha / editor if EDITS_CACHE is not None else None
    if kept is not None and (kept / "done").is_file():
        _EDITS[sha, editor] = {p.name: p.read_bytes() for p in kept.glob("*.png")}
        return _EDITS[sha, editor]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), sha], cwd=ROOT, check=True)
        try:
            results = Path(tmp) / "results"
            entry = "benchmark.commands.run" if (tree / "benchmark" / "commands" / "run.py").is_file() else "benchmark.run"
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
            subprocess.run([sys.executable, "-m", entry, f"editor={editor}", "queryset=demo_mini",
                            "profile=tiny", "metrics=basic", "stages=[edit]", "progress=false",
                            f"paths.results={results}"], cwd=tree, env=env, capture_output=True, check=False)
            _EDITS[sha, editor] = {p.name: p.read_bytes() for p in results.glob("runs/*/*/edits/*.png")}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
        for name, data in _EDITS[sha, editor].items():
            (kept / name).write_bytes(data)
        (kept / "done").write_text("")
    return _EDITS[sha, editor]


def pixels_changed(before: str, after: str, editor: str) -> str:
    """'same pixels' / 'pixels changed (k of n PNGs)' for demo_mini tiny edits at the two commits."""
    a, b = edits_at(before, editor), edits_at(after, editor)
    if not a or not b:
        return f"not compared (edits: {len(a)} before, {len(b)} after)"
    differ = sum(a.get(k) != b.get(k) for k in set(a) | set(b))
    return "same pixels" if not differ else f"pixels changed ({differ} of {len(set(a) | set(b))} PNGs)"


def _count(seq: list, part: str) -> tuple[int, int]:
    """(distinct values, changes between consecutive commits) of one key part along the commits."""
    vals = [k.get(part) for _, _, k in seq]
    known = [v for v in vals if v is not None]
    return len(set(known)), sum(a != b for a, b in zip(vals, vals[1:], strict=False) if a is not None and b is not None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=150)
    ap.add_argument("--branch", default="HEAD")
    ap.add_argument("--editors", default=",".join(EDITORS))
    ap.add_argument("--pixels", default="", help="editors whose scheme-2 key changes are checked against pixels")
    ap.add_argument("--json", type=Path, default=None, help="write every commit's keys here")
    ap.add_argument("--keys", type=Path, default=None, help="read the keys a --json run wrote instead of computing "
                    "them (e.g. to add --pixels)")
    ap.add_argument("--edits-cache", type=Path, default=None, help="keep each commit's demo_mini edits here, so a "
                    "second --pixels run edits nothing twice")
    args = ap.parse_args()
    global EDITS_CACHE
    EDITS_CACHE = args.edits_cache
    editors = tuple(e for e in args.editors.split(",") if e)
    rows = json.loads(args.keys.read_text()) if args.keys else []
    commits = [(r["sha"], r["subject"]) for r in rows] or first_parent(args.branch, args.commits)
    moves = module_moves(commits) if not args.keys else []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (sha, subject) in enumerate(commits if not args.keys else []):
            tree = Path(tmp) / sha[:12]
            export(sha, tree)
            rows.append({"sha": sha, "subject": subject, "keys": keys_at(tree, editors, later_names(moves, i))})
            print(f"\r{i + 1}/{len(commits)} commits", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"{len(commits)} first-parent commits, {commits[0][0][:10]} .. {commits[-1][0][:10]}")
    print(f"{'editor':14} {'commits':>7} {'old keys':>8} {'old changes':>11} {'new keys':>8} {'new changes':>11} "
          f"{'yaml changes':>12}")
    changes: dict[str, list] = {}
    for e in editors:
        seq = [(r["sha"], r["subject"], r["keys"][e]) for r in rows if e in r["keys"]]
        if not seq:
            continue
        (ok, oc), (nk, nc), (_, yc) = (_count(seq, part) for part in ("old", "new", "yaml"))
        print(f"{e:14} {len(seq):7d} {ok:8d} {oc:11d} {nk:8d} {nc:11d} {yc:12d}")
        changes[e] = [(seq[j - 1][0], sha, subj, k["yaml"] != seq[j - 1][2]["yaml"])
                      for j, (sha, subj, k) in enumerate(seq) if j and k.get("new") != seq[j - 1][2].get("new")]
        bad = {u for _, _, k in seq for u in k.get("unclassified", [])}
        if bad:
            print(f"  (modules unclassified at some commit: {', '.join(sorted(bad))})")
    pixel_editors = {e for e in args.pixels.split(",") if e}
    for e, found in changes.items():
        for before, after, subject, yaml_changed in found:
            check = f"; {pixels_changed(before, after, e)}" if e in pixel_editors else ""
            print(f"  {e}: new key at {after[:10]} ({subject[:80]}){' [yaml changed]' if yaml_changed else ''}"
                  f"{check}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

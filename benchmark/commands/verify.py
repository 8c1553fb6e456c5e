"""`editmeter verify RUN`: re-edit a stratified sample of a finished run with the code, weights and device of now,
and compare pixels with the run's edits (docs/results.md#verify).

A reproducibility audit: run it on another GPU, another torch or diffusers, another machine. The run's setting is
rebuilt from its run.json (editor config option, its command-line overrides, profile, seed, query set) and must
equal the recorded one; the query set must have the recorded hash. The sample (`benchmark.stages.carry.
stratified_slots`: whole batch slots) is re-edited in the batch slots of the run's shards at its batch size, into
`<run>/verify/<id>/edits/`, with inversions computed afresh (`--reuse-inversions` reads the results' store instead).
Each compared query is identical, within `--tolerance` levels, or different (max and mean level difference, share
of pixels). Under protocol=multi_turn the slots follow the run's waves and each sampled later turn is re-edited from
the run's own edit of its previous turn (`benchmark.stages.carry.reedit_sample`), as the run edited it. The report, `<run>/verify/<id>/report.json`, carries a content digest. Exit status: 0 when every query
is identical or within the tolerance, 1 on a difference, 2 when the run cannot be verified.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.io.errors import RunError

VERIFY_DIR = "verify"
REPORT = "report.json"
VERIFY_FORMAT = "editmeter-verify/1"


class VerifyError(RunError, ValueError):
    """The run cannot be verified (no run.json, a changed setting or query set, no edits); exit 2."""


def _read_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerifyError(f"{run_dir}: no run.json here; RUN is a run folder, results/runs/<query set>/"
                          "<editor>-<signature> (`editmeter show` lists the runs)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise VerifyError(f"{path}: unreadable ({err})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("editor_config"), dict):
        raise VerifyError(f"{path}: not a run.json of `editmeter run` (no editor_config); edits scored with "
                          "`editmeter score` were made elsewhere and cannot be re-edited here")
    return meta


def _overrides(meta: dict[str, Any], results: Path, extra: list[str]) -> list[str]:
    """The config overrides that rebuild the run's setting: its editor option, query set, profile, seed, the
    editor keys it set on the command line, and `extra` (the caller's, last)."""
    option = meta.get("editor_option") or meta.get("editor")
    out = [f"editor={option}", f"queryset={meta['queryset']}", f"profile={meta['profile']}",
           f"seed={int(meta['seed'])}", f"paths.results={results}", "progress=false"]
    if meta.get("protocol") and meta["protocol"] != "single_turn":
        out.append(f"protocol={meta['protocol']}")
    out += [str(o) for o in meta.get("editor_overrides") or []]
    return out + extra


def verify_run(run_dir: Path, *, sample: int = 16, tolerance: int = 0, batch_size: int | None = None,
               reuse_inversions: bool = False, overrides: list[str] | None = None,
               out: Path | None = None) -> dict[str, Any]:
    """Re-edit a sample of the run in `run_dir` and compare (module docstring); returns the report it wrote."""
    from PIL import Image

    from benchmark.commands.run import compose
    from benchmark.io.hashing import canonical_json, stable_hash
    from benchmark.io.protocols import MULTI_TURN, SINGLE_TURN, chains_turns
    from benchmark.io.provenance import provenance
    from benchmark.plan.config import build_editor, editor_setting, plan_run, setting_of_run
    from benchmark.plan.resolved import load_queries
    from benchmark.querysets.sessions import shard_whole_sessions
    from benchmark.stages.carry import compare_pngs, protocol_slots, reedit_sample, stratified_slots
    from benchmark.stages.edit import edit_path, latest_records, rewrites_instruction, run_edit_stage

    run_dir = run_dir.resolve()
    meta = _read_meta(run_dir)
    results = run_dir.parents[2]
    try:
        cfg, choices = compose(_overrides(meta, results, list(overrides or [])))
        plan = plan_run(cfg, str(meta.get("editor")))
    except Exception as err:  # noqa: BLE001 - any config error: the run's setting cannot be rebuilt here
        raise VerifyError(f"{run_dir.name}: its setting cannot be rebuilt from run.json ({type(err).__name__}: "
                          f"{err}); pass the overrides the run used after RUN, e.g. queryset=demo "
                          "queryset.sample=14") from None
    full = load_queries(plan)
    if full.hash != meta.get("queryset_hash"):
        raise VerifyError(f"{run_dir.name}: the query set {full.name} now hashes to {full.hash[:12]}, the run's to "
                          f"{str(meta.get('queryset_hash'))[:12]}: its records or files changed, so its edits "
                          "cannot be compared (pass the overrides that select the run's set after RUN)")
    editor = build_editor(plan.editor)
    setting = editor_setting(plan.editor.config, editor.info(), plan.seed, plan.profile,
                             rewrites_instruction(editor), plan.protocol)
    if setting != setting_of_run(meta):
        raise VerifyError(f"{run_dir.name}: the editor setting rebuilt now (config, weights, seed, profile) differs "
                          "from the run's, so a difference would not be the code's; pass the editor overrides the "
                          "run used after RUN (run.json: editor_config, editor_overrides)")
    records = latest_records(run_dir)
    done = {qid for qid, r in records.items() if r.get("status") == "ok" and edit_path(run_dir, qid).is_file()}
    if not done:
        raise VerifyError(f"{run_dir.name}: no finished edit to compare with")
    selection = meta.get("selection") or {}
    count = int((selection.get("shard") or [0, 1])[1])
    limit = selection.get("limit")
    size = int(batch_size or selection.get("batch_size") or plan.batch_size)
    sizes = {}
    for q in full.queries:
        if q.id in done:
            try:
                with Image.open(full.path(q.image)) as im:
                    sizes[q.id] = im.size
            except (OSError, ValueError, Image.DecompressionBombError):
                pass
    shards = [shard_whole_sessions(full, i, count).subset(limit) for i in range(count)]
    # multi_turn: slots follow the waves, and a later turn is re-edited from the run's own edit of its previous turn
    protocol = MULTI_TURN if chains_turns(plan.protocol, editor) else SINGLE_TURN
    slots = [slot for shard in shards for slot in protocol_slots(shard.queries, size, protocol, done.__contains__)]
    ends = []  # both ends of every shard
    for shard in shards:
        edited = [q.id for q in shard.queries if q.id in done]
        ends += edited[:1] + edited[-1:]
    chosen = {q.id for q in stratified_slots(slots, done, sample, sizes, ends)}
    verify_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    folder = run_dir / VERIFY_DIR / verify_id
    folder.mkdir(parents=True)
    if getattr(editor, "reuse_inversions", False):
        from benchmark.editing.inversion_store import INVERSIONS_DIR, InversionStore

        store = (results / INVERSIONS_DIR) if reuse_inversions else (folder / INVERSIONS_DIR)
        editor.inversion_store = InversionStore(store)

    def edit(sub: Any, turn_inputs: Any = None) -> Any:
        return run_edit_stage(sub, editor, folder, seed=plan.seed, batch_size=size, num_workers=plan.num_workers,
                              run_id=verify_id, progress=False, turn_inputs=turn_inputs)

    for shard in shards:
        batch = [q for slot in protocol_slots(shard.queries, size, protocol, done.__contains__) for q in slot
                 if q.id in chosen]  # whole slots of this shard
        if batch:
            reedit_sample(shard, batch, edit, protocol=protocol, inputs=run_dir)
    again = latest_records(folder)
    compared = []
    for q in full.queries:
        if q.id not in done or q.id not in again:
            continue
        rec = again[q.id]
        if rec.get("status") != "ok":
            compared.append({"query": q.id, "verdict": "different", "note": f"re-edit failed: {rec.get('reason')}"})
            continue
        d = compare_pngs(q.id, edit_path(run_dir, q.id), edit_path(folder, q.id))
        verdict = ("identical" if d.identical else "within_tolerance" if not d.note and d.max_level <= tolerance
                   else "different")
        compared.append({"query": q.id, "verdict": verdict, **{k: v for k, v in dataclasses.asdict(d).items()
                                                                if k not in ("query", "identical")}})
    counts = {v: sum(c["verdict"] == v for c in compared) for v in ("identical", "within_tolerance", "different")}
    now = provenance(str(editor.info().get("device") or "cpu"))
    body = {
        "format": VERIFY_FORMAT, "run": str(run_dir), "verify_id": verify_id, "editor": meta.get("editor"),
        "editor_sig": meta.get("editor_sig"), "queryset": meta.get("queryset"),
        "queryset_hash": meta.get("queryset_hash"), "sample": sorted(chosen), "batch_size": size,
        "tolerance": int(tolerance), "fresh_inversions": not reuse_inversions,
        "then": {k: meta.get(k) for k in ("git_sha", "versions", "device")}, "now": now,
        "compared": compared, "counts": counts,
        "verdict": "different" if counts["different"] or not compared else "same",
        "checked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    report = {**body, "digest": stable_hash(body, 64)}
    from benchmark.io.fileio import atomic_write_text

    text = canonical_json(report) + "\n"
    atomic_write_text(folder / REPORT, text)
    if out is not None:
        atomic_write_text(out, text)
    return report


def read_report(path: Path) -> dict[str, Any]:
    """A verify report, its digest checked: VerifyError when it was edited or is torn."""
    from benchmark.io.hashing import stable_hash

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise VerifyError(f"{path}: unreadable verify report ({err})") from None
    if not isinstance(data, dict) or data.get("format") != VERIFY_FORMAT:
        raise VerifyError(f"{path}: not a verify report ({VERIFY_FORMAT})")
    digest = data.pop("digest", None)
    if digest != stable_hash(data, 64):
        raise VerifyError(f"{path}: its content does not match its digest (edited or damaged); run verify again")
    return data


def _short(sha: Any) -> str:
    """A git sha as shown: 12 hex digits, `-dirty` kept."""
    text = str(sha or "unknown")
    head, dirty, _ = text.partition("-dirty")
    return head[:12] + ("-dirty" if dirty else "")


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the console prints: one line per query that is not identical, then the verdict."""
    lines = []
    for c in report["compared"]:
        if c["verdict"] == "identical":
            continue
        what = c.get("note") or (f"max {c['max_level']} level(s), mean {c['mean_level']:.4f}, "
                                 f"{c['share']:.2%} of pixels differ")
        lines.append(f"  {c['query']}: {c['verdict']} ({what})")
    n = len(report["compared"])
    k = report["counts"]
    tol = f", {k['within_tolerance']} within {report['tolerance']} level(s)" if k["within_tolerance"] else ""
    word = "DIFFERENT" if report["verdict"] == "different" else "reproduced"
    then, now = report["then"], report["now"]
    lines.append(f"[editmeter] verify {Path(report['run']).name}: {word}: {k['identical']}/{n} identical{tol}, "
                 f"{k['different']} different (edited at {_short(then.get('git_sha'))} on {then.get('device')}, "
                 f"re-edited at {_short(now.get('git_sha'))} on {now.get('device')})")
    lines.append(f"[editmeter] report: {Path(report['run']) / VERIFY_DIR / report['verify_id'] / REPORT}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="editmeter verify", description=(
        "Re-edit a stratified sample of a finished run with the code, weights and device of now, and compare "
        "pixels with its edits. Exit 0: every compared query identical (or within --tolerance); 1: a difference; "
        "2: the run cannot be verified."))
    ap.add_argument("run", type=Path, help="a run folder: results/runs/<query set>/<editor>-<signature>")
    ap.add_argument("--sample", type=int, default=16, help="queries to re-edit (at least one per edit type, "
                    "source-size class and shard end; default 16)")
    ap.add_argument("--tolerance", type=int, default=0, help="levels (of 255) a pixel may differ by and count as "
                    "within tolerance (default 0: identical only); recorded in the report")
    ap.add_argument("--batch-size", type=int, default=None, help="re-edit at this batch size (default: the run's "
                    "recorded batch size, else the config's)")
    ap.add_argument("--reuse-inversions", action="store_true", help="read stored inversions from the results' "
                    "store instead of computing them afresh")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    ap.add_argument("overrides", nargs="*", help="config overrides when run.json cannot rebuild the setting alone "
                    "(a sampled query set: queryset=demo queryset.sample=14)")
    args = ap.parse_args(argv)
    if args.sample < 1 or not 0 <= args.tolerance <= 255:
        print("error: --sample must be at least 1 and --tolerance from 0 to 255", file=sys.stderr)
        return 2
    try:
        report = verify_run(args.run, sample=args.sample, tolerance=args.tolerance, batch_size=args.batch_size,
                            reuse_inversions=args.reuse_inversions, overrides=args.overrides, out=args.out)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(report)))
    return 1 if report["verdict"] == "different" else 0

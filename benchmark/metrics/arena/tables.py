"""The arena's tables as `editmeter arena`, `editmeter show` and `--drift` print them, from the summary that
`benchmark.stages.arena.summary` makes (the dict written as `ratings.json`; docs/arena.md)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from benchmark.io.errors import RunError


class ArenaError(RunError, ValueError):
    """The arena cannot be run or compared as asked; the message names the input and the fix."""


DIGEST_KEY = "digest"  # ratings.json's content digest: every other field, through hashing.stable_hash


def ratings_text(summary: dict[str, Any]) -> str:
    """The text of `ratings.json` for `summary`: its fields and their content digest."""
    from benchmark.io.hashing import stable_hash

    body = {k: v for k, v in summary.items() if k != DIGEST_KEY}
    return json.dumps(body | {DIGEST_KEY: stable_hash(body, 64)}, indent=1, sort_keys=True)


def read_ratings(path: Path) -> dict[str, Any]:
    """A `ratings.json` that `editmeter arena` wrote, checked against its content digest. ArenaError names the file
    and the fix when it is unreadable, not an object, or altered since it was written (or written before digests)."""
    from benchmark.io.hashing import stable_hash

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ArenaError(f"{path}: not a readable ratings.json ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict):
        raise ArenaError(f"{path}: not a ratings.json written by editmeter arena (not a JSON object)")
    body = {k: v for k, v in data.items() if k != DIGEST_KEY}
    if data.get(DIGEST_KEY) != stable_hash(body, 64):
        why = "has no content digest" if DIGEST_KEY not in data else "does not match its content digest"
        raise ArenaError(f"{path}: {why} (changed since editmeter arena wrote it); rerun editmeter arena for this "
                         "query set, which rewrites it from the call log without asking the judge again")
    return data


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"{'editor':<24}{'rating':>9}{'95% CI':>20}{'battles':>9}{'W/T/L':>14}{'failed calls':>14}"]
    for e in s["editors"]:
        ci = f"[{e['ci_low']:.1f}, {e['ci_high']:.1f}]" + ("*" if e["anchored"] else "")
        lines.append(f"{e['editor']:<24}{e['rating']:>9.1f}{ci:>20}{e['battles']:>9}"
                     f"{'/'.join(str(e[k]) for k in ('wins', 'ties', 'losses')):>14}{e['failed_calls']:>14}")
    lines += [f"{e['editor']} won no point (it lost every battle): GenArena's fit rates such an editor 1000, "
              "whatever the others; read its rank from the battles" for e in s["editors"] if e["no_points"]]
    lines += ["", "rating: the median of the bootstrap resamples (GenArena's); * anchored (held at an earlier rating)",
              "", f"{'pair':<40}{'battles':>9}{'consistent':>12}{'A/T/B':>14}{'failed':>8}{'not shared':>12}"]
    for p in s["pairs"]:
        cons = "-" if p["consistency"] is None else f"{100 * p['consistency']:.0f}%"
        lines.append(f"{p['a'] + ' vs ' + p['b']:<40}{p['battles']:>9}{cons:>12}"
                     f"{'/'.join(str(p[k]) for k in ('wins_first', 'ties', 'wins_second')):>14}{p['with_failed_call']:>8}"
                     f"{p['missing_or_failed']:>12}")
    names = [e["editor"] for e in s["editors"]]
    lines += ["", "win rate of the row over the column ((wins + ties / 2) / battles):",
              " " * 24 + "".join(f"{n[:10]:>11}" for n in names)]
    for r in names:
        row = s["win_rate"][r]
        cells = "".join(f"{'-' if c == r or c not in row else format(row[c], '.2f'):>11}" for c in names)
        lines.append(f"{r:<24}{cells}")
    lines += ["", f"battles: {s['battles']} ({s['dropped_battles_with_failed_call']} with a failed call dropped); "
              f"judge calls: {s['calls_asked']} made, {s['calls_reused']} reused; rounds: {s['rounds']}; "
              f"stopped: {s['stopped']}"]
    return "\n".join(lines)


# -- two judges' arenas ----------------------------------------------------------------------------------------------
def arena_drift(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How far two arenas of one query set (two `ratings.json`, e.g. two judges) disagree on their shared editors:
    each editor's rating under A and B and the shift B - A, Kendall's tau-b of the two ratings, and the rank flips
    (pairs of editors ordered one way by A and the other by B; a pair rated equal by one side is no flip). Refuses
    arenas of different query sets, or with fewer than two shared editors."""
    from scipy.stats import kendalltau

    if a.get("queryset") != b.get("queryset"):
        raise ArenaError(f"the two arenas are of different query sets ({a.get('queryset')} and {b.get('queryset')}): "
                         "compare arenas of one query set")
    ra = {e["editor"]: e for e in a["editors"]}
    rb = {e["editor"]: e for e in b["editors"]}
    shared = sorted(set(ra) & set(rb))
    if len(shared) < 2:
        raise ArenaError(f"the two arenas share {len(shared)} editor(s) ({', '.join(shared) or 'none'}); drift needs "
                         "two or more")
    rows = [{"editor": m, "rating_a": ra[m]["rating"], "rating_b": rb[m]["rating"],
             "shift": rb[m]["rating"] - ra[m]["rating"],
             "intervals_overlap": ra[m]["ci_low"] <= rb[m]["ci_high"] and rb[m]["ci_low"] <= ra[m]["ci_high"]}
            for m in shared]
    tau = float(kendalltau([r["rating_a"] for r in rows], [r["rating_b"] for r in rows]).statistic)
    flips = [(x, y) for x, y in itertools.combinations(shared, 2)
             if (ra[x]["rating"] - ra[y]["rating"]) * (rb[x]["rating"] - rb[y]["rating"]) < 0]
    differs = [k for k in ("prompts_sha256", "sampling", "drop_failed") if a.get(k) != b.get(k)]
    return {"queryset": a["queryset"], "judge_a": a.get("judge"), "judge_b": b.get("judge"), "editors": rows,
            "kendall_tau": tau, "rank_flips": flips, "only_a": sorted(set(ra) - set(rb)),
            "only_b": sorted(set(rb) - set(ra)), "settings_differ": differs}


def format_drift(d: dict[str, Any]) -> str:
    lines = [f"arena drift on {d['queryset']}: A = {d['judge_a']}, B = {d['judge_b']}",
             f"{'editor':<24}{'A':>9}{'B':>9}{'B - A':>9}  intervals overlap"]
    lines += [f"{r['editor']:<24}{r['rating_a']:>9.1f}{r['rating_b']:>9.1f}{r['shift']:>+9.1f}  "
              f"{'yes' if r['intervals_overlap'] else 'no'}" for r in d["editors"]]
    flips = ", ".join(f"{x} / {y}" for x, y in d["rank_flips"]) or "none"
    lines += ["", f"Kendall tau-b of the ratings: {d['kendall_tau']:.3f}; rank flips: {flips}"]
    if d["only_a"] or d["only_b"]:
        lines.append(f"not compared (in one arena only): {', '.join(d['only_a'] + d['only_b'])}")
    if d["settings_differ"]:
        lines.append(f"note: the arenas differ in {', '.join(d['settings_differ'])} besides the judge")
    return "\n".join(lines)


def arena_tables(results: Path, queryset: str | None = None) -> str:
    """The rating table of every arena under `<results>/arena/` (of `queryset` when given), as `editmeter show`
    prints them after the leaderboard; an unreadable ratings.json is named, not shown."""
    out = []
    for path in sorted((results / "arena").glob("*/ratings.json")):
        try:
            s = read_ratings(path)
            if queryset is not None and s.get("queryset") != queryset:
                continue
            table = format_summary(s).split("\n\n")[0]
        except ArenaError as err:
            out.append(f"arena {err}; not shown")
            continue
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            out.append(f"arena {path}: not readable ({type(err).__name__}); rerun editmeter arena")
            continue
        out.append(f"== arena {s.get('queryset')}: GenArena's pairwise protocol, judge {s.get('judge')}, "
                   f"{s.get('battles')} battles ({path}) ==\n{table}")
    return "\n\n".join(out)

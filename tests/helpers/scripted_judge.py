"""A judge backbone test double for metrics=gedit (benchmark/metrics/prompted_judge.py `JudgeBackbone`): its replies
are scripted, so the parsing and aggregation around it can be checked against numbers worked out by hand. The SC
reply is chosen by the instruction quoted in the prompt, the PQ reply by the edit's most common colour."""

from __future__ import annotations


class ScriptedJudge:
    def __init__(self, *, sc: dict[str, str], pq: dict[str, str], marker: str = "Editing instruction: ") -> None:
        self.sc, self.pq, self.marker = dict(sc), dict(pq), marker
        self.name = "scripted-judge@test"
        self.calls: list[int] = []

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.sc.items())}|{sorted(self.pq.items())}"

    def generate(self, requests):
        self.calls.append(len(requests))
        out = []
        for images, text in requests:
            if len(images) == 2:  # SC: source and edit, the instruction after the marker
                instruction = text.split(self.marker, 1)[1].split("\n", 1)[0]
                out.append(self.sc[instruction])
            else:  # PQ: the edit alone
                colour = max(images[0].convert("RGB").getcolors(1 << 16))[1]
                out.append(self.pq[",".join(map(str, colour))])
        return out


class ScriptedReplies:
    """A one-prompt-per-edit judge backbone double (metrics=imgedit): the reply is chosen by the instruction that
    follows `marker` in the prompt (up to the line's end)."""

    def __init__(self, *, replies: dict[str, str], marker: str = "INSTRUCTION=") -> None:
        self.replies, self.marker = dict(replies), marker
        self.name = "scripted-replies@test"

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.replies.items())}"

    def generate(self, requests):
        return [self.replies[text.split(self.marker, 1)[1].split("\n", 1)[0]] for _images, text in requests]


class SeededScript:
    """A seeded judge backbone double (metrics=editscore; `generate(requests, seeds=)`): the SC reply (two images)
    is chosen by the instruction after `marker` (key "*": any other instruction) and the pass (seed - base_seed), the
    PQ reply (one image) by the pass. It records every request's seed and image sizes."""

    def __init__(self, *, sc: dict[str, list[str]], pq: list[str], base_seed: int = 42,
                 marker: str = "INSTRUCTION=") -> None:
        self.sc, self.pq, self.base_seed, self.marker = {k: list(v) for k, v in sc.items()}, list(pq), base_seed, marker
        self.name = "seeded-script@test"
        self.seen: list[tuple[int, list[tuple[int, int]]]] = []

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.sc.items())}|{self.pq}"

    def generate(self, requests, seeds=None):
        seeds = [self.base_seed] * len(requests) if seeds is None else list(seeds)
        out = []
        for (images, text), seed in zip(requests, seeds, strict=True):
            self.seen.append((seed, [im.size for im in images]))
            k = seed - self.base_seed
            if len(images) == 2:
                instruction = text.split(self.marker, 1)[1].split("\n", 1)[0]
                out.append(self.sc.get(instruction, self.sc.get("*"))[k])
            else:
                out.append(self.pq[k])
        return out


def marked_reply(replies: dict[str, str], images, text: str) -> str:
    """metrics=kris's scripted reply: the stand-in prompts name their request in a `KIND=` line and quote the
    instruction in an `INSTRUCTION=` line; the reply is `replies["<kind>:<instruction>"]`, or for the quality prompt
    (no instruction) `replies["VQ:<r,g,b>"]` of the colour nearest the edit's most common one (a JPEG round trip
    moves a flat colour by a step or two)."""
    kind = text.split("KIND=", 1)[1].split("\n", 1)[0]
    if "INSTRUCTION=" in text:
        return replies[f"{kind}:{text.split('INSTRUCTION=', 1)[1].split(chr(10), 1)[0]}"]
    colour = max(images[-1].convert("RGB").getcolors(1 << 16))[1]
    keys = [k for k in replies if k.startswith(f"{kind}:")]
    best = min(keys, key=lambda k: sum((int(a) - b) ** 2 for a, b in zip(k.split(":")[1].split(","), colour,
                                                                           strict=True)))
    return replies[best]


class MarkedReplies:
    """A judge backbone double for metrics=kris (`marked_reply`); it records every request (image count, text)."""

    def __init__(self, *, replies: dict[str, str]) -> None:
        self.replies = dict(replies)
        self.name = "marked-replies@test"
        self.seen: list[tuple[int, str]] = []

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.replies.items())}"

    def generate(self, requests):
        self.seen += [(len(images), text) for images, text in requests]
        return [marked_reply(self.replies, images, text) for images, text in requests]


class ScriptedByPrompt:
    """A judge backbone double for protocols with several prompts per edit (metrics=rise): the reply is chosen by
    the prompt's first line and the edit's (the last image's) most common colour, "<first line>|<r>,<g>,<b>", from
    the JSON object in `replies_file`; a key it lacks raises. Each request (first line, image sizes and colours,
    the full text) is appended to `log_file` as one JSON line. Other keyword arguments (the local backbone's keys,
    which a command-line override of `_target_` leaves in place) are ignored."""

    def __init__(self, *, replies_file: str, log_file: str | None = None, **_unused) -> None:
        import json

        with open(replies_file, encoding="utf-8") as fh:
            self.replies = json.load(fh)
        self.log_file = log_file
        self.name = "scripted-by-prompt@test"

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.replies.items())}"

    def generate(self, requests):
        import json

        out, log = [], []
        for images, text in requests:
            colours = [",".join(map(str, max(im.convert("RGB").getcolors(1 << 16))[1])) for im in images]
            key = f"{text.split(chr(10), 1)[0]}|{colours[-1]}"
            out.append(self.replies[key])
            log.append({"key": key, "sizes": [list(im.size) for im in images], "colours": colours, "text": text})
        if self.log_file:
            with open(self.log_file, "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in log)
        return out

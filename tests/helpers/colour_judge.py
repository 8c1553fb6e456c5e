"""A judge backbone test double for `editmeter metaeval drift` (metrics=gedit): both replies are chosen by the
edit's most common colour, so editors whose edits differ in colour get different scores, and two instances with
other tables (or only another `version`) are two judges of one suite (two metric signatures)."""

from __future__ import annotations


def colour(image) -> str:
    """'r,g,b' of the image's most common colour."""
    return ",".join(map(str, max(image.convert("RGB").getcolors(1 << 16))[1]))


class ColourJudge:
    def __init__(self, *, sc: dict[str, str], pq: dict[str, str], version: str = "v1") -> None:
        self.sc, self.pq, self.version = dict(sc), dict(pq), version
        self.name = f"colour-judge-{version}@test"

    @property
    def identity(self) -> str:
        return f"{self.name}|{sorted(self.sc.items())}|{sorted(self.pq.items())}"

    def generate(self, requests):
        # SC: [source, edit] (the edit decides); PQ: [edit]
        return [(self.sc if len(images) == 2 else self.pq)[colour(images[-1])] for images, _text in requests]

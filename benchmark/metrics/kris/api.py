"""KRIS-Bench's official API judge: `EndpointJudge` with the message layout of the authors' `evaluate_with_gpt`.

The scripts send one user turn: the prompt text, then before each image a text part naming it ("This is the original
image:", "This is the edited image:", "This is the ground truth image:"), the images as `data:image/jpeg;base64`
URLs, `stream: false` and `max_tokens`, and no system turn, temperature or seed. Which label an image gets follows
from how many the request holds (the edit alone is the quality request), as in `metrics_common.py`,
`metrics_knowledge.py` and `metrics_view_change.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmark.models.judge_endpoint import EndpointJudge

# images in a request -> the label before each (the single-source scripts' evaluate_with_gpt)
LABELS: dict[int, tuple[str, ...]] = {
    1: ("This is the edited image:",),
    2: ("This is the original image:", "This is the edited image:"),
    3: ("This is the original image:", "This is the edited image:", "This is the ground truth image:"),
}


class KrisApiJudge(EndpointJudge):
    """`EndpointJudge` (same options) whose user turn interleaves the official image labels and whose body carries
    `stream: false`, as the official OpenAI client call sends it."""

    @property
    def identity(self) -> str:
        return super().identity + "|labels=kris-v1|stream=false"

    def _body(self, urls: Sequence[str], text: str) -> dict[str, Any]:
        # the one place every request body is built (sent, cached, keyed): the labels and `stream` go in here
        body = super()._body(urls, text)
        labels = list(LABELS[len(urls)])
        turn = body["messages"][-1]
        content: list[dict[str, Any]] = []
        for part in turn["content"]:
            if part.get("type") == "image_url":
                content.append({"type": "text", "text": labels.pop(0)})
            content.append(part)
        turn["content"] = content
        body["stream"] = False
        return body

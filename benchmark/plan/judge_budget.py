"""The judge's cost in the budget line (`[editmeter] budget: judge ...`, before the first edit): for each judged suite
of the run, the requests it sends per query and for the selection, and an estimate of the tokens.

Requests: the suite class declares the images of each request one query sends (`PromptedJudgeSuite.judge_requests`,
from its config: EditScore sends its two per pass). Tokens, an estimate, said so on the line:
- images: each source's size read from its file header (at most `SIZE_SAMPLE` sources, evenly spread; the edit is
  counted at its source's size), counted as the backbone's model counts them: Qwen2.5-VL one token per merged
  28 x 28 patch after qwen_vl_utils' resize (`benchmark.models.vlm.qwen_vl_utils_size`), OpenAI's API 85 + 170 per
  512-pixel tile after its scaling to 2048 and then 768 pixels on the short side (its published rule for gpt-4o and
  gpt-4.1 at `detail: high`, the default for these sizes);
- prompt text: at most a quarter of the pinned prompt file's characters per request (the file holds every prompt of
  the protocol, so this bounds the one sent; not counted when the file is not fetched yet);
- replies: at most the backbone's `max_tokens` (`max_new_tokens`) per request.
Nothing is sent and no model is loaded; a suite that declares no requests (or a metric without a judge) adds no line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SIZE_SAMPLE = 64  # source headers read for the image sizes (evenly spread over the selection)
CHARS_PER_TOKEN = 4  # the prompt text's bound: a token is at least this many characters of English text, roughly
OPENAI_HOSTS = ("api.openai.com",)


def openai_image_tokens(width: int, height: int) -> int:
    """Tokens OpenAI's API counts for one image at `detail: high` (gpt-4o, gpt-4.1): scaled to fit 2048 x 2048,
    then its short side to 768 (never up), then 85 + 170 per 512-pixel tile."""
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def qwen_image_tokens(width: int, height: int) -> int:
    """Tokens Qwen2.5-VL spends on one image after qwen_vl_utils' resize: one per merged 28 x 28 patch."""
    from benchmark.models.vlm import PIXEL_MULTIPLE, qwen_vl_utils_size

    w, h = qwen_vl_utils_size(width, height)
    return (w // PIXEL_MULTIPLE) * (h // PIXEL_MULTIPLE)


def source_sizes(full: Any, queries: Sequence[Any], limit: int = SIZE_SAMPLE) -> list[tuple[int, int]]:
    """(width, height) of up to `limit` sources of `queries`, evenly spread, read from their headers."""
    from PIL import Image

    if not queries:
        return []
    step = max(1, len(queries) // limit)
    sizes = []
    for q in list(queries)[::step][:limit]:
        try:
            with Image.open(full.path(q.image)) as im:
                sizes.append(im.size)
        except (OSError, ValueError):  # the preflight reports unreadable sources; the estimate skips them
            continue
    return sizes


def _backbone_kind(backbone: Any) -> tuple[str, int | None]:
    """('openai' | 'qwen', the reply token limit) of a backbone config."""
    base = str(backbone.get("base_url") or "")
    kind = "openai" if any(h in base for h in OPENAI_HOSTS) else "qwen"
    limit = backbone.get("max_tokens", backbone.get("max_new_tokens"))
    return kind, int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None


def judge_lines(metrics: Mapping[str, Any], requests: Mapping[str, Sequence[int]], full: Any,
                queries: Sequence[Any]) -> list[str]:
    """One budget line per judged suite of `metrics` (the run plan's metric configs) over `queries` (the selection
    to score). `requests`: judged suite -> the images of each request one query sends, as its class declares them
    (`benchmark.plan.resolved.Components.judge_requests`: resolved once per run, no class imported here)."""
    return [describe(name, tuple(requests[name]), node["backbone"], full, queries, node.get("prompts_file"))
            for name, node in metrics.items() if requests.get(name)]


def describe(name: str, requests: Sequence[int], backbone: Any, full: Any, queries: Sequence[Any],
             prompts_file: Any = None) -> str:
    """The line of one suite: `requests` holds the images of each request one query sends."""
    kind, reply_limit = _backbone_kind(backbone)
    n = len(queries)
    per_query = len(requests)
    images = sum(requests)
    sizes = source_sizes(full, queries)
    count = openai_image_tokens if kind == "openai" else qwen_image_tokens
    parts = [f"budget: judge {name} ({backbone.get('model') or backbone.get('model_id') or backbone.get('base_id')}): "
             f"{per_query} request(s) per query, {per_query * n:,} for the {n:,} selected queries "
             "(replies already cached are not asked again)"]
    tokens = []
    if sizes:
        per_image = sum(count(w, h) for w, h in sizes) / len(sizes)
        tokens.append(f"~{images * per_image:,.0f} image tokens per query ({images} images x ~{per_image:,.0f}, "
                      f"{'OpenAI tiles' if kind == 'openai' else 'Qwen2.5-VL patches'})")
    text = _prompt_chars(prompts_file)
    if text is not None:
        tokens.append(f"prompt text <= ~{per_query * text // CHARS_PER_TOKEN:,} tokens per query")
    else:
        tokens.append("prompt text not counted (prompt file not fetched)")
    if reply_limit is not None:
        tokens.append(f"replies <= {per_query * reply_limit:,} tokens per query (max {reply_limit} per request)")
    if sizes and text is not None:
        total = n * (images * per_image + per_query * text / CHARS_PER_TOKEN)
        tokens.append(f"~{total / 1e6:,.2f} M prompt tokens in all")
    return "; ".join(parts + tokens) + "; an estimate"


def _prompt_chars(path: Any) -> int | None:
    if not path:
        return None
    try:
        return len(Path(str(path)).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None

"""A judge served by an existing engine: an OpenAI-compatible chat endpoint (vLLM, SGLang, ...) as a judge backbone.

`EndpointJudge` has the members of `benchmark.metrics.prompted_judge.JudgeBackbone` (`name`, `identity`,
`generate(requests)`), so `metrics=gedit` (and any other judge that asks free-text questions about images) can use
a model that does not fit this machine. Each request is one chat turn: the system turn, then one user turn with the
images (base64 PNG data URLs) and the prompt text, decoded greedily (temperature 0) with a seed and a token limit;
the official API judges' form (no system turn, the text first, JPEG images, the API's default decoding) is a setting
(configs/metrics/gedit_judge/openai.yaml, configs/metrics/imgedit_judge/openai.yaml).

What it guarantees: the served model's name, what the server reports it loaded (`root`) and the server's version
enter `identity`, hence the metric signature; the API key is read from an environment variable when a request is
sent and is never stored or written; every reply is kept in a content-keyed cache on disk (the request with its image
bytes, plus the identity), so a rerun never asks twice; 429, 5xx and connection errors are retried with exponential
backoff, a bounded number of times, then end the run with the last error; at most `concurrency` requests are in
flight. Only the standard library is used (urllib). Specification: docs/judge.md, "A judge served by an engine".
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmark.errors import RunError
from benchmark.models.vlm import HUB_DEFAULT_SYSTEM

log = logging.getLogger(__name__)

IMAGE_MODES = ("qwen_vl_utils", "as_is")
IMAGE_FORMATS = ("png", "jpeg")
IMAGE_DETAILS = ("low", "high", "auto")  # OpenAI's image_url.detail (RISEBench's judge sends "high")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 60.0
_sleep = time.sleep  # module attribute: tests record the backoff without waiting


class EndpointError(RunError):
    """The judge endpoint cannot answer (refused the request, or still failing after the last retry)."""


def png_data_url(img: Any) -> str:
    """A PIL image as a base64 PNG data URL (lossless: the server decodes the very pixels sent)."""
    return image_data_url(img, "png")


def image_data_url(img: Any, fmt: str = "png") -> str:
    """A PIL image as a base64 data URL: PNG (lossless) or JPEG at PIL's default quality (75), as GEdit-Bench's API
    judge encodes images (`encode_pil_image`)."""
    buf = io.BytesIO()
    img.save(buf, format=fmt.upper())
    return f"data:image/{fmt};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class EndpointJudge:
    """A judge backbone answered by an OpenAI-compatible server (`POST {base_url}/chat/completions`).

    base_url: the API root, e.g. `http://host:8000/v1`. model: the served model name (vLLM's
    `--served-model-name`); it must be among `GET {base_url}/models`. revision: the hub commit the server loaded, as
    you started it (servers do not report it; null for an API model); shown in `name` and part of `identity`.
    max_tokens, temperature, seed: decoding (0 and 42: greedy and seeded, as the official local judge; null leaves
    the field out of the request, so the server's default applies, as the official API judges send it). system: the
    system turn (Qwen's default, given explicitly as the local judge does; null: no system turn, as the official API
    judges). text_first: the prompt text before the images in the user turn (the official API judges' order).
    images: `qwen_vl_utils` sends each image as the local judge's `qwen_vl_utils_image` hands it to the processor
    (the server's resizing then changes nothing), `as_is` sends it unchanged. image_format: `png` (lossless) or
    `jpeg` (PIL's quality 75, as GEdit-Bench's API judge). api_key_env: the name of the environment variable
    holding the API key (sent as a bearer token; null: none). cache_dir: the folder of the reply cache (null: no
    cache). concurrency: requests in flight at most. max_retries, backoff_s: retries of a 429 / 5xx / connection
    error after the first try, waiting backoff_s x 2^n (at most 60 s, or the server's Retry-After when longer).
    timeout_s: seconds to wait for one reply. image_detail: OpenAI's `image_url.detail` sent with each image (null:
    not sent; RISEBench's judge sends "high"). n: the `n` field (1; null: not sent, as most official judges).
    """

    def __init__(self, *, base_url: str, model: str, revision: str | None = None, max_tokens: int | None = 512,
                 temperature: float | None = 0, seed: int | None = 42, system: str | None = HUB_DEFAULT_SYSTEM,
                 text_first: bool = False, images: str = "qwen_vl_utils", image_format: str = "png",
                 api_key_env: str | None = None, cache_dir: str | None = None, concurrency: int = 4,
                 max_retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 600.0,
                 image_detail: str | None = None, n: int | None = None) -> None:
        parts = urlsplit(str(base_url))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, not {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be the served model name (vLLM's --served-model-name), not {model!r}")
        for key, v, low in (("max_tokens", max_tokens, 1), ("concurrency", concurrency, 1),
                            ("max_retries", max_retries, 0), ("seed", seed, 0)):
            if v is None and key in ("max_tokens", "seed"):
                continue  # left out of the request: the server's default
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{key} must be an integer >= {low}{' or null' if key in ('max_tokens', 'seed') else ''}"
                                 f", not {v!r}")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)
                                        or not 0 <= temperature <= 2):
            raise ValueError(f"temperature must be a number in [0, 2] or null, not {temperature!r}")
        if not isinstance(text_first, bool):
            raise ValueError(f"text_first must be true or false, not {text_first!r}")
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {', '.join(IMAGE_FORMATS)}, not {image_format!r}")
        for key, f in (("backoff_s", backoff_s), ("timeout_s", timeout_s)):
            if isinstance(f, bool) or not isinstance(f, int | float) or f < 0 or (key == "timeout_s" and f == 0):
                raise ValueError(f"{key} must be a {'positive' if key == 'timeout_s' else 'non-negative'} number "
                                 f"of seconds, not {f!r}")
        if images not in IMAGE_MODES:
            raise ValueError(f"images must be one of {', '.join(IMAGE_MODES)}, not {images!r}")
        if image_detail not in (None, *IMAGE_DETAILS):
            raise ValueError(f"image_detail must be one of {', '.join(IMAGE_DETAILS)} or null, not {image_detail!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n != 1):
            raise ValueError(f"n must be 1 (one reply per request) or null, not {n!r}")
        if api_key_env is not None and not os.environ.get(api_key_env):
            raise ValueError(f"api_key_env names {api_key_env!r}, but that environment variable is unset or empty: "
                             f"export it, or set api_key_env=null for a server without a key")
        self.base_url = str(base_url).rstrip("/")
        self.model, self.revision, self.max_tokens, self.seed = model, revision, max_tokens, seed
        self.temperature, self.text_first, self.image_format = temperature, text_first, image_format
        self.system, self.images, self.api_key_env = system, images, api_key_env
        self.image_detail, self.n = image_detail, n
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.concurrency, self.max_retries = concurrency, max_retries
        self.backoff_s, self.timeout_s = float(backoff_s), float(timeout_s)
        self.name = f"{model}@{revision}" if revision else model
        self._identity: str | None = None
        self._lock = threading.Lock()
        self.calls = 0       # chat requests sent (retries included)
        self.cache_hits = 0  # replies read from the cache

    # -- identity ------------------------------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        """The served model (name, what the server says it loaded, the stated revision), the server's version and
        the decoding; asked of the server once (GET /models, then /version or SGLang's /get_server_info)."""
        if self._identity is None:
            root, version = self._server_info()
            self._identity = (f"endpoint|model={self.model}|root={root}|revision={self.revision}|server={version}"
                              f"|decode=temperature={self._shown(self.temperature)},seed={self._shown(self.seed)},"
                              f"max_tokens={self._shown(self.max_tokens)}|system={self.system!r}|images={self.images}"
                              + ("" if self.image_format == "png" else f",{self.image_format}")
                              + ("" if self.image_detail is None else f",detail={self.image_detail}")
                              + ("" if self.n is None else f"|n={self.n}")
                              + ("|text_first" if self.text_first else ""))
        return self._identity

    @staticmethod
    def _shown(v: Any) -> str:
        return "server-default" if v is None else str(v)

    def _server_info(self) -> tuple[str, str]:
        raw = self._request("GET", f"{self.base_url}/models")
        try:
            models = {m.get("id"): m for m in json.loads(raw).get("data", []) if isinstance(m, dict)}
        except (ValueError, AttributeError, TypeError):
            raise EndpointError(f"{self.base_url}/models did not answer as an OpenAI-compatible server does (a JSON "
                                f"object with a list `data`): {raw[:200]!r}; check base_url (it ends in /v1)") from None
        if self.model not in models:
            raise EndpointError(f"the judge endpoint {self.base_url} does not serve {self.model!r}; it serves "
                                f"{', '.join(map(repr, sorted(map(str, models)))) or 'nothing'}: set "
                                "metrics.<suite>.backbone.model to the served name (vLLM's --served-model-name)")
        root = str(models[self.model].get("root") or "unreported")
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(self.base_url))
        for path in ("/version", "/get_server_info"):  # vLLM, SGLang
            try:
                found = json.loads(self._request("GET", origin + path, retry=False)).get("version")
            except (EndpointError, ValueError, AttributeError):
                continue
            if found:
                return root, str(found)
        log.warning("the judge endpoint %s reports no server version (neither /version nor /get_server_info): "
                    "its identity says server=unreported", self.base_url)
        return root, "unreported"

    # -- requests ------------------------------------------------------------------------------------------------
    def payload(self, images: Sequence[Any], text: str) -> dict[str, Any]:
        """The chat completion request for one (images, prompt text) pair, in the OpenAI format."""
        from benchmark.models.vlm import qwen_vl_utils_image

        ims = [qwen_vl_utils_image(im) if self.images == "qwen_vl_utils" else im for im in images]
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": self._image(im)} for im in ims]
        prompt = {"type": "text", "text": text}
        content = [prompt, *content] if self.text_first else [*content, prompt]
        turns = ([{"role": "system", "content": self.system}] if self.system is not None else []) + [
            {"role": "user", "content": content}]
        body: dict[str, Any] = {"model": self.model, "messages": turns}
        for key, v in (("temperature", self.temperature), ("seed", self.seed), ("max_tokens", self.max_tokens),
                       ("n", self.n)):
            if v is not None:  # null: not sent, the server's default (the official API judges send none of them)
                body[key] = v
        return body

    def _image(self, im: Any) -> dict[str, str]:
        url = {"url": image_data_url(im, self.image_format)}
        return url if self.image_detail is None else url | {"detail": self.image_detail}

    def _cache_path(self, payload: dict[str, Any]) -> Path | None:
        if self.cache_dir is None:
            return None
        key = hashlib.sha256(json.dumps({"identity": self.identity, "request": payload}, sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        return self.cache_dir / key[:2] / f"{key}.json"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise EndpointError(f"the environment variable {self.api_key_env} (api_key_env) is no longer set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _request(self, method: str, url: str, body: dict[str, Any] | None = None, retry: bool = True) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        attempts = 1 + (self.max_retries if retry else 0)
        last = ""
        for n in range(attempts):
            req = urllib.request.Request(url, data=data, method=method, headers=self._headers())
            wait = min(self.backoff_s * 2 ** n, MAX_BACKOFF_S)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 (http(s) checked)
                    return resp.read()
            except urllib.error.HTTPError as err:
                detail = err.read(2000).decode("utf-8", "replace").strip()
                last = f"HTTP {err.code}: {detail[:500]}"
                if err.code not in RETRY_STATUSES:
                    raise EndpointError(f"the judge endpoint refused {method} {url} ({last}); a prompt longer than "
                                        "the server's context needs a larger --max-model-len, more images per "
                                        "prompt need --limit-mm-per-prompt (docs/judge.md)") from None
                after = err.headers.get("Retry-After", "") if err.headers else ""
                if after.strip().isdigit():
                    wait = max(wait, min(float(after), MAX_BACKOFF_S))
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            if n + 1 < attempts:
                log.info("judge endpoint: %s %s failed (%s); retry %d of %d in %.1f s", method, url, last, n + 1,
                         attempts - 1, wait)
                _sleep(wait)
        raise EndpointError(f"the judge endpoint failed {method} {url} {attempts} time(s), the last with {last}: "
                            "check that the server is up (docs/judge.md), or raise "
                            "metrics.<suite>.backbone.max_retries / backoff_s")

    def _ask(self, payload: dict[str, Any]) -> str:
        path = self._cache_path(payload)
        if path is not None and path.is_file():
            with self._lock:
                self.cache_hits += 1
            return json.loads(path.read_text(encoding="utf-8"))["reply"]
        with self._lock:
            self.calls += 1
        raw = self._request("POST", f"{self.base_url}/chat/completions", payload)
        try:
            answer = json.loads(raw)
            choice = answer["choices"][0]
            reply = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise EndpointError(f"the judge endpoint {self.base_url} answered without choices[0].message: "
                                f"{raw[:500]!r}") from None
        # a content filter can leave no text: an empty reply, which the protocol then records as a failure row
        reply = reply if isinstance(reply, str) else ""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            # the model that answered (an API alias such as gpt-4.1 names a dated snapshot here)
            tmp.write_text(json.dumps({"reply": reply, "finish_reason": choice.get("finish_reason"),
                                       "answered_by": answer.get("model") if isinstance(answer, dict) else None,
                                       "identity": self.identity}, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, path)  # whole or absent: a killed run leaves no half-written reply
        return reply

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]]) -> list[str]:
        """The reply to each (PIL images, prompt text) request, in order; cached replies are not asked again."""
        self.identity  # noqa: B018 (the server is checked, and its version known, before the first request)
        payloads = [self.payload(images, text) for images, text in requests]
        if not payloads:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(payloads))) as pool:
            return list(pool.map(self._ask, payloads))

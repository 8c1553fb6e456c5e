"""A judge served by an existing engine: an OpenAI-compatible chat endpoint (vLLM, SGLang, ...) as a judge backbone.

`EndpointJudge` has the members of `benchmark.metrics.prompted_judge.JudgeBackbone` (`name`, `identity`,
`generate(requests)`), so `metrics=gedit` (and any other judge that asks free-text questions about images) can use
a model that does not fit this machine. Each request is one chat turn: the system turn, then one user turn with the
images (base64 PNG data URLs) and the prompt text, decoded greedily (temperature 0) with a seed and a token limit;
the official API judges' form (no system turn, the text first, JPEG images, the API's default decoding) is a setting
(configs/metrics/gedit_judge/openai.yaml, configs/metrics/imgedit_judge/openai.yaml).

What it guarantees: the served model's name, what the server reports it loaded (`root`) and the server's version
enter `identity`, hence the metric signature; the API key is read from an environment variable when a request is
sent and is never stored or written; every answer is kept in a content-keyed cache on disk (the identity and the
request, each image named by the sha256 of its pixels), so a rerun never asks twice; 429, 5xx and connection errors
are retried with exponential backoff, a bounded number of times; a request still failing then, refused by the
server (a 4xx), cut by a content filter or left empty comes back as a `JudgeReply` with `failure` set (the suite's
failure row; never cached), while a server that cannot be reached at the start, or that refuses the key or the
route (401, 403, 404, 405), stops the run; at most `concurrency` requests are in flight, and each distinct image
of a `generate` call is encoded once, in the request workers. Every reply carries the model asked, the `model` and
`system_fingerprint` the server reported and its version (`benchmark.models.judge_reply`). Only the standard
library and PIL are used (urllib). Specification: docs/judge.md, "A judge served by an engine" and "Failures and
provenance".
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

from benchmark.io.errors import RunError
from benchmark.models.judge_reply import JudgeReply
from benchmark.models.vlm import HUB_DEFAULT_SYSTEM

log = logging.getLogger(__name__)

IMAGE_MODES = ("qwen_vl_utils", "as_is")
IMAGE_FORMATS = ("png", "jpeg")
IMAGE_DETAILS = ("low", "high", "auto")  # OpenAI's image_url.detail (RISEBench's judge sends "high")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# a refusal of these says the key or the route is wrong, so every request would fail alike: the run stops
FATAL_STATUSES = frozenset({401, 403, 404, 405})
CACHE_LAYOUT = "v2-pixels"  # the reply cache folder of this key layout (entries directly under cache_dir: the first)
MAX_BACKOFF_S = 60.0
_sleep = time.sleep  # module attribute: tests record the backoff without waiting


class MissingApiKey(RunError, ValueError):
    """The judge's `api_key_env` names an unset variable: a setup error the commands print without a traceback."""


class EndpointError(RunError):
    """The judge endpoint cannot answer at all (not reachable, does not serve the model, refuses the key): the run
    stops."""


class CallFailed(EndpointError):
    """One chat request still failed after its retries (5xx, 429, connection): that request's failure row."""


class CallRefused(EndpointError):
    """The server refused one chat request (an HTTP 4xx such as a content-policy error): its failure row."""


def png_data_url(img: Any) -> str:
    """A PIL image as a base64 PNG data URL (lossless: the server decodes the very pixels sent)."""
    return image_data_url(img, "png")


def image_data_url(img: Any, fmt: str = "png", png_compress_level: int | None = None) -> str:
    """A PIL image as a base64 data URL: PNG (lossless) or JPEG at PIL's default quality (75), as GEdit-Bench's API
    judge encodes images (`encode_pil_image`). `png_compress_level`: zlib's level for PNG (0-9; None: PIL's
    default, 6, the official scripts' bytes); any level decodes to the same pixels, a lower one is faster."""
    return data_url_bytes(img, fmt, png_compress_level).decode("ascii")


def data_url_bytes(img: Any, fmt: str = "png", png_compress_level: int | None = None) -> bytes:
    """`image_data_url` as ASCII bytes (what a request body holds; no str copy of the megabytes)."""
    stored = stored_png(img) if fmt == "png" and png_compress_level == 0 else None
    if stored is not None:
        return b"data:image/png;base64," + base64.b64encode(stored)
    buf = io.BytesIO()
    if fmt == "png" and png_compress_level is not None:
        img.save(buf, format="PNG", compress_level=png_compress_level)
    else:
        img.save(buf, format=fmt.upper())
    return f"data:image/{fmt};base64,".encode() + base64.b64encode(buf.getbuffer())


_PNG_COLOUR_TYPES = {"L": (0, 1), "RGB": (2, 3), "RGBA": (6, 4)}


def stored_png(img: Any) -> bytes | None:
    """An 8-bit L / RGB / RGBA image as an uncompressed PNG (zlib's stored blocks, every row unfiltered): the same
    pixels as any PNG of it, written in a fraction of the time PIL takes at level 0 (which still tries five row
    filters per row). None for another mode or an image with a transparency key (PIL then writes it)."""
    import struct
    import zlib

    import numpy as np

    if img.mode not in _PNG_COLOUR_TYPES or "transparency" in img.info:
        return None
    colour, channels = _PNG_COLOUR_TYPES[img.mode]
    w, h = img.size
    rows = np.zeros((h, 1 + w * channels), dtype=np.uint8)  # each row: filter type 0 (none), then its bytes
    rows[:, 1:] = np.asarray(img, dtype=np.uint8).reshape(h, w * channels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(tag)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 0)) + chunk(b"IEND", b""))


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
    `jpeg` (PIL's quality 75, as GEdit-Bench's API judge). png_compress_level: zlib's level for PNG images (0-9;
    null: PIL's default, 6, the bytes the official scripts send); every level decodes to the very same pixels, so
    it is not part of `identity`: lower is faster to encode, higher sends fewer bytes; 0 writes the rows
    unfiltered and uncompressed (`stored_png`). api_key_env: the name of the environment variable
    holding the API key (sent as a bearer token; null: none). cache_dir: the folder of the reply cache (null: no
    cache). concurrency: requests in flight at most. max_retries, backoff_s: retries of a 429 / 5xx / connection
    error after the first try, waiting backoff_s x 2^n (at most 60 s, or the server's Retry-After when longer);
    then that request's reply is a `call_failed` failure.
    timeout_s: seconds to wait for one reply. image_detail: OpenAI's `image_url.detail` sent with each image (null:
    not sent; RISEBench's judge sends "high"). n: the `n` field (1; null: not sent, as most official judges).
    """

    def __init__(self, *, base_url: str, model: str, revision: str | None = None, max_tokens: int | None = 512,
                 temperature: float | None = 0, seed: int | None = 42, system: str | None = HUB_DEFAULT_SYSTEM,
                 text_first: bool = False, images: str = "qwen_vl_utils", image_format: str = "png",
                 png_compress_level: int | None = None, api_key_env: str | None = None,
                 cache_dir: str | None = None, concurrency: int = 4, max_retries: int = 5, backoff_s: float = 1.0,
                 timeout_s: float = 600.0, image_detail: str | None = None, n: int | None = None) -> None:
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
        if png_compress_level is not None and (isinstance(png_compress_level, bool)
                                               or not isinstance(png_compress_level, int)
                                               or not 0 <= png_compress_level <= 9):
            raise ValueError(f"png_compress_level must be an integer 0..9 or null (PIL's default), not "
                             f"{png_compress_level!r}")
        if images not in IMAGE_MODES:
            raise ValueError(f"images must be one of {', '.join(IMAGE_MODES)}, not {images!r}")
        if image_detail not in (None, *IMAGE_DETAILS):
            raise ValueError(f"image_detail must be one of {', '.join(IMAGE_DETAILS)} or null, not {image_detail!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n != 1):
            raise ValueError(f"n must be 1 (one reply per request) or null, not {n!r}")
        if api_key_env is not None and not os.environ.get(api_key_env):
            raise MissingApiKey(f"api_key_env names {api_key_env!r}, but that environment variable is unset or empty: "
                             f"export it, or set api_key_env=null for a server without a key")
        self.base_url = str(base_url).rstrip("/")
        self.model, self.revision, self.max_tokens, self.seed = model, revision, max_tokens, seed
        self.temperature, self.text_first, self.image_format = temperature, text_first, image_format
        self.png_compress_level = png_compress_level
        self.system, self.images, self.api_key_env = system, images, api_key_env
        self.image_detail, self.n = image_detail, n
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.concurrency, self.max_retries = concurrency, max_retries
        self.backoff_s, self.timeout_s = float(backoff_s), float(timeout_s)
        self.name = f"{model}@{revision}" if revision else model
        self._identity: str | None = None
        self._version = ""  # the server's reported version (known with the identity)
        self._legacy: bool | None = None  # whether cache_dir holds entries of the first key layout
        self._lock = threading.Lock()
        # shared by every `generate` call, so calls that overlap (a suite judging its next round while the last
        # one's slowest requests are out) keep at most `concurrency` requests in flight and one encoder per core
        self._in_flight = threading.BoundedSemaphore(concurrency)
        self._cpu = threading.BoundedSemaphore(max(1, min(concurrency, os.cpu_count() or 1)))
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
                self._version = str(found)
                return root, str(found)
        log.warning("the judge endpoint %s reports no server version (neither /version nor /get_server_info): "
                    "its identity says server=unreported", self.base_url)
        self._version = "unreported"
        return root, "unreported"

    # -- requests ------------------------------------------------------------------------------------------------
    def payload(self, images: Sequence[Any], text: str) -> dict[str, Any]:
        """The chat completion request for one (images, prompt text) pair, in the OpenAI format."""
        return self._body([image_data_url(im, self.image_format, self.png_compress_level)
                           for im in map(self._prepared, images)], text)

    def _prepared(self, im: Any) -> Any:
        from benchmark.models.vlm import qwen_vl_utils_image

        return qwen_vl_utils_image(im) if self.images == "qwen_vl_utils" else im

    def _body(self, urls: Sequence[str], text: str) -> dict[str, Any]:
        image = {} if self.image_detail is None else {"detail": self.image_detail}
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url} | image} for url in urls]
        if not isinstance(text, str):  # an interleaved prompt (text parts and image indices; the arena's protocol)
            from benchmark.models.judge_reply import interleaved

            content = interleaved(text, len(content), content.__getitem__)
        else:
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

    def _body_bytes(self, urls: Sequence[bytes], text: str) -> bytes:
        """`json.dumps(self._body(urls, text)).encode()` for data URLs made by `data_url_bytes` (ASCII bytes),
        without scanning or copying their megabytes more than once (base64 needs no escaping): the request is
        dumped with a short token for each URL, and the URLs are joined in between."""
        token = f"@{os.urandom(8).hex()}@"
        rest = json.dumps(self._body([f"{token}{n}" for n in range(len(urls))], text)).encode()
        pieces: list[bytes] = []
        for n, url in enumerate(urls):
            head, rest = rest.split(f'"{token}{n}"'.encode(), 1)
            pieces += [head, b'"', url, b'"']
        return b"".join([*pieces, rest])

    # -- the reply cache -----------------------------------------------------------------------------------------
    # Keyed by the identity and the request with each image named by the sha256 of the pixels sent (mode, size,
    # raw bytes after the `images` preparation): a hit needs no encoding, and no megabytes of base64 are hashed.
    # Entries live under `v2-pixels/`; the entries of earlier versions (keyed by the request with its base64 data URLs,
    # directly under cache_dir) are still read, at the cost of encoding the request first.
    def _key(self, digests: Sequence[str], text: str) -> str:
        request = self._body([f"sha256:{d}" for d in digests], text)
        return hashlib.sha256(json.dumps({"identity": self.identity, "request": request}, sort_keys=True,
                                         ensure_ascii=False).encode()).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / CACHE_LAYOUT / key[:2] / f"{key}.json"

    def _legacy_path(self, payload: dict[str, Any]) -> Path | None:
        if self.cache_dir is None or not self._has_legacy():
            return None
        key = hashlib.sha256(json.dumps({"identity": self.identity, "request": payload}, sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        return self.cache_dir / key[:2] / f"{key}.json"

    def _has_legacy(self) -> bool:
        if self._legacy is None:
            self._legacy = self.cache_dir is not None and any(
                p.is_dir() and len(p.name) == 2 for p in (self.cache_dir.iterdir() if self.cache_dir.is_dir() else ()))
        return self._legacy

    def _read_cached(self, path: Path | None) -> dict[str, Any] | None:
        """A cache record that holds a usable reply (a record marked rejected is asked again)."""
        if path is None or not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # a damaged entry is asked again and replaced
        if not isinstance(record, dict) or not isinstance(record.get("reply"), str) or record.get("rejected"):
            return None
        return record

    def _write_cached(self, path: Path, record: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)  # whole or absent: a killed run leaves no half-written reply

    def reject(self, reply: Any, why: str) -> None:
        """Mark the cached entry of `reply` (one the protocol could not parse) so that a rescoring asks again; the
        new reply then replaces it."""
        key = getattr(reply, "cache_key", "")
        path = self._cache_path(key) if key else None
        record = self._read_cached(path)
        if path is not None and record is not None:
            self._write_cached(path, record | {"rejected": why})

    # -- HTTP ------------------------------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise EndpointError(f"the environment variable {self.api_key_env} (api_key_env) is no longer set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _request(self, method: str, url: str, body: dict[str, Any] | bytes | None = None,
                 retry: bool = True) -> bytes:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
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
                    cls = EndpointError if err.code in FATAL_STATUSES or method != "POST" else CallRefused
                    raise cls(f"the judge endpoint refused {method} {url} ({last}); a prompt longer than "
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
        cls = CallFailed if method == "POST" else EndpointError
        raise cls(f"the judge endpoint failed {method} {url} {attempts} time(s), the last with {last}: "
                  "check that the server is up (docs/judge.md), or raise "
                  "metrics.<suite>.backbone.max_retries / backoff_s")

    # -- one request -----------------------------------------------------------------------------------------------
    def _ask(self, images: Sequence[Any], text: str, memo: _ImageMemo) -> JudgeReply:
        """One request's reply: from the cache, else asked. Its images are prepared, hashed and encoded here, in the
        request's worker, at most one worker per core at a time (`memo.cpu`): the other workers meanwhile wait on
        the server, so the encoding of later requests overlaps the judge's time on earlier ones."""
        from benchmark.models.judge_reply import CALL_FAILED, REFUSED

        with memo.cpu:
            digests = [memo.digest(im) for im in images]
            key = self._key(digests, text) if self.cache_dir is not None else ""
            path = self._cache_path(key) if key else None
            record = self._read_cached(path)
            body: bytes | None = None
            if record is None and path is not None and not path.is_file() and self._has_legacy():
                payload = self._body([memo.url(im).decode("ascii") for im in images], text)
                record = self._read_cached(self._legacy_path(payload))
                if record is not None:  # an entry of the earlier layout: copied to this one
                    self._write_cached(path, record)
            if record is None:
                body = self._body_bytes([memo.url(im) for im in images], text)
        if record is not None:
            with self._lock:
                self.cache_hits += 1
            return JudgeReply(record["reply"], model=self.model, answered_by=str(record.get("answered_by") or ""),
                              fingerprint=str(record.get("fingerprint") or ""),
                              version=str(record.get("server_version") or self._version), cache_key=key, cached=True)
        with self._lock:
            self.calls += 1
        meta = {"model": self.model, "version": self._version}
        try:
            with self._in_flight:
                raw = self._request("POST", f"{self.base_url}/chat/completions", body)
        except CallRefused as err:
            return JudgeReply("", failure=REFUSED, error=str(err), **meta)
        except CallFailed as err:
            return JudgeReply("", failure=CALL_FAILED, error=str(err), **meta)
        try:
            answer = json.loads(raw)
            choice = answer["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            text_raw = raw[:2000].decode("utf-8", "replace")
            return JudgeReply(text_raw, failure=CALL_FAILED, error=f"the judge endpoint {self.base_url} answered "
                              f"without choices[0].message: {text_raw[:500]!r}", **meta)
        # the model that answered (an API alias such as gpt-4.1 names a dated snapshot here) and the backend's
        # configuration fingerprint, when the API reports them
        meta |= {"answered_by": str(answer.get("model") or ""), "fingerprint": str(answer.get("system_fingerprint") or "")}
        finish = choice.get("finish_reason")
        reply = content if isinstance(content, str) else ""
        if finish == "content_filter" or not reply.strip():
            refusal = message.get("refusal") if isinstance(message, dict) else None
            why = (f"finish_reason={finish!r}" + (f", refusal={refusal!r}" if refusal else "")
                   + ("" if reply.strip() else ", no reply text"))
            return JudgeReply(reply, failure=REFUSED, error=f"the judge refused to answer ({why})", **meta)
        if path is not None:  # only answers: a failed call or a refusal is asked again next time
            self._write_cached(path, {"reply": reply, "finish_reason": finish, "answered_by": meta["answered_by"],
                                      "fingerprint": meta["fingerprint"], "server_version": self._version,
                                      "identity": self.identity})
        return JudgeReply(reply, cache_key=key, **meta)

    # `generate` may be called from several threads at once: the requests of all calls together stay within
    # `concurrency` (a suite then keeps the next round's requests going while the last round's slowest are out)
    overlapping_calls = True

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]]) -> list[JudgeReply]:
        """The reply to each (PIL images, prompt text) request, in order (a `JudgeReply`: the text and who answered
        it); cached replies are not asked again. A request that still fails after its retries, or that the server
        refuses (an HTTP 4xx other than 401/403/404/405, a content filter, an empty reply), gives a reply with
        `failure` set and the reason in `error`; an unreachable server stops the run before the first request."""
        self.identity  # noqa: B018 (the server is checked, and its version known, before the first request)
        if not requests:
            return []
        memo = _ImageMemo(self._prepared, self.image_format, self.png_compress_level, self._cpu)  # each distinct image prepared and encoded once
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(lambda r: self._ask(r[0], r[1], memo), requests))


class _ImageMemo:
    """The prepared image, its pixel digest and its data URL per distinct image object of one `generate` call
    (the call holds every image, so an object's id is not reused meanwhile), each computed once, by whichever
    worker needs it first."""

    def __init__(self, prepare: Any, fmt: str, level: int | None, cpu: Any) -> None:
        self.prepare, self.fmt, self.level, self.cpu = prepare, fmt, level, cpu
        self._locks: dict[int, Any] = {}  # re-entrant: a digest or URL first prepares the image
        self._lock = threading.Lock()
        self._prepared: dict[int, Any] = {}
        self._digests: dict[int, str] = {}
        self._urls: dict[int, bytes] = {}

    def _once(self, im: Any, table: dict[int, Any], make: Any) -> Any:
        k = id(im)
        with self._lock:
            lock = self._locks.setdefault(k, threading.RLock())
        with lock:
            if k not in table:
                table[k] = make()
            return table[k]

    def image(self, im: Any) -> Any:
        return self._once(im, self._prepared, lambda: self.prepare(im))

    def digest(self, im: Any) -> str:
        def make() -> str:
            p = self.image(im)
            h = hashlib.sha256(f"{p.mode}|{p.width}x{p.height}|".encode())
            h.update(p.tobytes())
            return h.hexdigest()

        return self._once(im, self._digests, make)

    def url(self, im: Any) -> bytes:
        return self._once(im, self._urls, lambda: data_url_bytes(self.image(im), self.fmt, self.level))

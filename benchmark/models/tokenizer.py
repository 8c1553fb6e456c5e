"""A real CLIP BPE tokenizer built offline from the vocabulary that open_clip ships in its wheel.

Stable Diffusion's tokenizer is OpenAI's CLIP BPE (49,408 tokens, 77 positions). open_clip bundles the same merges
file, so writing `vocab.json` + `merges.txt` from it gives a `transformers.CLIPTokenizer` with the real ids, and tiny
pipelines need no download (docs/diffusion.md, "Weight sources").
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

# The merges file holds more lines than CLIP uses: 49152 tokens = 256 bytes x 2 (with/without </w>) + merges + 2.
CLIP_VOCAB_SIZE = 49408
CLIP_MAX_LENGTH = 77
_N_MERGES = CLIP_VOCAB_SIZE - 2 * 256 - 2
BOS, EOS = "<|startoftext|>", "<|endoftext|>"


def _byte_symbols() -> list[str]:
    """CLIP's 256 byte symbols in vocabulary order: printable bytes as themselves first, then the other bytes
    (in byte order) as code points 256, 257, ... (GPT-2's reversible byte-to-unicode table)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    rest = [b for b in range(256) if b not in set(printable)]
    return [chr(b) for b in printable] + [chr(256 + i) for i in range(len(rest))]


def clip_vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    """(token -> id, merge lines) of OpenAI's CLIP tokenizer, read from open_clip's bundled BPE file."""
    from open_clip.tokenizer import default_bpe

    lines = gzip.open(default_bpe()).read().decode("utf-8").split("\n")
    merges = lines[1 : 1 + _N_MERGES]  # line 0 is a version header
    symbols = _byte_symbols()
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(m.split()) for m in merges] + [BOS, EOS]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != CLIP_VOCAB_SIZE:
        raise RuntimeError(f"open_clip's BPE file gave {len(vocab)} tokens, expected {CLIP_VOCAB_SIZE}")
    return vocab, merges


def write_clip_tokenizer(path: Path) -> None:
    """Save a `transformers.CLIPTokenizer` (SD v1 settings) into `path` with `save_pretrained`."""
    tok = build_clip_tokenizer()
    tok.save_pretrained(str(path))


def build_clip_tokenizer() -> Any:
    """An in-memory `transformers.CLIPTokenizer` with CLIP's real vocabulary, 77 positions, pad = end of text."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocab_and_merges()
    return CLIPTokenizer(vocab=vocab, merges=[tuple(m.split()) for m in merges], model_max_length=CLIP_MAX_LENGTH,
                         bos_token=BOS, eos_token=EOS, unk_token=EOS, pad_token=EOS)

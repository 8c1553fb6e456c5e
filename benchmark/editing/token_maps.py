"""Prompt-to-Prompt's token mappings: which source-caption token's cross-attention map each target token takes.

Two rule sets, chosen by the editor's `token_mapping` setting:

- `reference` (default): the behaviour of the authors' code (google/prompt-to-prompt, `seq_aligner.py` and
  `ptp_utils.get_word_inds`), quirks included, so that editmeter's P2P numbers are comparable with published ones:
  * words are the caption split on single spaces, and a word's tokens are found by walking the decoded tokens and
    counting characters (so "ball" is not found inside "ball,");
  * refinement aligns the two token sequences (start and end of text included) by a global alignment with gap 0,
    match +1 and mismatch -1, breaking ties in the order "skip a target token", "skip a source token", "pair them";
    paired tokens take the source's map, the others keep their own; every padding position maps to the same
    position of the source;
  * word swap gives each of the target word's tokens 1/len(target word tokens) of every source-word token's map
    (the attention mass of the word is kept), and, once the last swapped word is placed, maps each later target
    position onto the *same* position of the source (shifted when the swapped words had different token counts).
- `aligned`: editmeter's earlier rules (difflib's matching blocks, tokens substituted one-for-one mapped onto the
  tokens they replace, tails aligned from the end of each caption, swap weights 1/len(source word tokens), words
  found as token runs anywhere). Kept as a named option; docs/diffusion.md gives its measured effect.

Everything here is pure Python on token ids (the tensors are built by the caller), so each rule can be pinned with
hand-worked token lists.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

TOKEN_MAPPINGS = ("reference", "aligned")

# Trace-back moves of the global alignment, in the reference's tie-breaking order.
_SKIP_TARGET, _SKIP_SOURCE, _PAIR = 1, 2, 3


def token_ids(tokenizer: Any, text: str, *, truncate: bool = True) -> list[int]:
    """Token ids of `text` with start and end of text; truncated to the tokenizer's length unless `truncate` is off."""
    if truncate:
        return list(tokenizer(text, truncation=True, max_length=tokenizer.model_max_length).input_ids)
    return list(tokenizer(text).input_ids)


def reference_word_positions(tokenizer: Any, text: str, word: str | int) -> list[int]:
    """Token positions (start of text = 0) of a word of `text`, as the reference's `get_word_inds` finds them.

    `word` is a word index into `text.split(" ")` or a string, which selects every word equal to it (exact match:
    "ball" does not select "ball,"). Tokens are attributed to words by adding up the characters of each decoded
    token until the current word's length is reached.
    """
    words = text.split(" ")
    wanted = {word} if isinstance(word, int) else {i for i, w in enumerate(words) if w == word}
    if not wanted:
        return []
    pieces = [tokenizer.decode([t]).strip("#") for t in token_ids(tokenizer, text, truncate=False)[1:-1]]
    out: list[int] = []
    chars, k = 0, 0
    for pos, piece in enumerate(pieces, start=1):
        if k >= len(words):  # the reference would fail here (more characters than words); nothing more is a word
            break
        chars += len(piece)
        if k in wanted:
            out.append(pos)
        if chars >= len(words[k]):
            k, chars = k + 1, 0
    return out


def aligned_word_positions(tokenizer: Any, text: str, word: str) -> list[int]:
    """`aligned` rule: positions of every run of `word`'s tokens inside `text`'s tokens (punctuation ignored)."""
    ids, sub = token_ids(tokenizer, text), token_ids(tokenizer, word)[1:-1]
    if not sub:
        return []
    return [i + k for i in range(len(ids) - len(sub) + 1) if ids[i : i + len(sub)] == sub for k in range(len(sub))]


def global_alignment(source: Sequence[int], target: Sequence[int]) -> list[int]:
    """For each target token, the index of the source token it is paired with, or -1 (the reference's aligner).

    Scores: a pair of equal tokens +1, of different tokens -1, a skipped token 0. Where moves tie, the trace-back
    prefers skipping a target token, then skipping a source token, then pairing (so a mismatched pair is never
    chosen, and among equally good alignments the one decided latest in the trace-back wins).
    """
    n, m = len(source), len(target)
    score = [[0] * (m + 1) for _ in range(n + 1)]
    move = [[0] * (m + 1) for _ in range(n + 1)]
    for j in range(1, m + 1):
        move[0][j] = _SKIP_TARGET
    for i in range(1, n + 1):
        move[i][0] = _SKIP_SOURCE
        for j in range(1, m + 1):
            skip_t, skip_s = score[i][j - 1], score[i - 1][j]
            pair = score[i - 1][j - 1] + (1 if source[i - 1] == target[j - 1] else -1)
            best = max(skip_t, skip_s, pair)
            score[i][j] = best
            move[i][j] = _SKIP_TARGET if best == skip_t else _SKIP_SOURCE if best == skip_s else _PAIR
    paired = [-1] * m
    i, j = n, m
    while i > 0 or j > 0:
        step = move[i][j]
        if step == _PAIR:
            i, j = i - 1, j - 1
            paired[j] = i
        elif step == _SKIP_TARGET:
            j -= 1
        else:
            i -= 1
    return paired


def reference_refinement(source_ids: Sequence[int], target_ids: Sequence[int], length: int) -> tuple[list[int], list[float]]:
    """(mapper, alphas) over `length` positions: target position j takes source position mapper[j] where
    alphas[j] is 1 and keeps its own map where it is 0; padding maps to the same position (alpha 1)."""
    paired = global_alignment(source_ids, target_ids)
    # An unpaired token's index is never read (its alpha is 0); 0 keeps it a valid index.
    mapper = [max(p, 0) for p in paired] + list(range(len(paired), length))
    alphas = [1.0 if p >= 0 else 0.0 for p in paired] + [1.0] * (length - len(paired))
    return mapper[:length], alphas[:length]


def aligned_refinement(source_ids: Sequence[int], target_ids: Sequence[int], length: int) -> tuple[list[int], list[float]]:
    """`aligned` rule: difflib's matching blocks, one-for-one substitutions mapped onto the tokens they replace,
    the padding tail aligned from the end of each caption."""
    mapper, alphas = list(range(length)), [0.0] * length
    matcher = difflib.SequenceMatcher(None, list(source_ids), list(target_ids), autojunk=False)
    for op, i0, i1, j0, j1 in matcher.get_opcodes():
        if op == "equal" or (op == "replace" and i1 - i0 == j1 - j0):
            mapper[j0:j1] = range(i0, i1)
            alphas[j0:j1] = [1.0] * (j1 - j0)
        else:
            mapper[j0:j1] = [0] * (j1 - j0)
    n_s, n_t = len(source_ids), len(target_ids)
    for j in range(n_t, length):
        mapper[j], alphas[j] = min(j - n_t + n_s, length - 1), 1.0
    return mapper, alphas


def reference_swap(word_positions: Sequence[tuple[Sequence[int], Sequence[int]]], length: int) -> list[list[float]]:
    """(length x length) word-swap matrix W, target maps = source maps @ W, as the reference builds it.

    `word_positions`: for each swapped word, in caption order, (its source token positions, its target token
    positions). Walks source position i and target position j together from 0: at a swapped word every source token
    gives each target token 1/len(target tokens) (one-to-one when the counts are equal); between swapped words
    i maps onto j; after the last swapped word each target position j takes source position j.
    """
    w = [[0.0] * length for _ in range(length)]
    i = j = k = 0
    while i < length and j < length:
        if k < len(word_positions) and word_positions[k][0][0] == i:
            src, tgt = word_positions[k]
            if len(src) == len(tgt):
                for a, b in zip(src, tgt, strict=True):
                    w[a][b] = 1.0
            else:
                for a in src:
                    for b in tgt:
                        w[a][b] = 1.0 / len(tgt)
            k, i, j = k + 1, i + len(src), j + len(tgt)
        elif k < len(word_positions):
            w[i][j] = 1.0
            i, j = i + 1, j + 1
        else:
            w[j][j] = 1.0
            i, j = i + 1, j + 1
    return w


def reference_swap_for_captions(tokenizer: Any, source: str, target: str) -> list[list[float]]:
    """The reference's word-swap matrix of a caption pair (same number of space-separated words).

    Raises ValueError when the word counts differ or a swapped word has no token inside the tokenizer's length
    (where the reference stops with an error too)."""
    length = tokenizer.model_max_length
    s_words, t_words = source.split(" "), target.split(" ")
    if len(s_words) != len(t_words):
        raise ValueError(f"word swap needs captions with the same number of words: {source!r} ({len(s_words)}) vs "
                         f"{target!r} ({len(t_words)}); use mode=refine (or auto)")
    pairs = []
    for k, (sw, tw) in enumerate(zip(s_words, t_words, strict=True)):
        if sw == tw:
            continue
        src = [p for p in reference_word_positions(tokenizer, source, k) if p < length]
        tgt = [p for p in reference_word_positions(tokenizer, target, k) if p < length]
        if not src or not tgt:
            raise ValueError(f"word swap: word {k} ({sw!r} -> {tw!r}) has no token within the first {length} of "
                             f"{source!r} / {target!r}")
        pairs.append((src, tgt))
    return reference_swap(pairs, length)


def aligned_swap_for_captions(tokenizer: Any, source: str, target: str) -> list[list[float]]:
    """`aligned` rule: word k of the target takes the mean of word k's source token maps on each of its tokens; the
    end-of-text and padding tails are aligned from the end of each caption; the identity at equal token counts."""
    length = tokenizer.model_max_length
    n_src, n_tgt = len(token_ids(tokenizer, source)), len(token_ids(tokenizer, target))
    w = [[0.0] * length for _ in range(length)]
    if n_src == n_tgt:
        for k in range(length):
            w[k][k] = 1.0
        return w
    s_words, t_words = source.split(), target.split()
    if len(s_words) != len(t_words):
        raise ValueError(f"word swap needs captions with the same number of words: {source!r} vs {target!r}")
    w[0][0] = 1.0
    i = j = 1
    for sw, tw in zip(s_words, t_words, strict=True):
        a, b = len(token_ids(tokenizer, sw)) - 2, len(token_ids(tokenizer, tw)) - 2
        if i + a > n_src - 1 or j + b > n_tgt - 1:
            break  # truncated caption: the rest is treated as tail
        if a == b:
            for d in range(a):
                w[i + d][j + d] = 1.0
        else:
            for x in range(i, i + a):
                for y in range(j, j + b):
                    w[x][y] = 1.0 / a
        i, j = i + a, j + b
    for k in range(length - j):
        w[min(i + k, length - 1)][j + k] = 1.0
    return w


def same_word_count(source: str, target: str, token_mapping: str) -> bool:
    """Whether the two captions have as many words as each other, words as the rule set splits them."""
    if token_mapping == "reference":
        return len(source.split(" ")) == len(target.split(" "))
    return len(source.split()) == len(target.split())

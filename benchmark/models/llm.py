"""The local language model behind AugCLIP's `LLMExtractor` and BPM's `LLMInstructionParser`: any transformers causal LM by hub id (pinned revision), or a
tiny random model of the same class for tests, loaded through the same `from_pretrained` call.

Default: Qwen/Qwen2.5-0.5B-Instruct (small enough for CPU; the paper used GPT-4V, which cannot run locally). The
tiny stand-in is a `Qwen2ForCausalLM` with small widths and a real `Qwen2Tokenizer` (byte-level BPE, Qwen's
pre-tokenisation) whose vocabulary holds the 256 byte symbols and no merges: Qwen's 151k-token vocabulary cannot
be fetched offline, and a vocabulary size is a size. Its chat template is ChatML, the format Qwen's uses.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

LLM_ID = "Qwen/Qwen2.5-0.5B-Instruct"
LLM_REVISION = "7ae557604adf67be50417f59c2c2f167def9a775"  # pinned in several public projects; the hub's main of 2024-09
# Qwen/Qwen2.5-0.5B-Instruct's config.json (what `random` builds; the model-pair test compares the tiny one with it)
BASE_LLM_CONFIG = {"hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
                   "max_position_embeddings": 32768, "max_window_layers": 21, "num_attention_heads": 14,
                   "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                   "sliding_window": 32768, "tie_word_embeddings": True, "use_sliding_window": False,
                   "attention_dropout": 0.0, "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645}
TINY_LLM_SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "num_hidden_layers": 2, "max_window_layers": 2}
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TINY_SEED = 0


def _tiny_tokenizer() -> Any:
    from transformers import Qwen2Tokenizer

    from benchmark.models.tokenizer import _byte_symbols

    vocab = {s: i for i, s in enumerate(_byte_symbols())}
    for t in SPECIALS:
        vocab[t] = len(vocab)
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=SPECIALS[0], eos_token=SPECIALS[2], pad_token=SPECIALS[0])
    tok.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    tok.chat_template = CHATML
    return tok


def _builder(config: dict[str, Any]):
    def build(path: Path) -> None:
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        tok = _tiny_tokenizer()
        ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
        cfg = Qwen2Config(**{**config, "vocab_size": len(tok), "bos_token_id": ids["<|endoftext|>"],
                             "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]})
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)
            Qwen2ForCausalLM(cfg).save_pretrained(path)
        tok.save_pretrained(path)
        (path / "editmeter-tiny.json").write_text(json.dumps({"sizes": TINY_LLM_SIZES}))

    return build


def llm_name(weights: str, model_id: str = LLM_ID, revision: str = LLM_REVISION) -> str:
    """The model's identity as it enters the extractor's signature (known before anything is loaded)."""
    return f"{model_id}@{revision}" if check_source(weights) == "pretrained" else f"qwen2-{weights}"


@functools.lru_cache(maxsize=2)
def load_causal_lm(weights: str = "pretrained", model_id: str = LLM_ID, revision: str = LLM_REVISION,
                   device: str = "cpu") -> tuple[Any, Any, str]:
    """(model, tokenizer, name) through `AutoModelForCausalLM` / `AutoTokenizer.from_pretrained`: the hub id
    (pretrained), or a cached folder of random weights (tiny: small widths; random: Qwen2.5-0.5B's shape)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = check_source(weights)
    if source == "pretrained":
        location, kwargs = model_id, {"revision": revision}
    else:
        if model_id != LLM_ID:
            raise ValueError(f"weights={source} builds a random {LLM_ID}-shaped model; model_id {model_id!r} has no "
                             "random stand-in (use weights=pretrained)")
        sizes = TINY_LLM_SIZES if source == "tiny" else {}
        config = {k: v for k, v in {**BASE_LLM_CONFIG, **sizes}.items()}
        location, kwargs = str(tiny_model_dir(f"qwen2-{source}", config, _builder(config))), {}
    try:
        tok = AutoTokenizer.from_pretrained(location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("the AugCLIP attribute LLM", f"{model_id}@{revision}", err) from err
    return model.to(device).eval(), tok, llm_name(weights, model_id, revision)


def generate_greedy(model: Any, tokenizer: Any, prompts: list[str], *, max_new_tokens: int, batch_size: int = 8,
                    device: str = "cpu") -> list[str]:
    """Greedy completions (the new text only) of `prompts`, each wrapped in the tokenizer's chat template when it
    has one; left padding so every prompt ends where generation starts."""
    import torch

    tok = tokenizer
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    def chat(p: str) -> str:
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        return p

    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        enc = tok([chat(p) for p in prompts[i : i + batch_size]], return_tensors="pt", padding=True)
        enc = {k: v.to(device) for k, v in enc.items()}
        with torch.inference_mode():
            gen = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out

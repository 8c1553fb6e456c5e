"""PIE-Bench's P2P setting: LocalBlend over the query's blended_word and the blended word's re-weighting, as the
authors' code (cure-lab/PnPInversion, models/p2p/attention_control.py) does them. The masks below are worked out by
hand from their rules (sum the word's maps, 3x3 max-pool, nearest upsampling, divide by the maximum, threshold,
union of source and target), not computed by the code under test."""

import sys
from pathlib import Path

import pytest
import torch
from device_guard import MODEL_DEVICE, ModelDeviceGuard, pipeline_modules

from benchmark.editing import attention
from benchmark.editing import inversion as inv
from benchmark.editing.attention import AttentionController, LocalBlend, TokenEdit, controlled_attention

pytestmark = pytest.mark.usefixtures("single_thread_torch")

K = 8  # text positions of the synthetic maps


def maps(cells: dict[tuple[int, int, int, int], float], heads: int = 2, side: int = 4) -> torch.Tensor:
    """(heads, side^2, K) attention maps, zero but for {(head, row, col, token): value}."""
    m = torch.zeros(heads, side * side, K)
    for (h, r, c, k), v in cells.items():
        m[h, r * side + c, k] = v
    return m


# source: the word (token 2) at (0, 0), 0.6 + 0.4 over two heads; token 5 (not the word) is large everywhere.
SOURCE = maps({(0, 0, 0, 2): 0.6, (1, 0, 0, 2): 0.4}) + maps({(h, r, c, 5): 9.0 for h in range(2) for r in range(4)
                                                              for c in range(4)})
# target: the word is tokens 3 and 4: 0.3 + 0.2 at (3, 3), and 0.1 at (2, 0)
TARGET = maps({(0, 3, 3, 3): 0.3, (1, 3, 3, 4): 0.2, (0, 2, 0, 3): 0.1})


def blend_of(pairs, words, *, threshold=0.3, start=0.0, num_steps=10):
    """A LocalBlend over queries' (source maps, target maps), each collected as one layer."""
    lb = LocalBlend(words, num_steps=num_steps, start=start, threshold=threshold, map_side=4, num_tokens=K)
    lb.collect(torch.stack([torch.stack(p) for p in pairs]))  # (B, 2, heads, 16, K)
    return lb


def grid(rows: list[str]) -> torch.Tensor:
    return torch.tensor([[ch == "#" for ch in row] for row in rows])


def test_hand_worked_mask_pools_normalises_thresholds_and_unites():
    # After the 3x3 max-pool the source is 1 on rows 0-1 x cols 0-1; the target 0.5 on rows 2-3 x cols 2-3 and 0.1
    # on rows 1-3 x cols 0-1. Divided by the maximum: target 1 and 0.2. At 0.3 the target keeps only its peak.
    lb = blend_of([(SOURCE, TARGET)], [([2], [3, 4])])
    expect = grid(["##..",
                   "##..",
                   "..##",
                   "..##"])
    got = lb.mask((4, 4))
    assert got.shape == (1, 1, 4, 4) and got.dtype == torch.bool
    assert torch.equal(got[0, 0], expect)
    # at 0.15 the target's 0.2 (0.1 before the division: normalisation matters) joins
    low = blend_of([(SOURCE, TARGET)], [([2], [3, 4])], threshold=0.15)
    assert torch.equal(low.mask((4, 4))[0, 0], grid(["##..", "##..", "####", "####"]))
    # upsampled to the latent size by nearest neighbour: each map cell is a 2x2 block of an 8x8 latent
    big = lb.mask((8, 8))[0, 0]
    assert torch.equal(big, expect.repeat_interleave(2, 0).repeat_interleave(2, 1))


def test_mask_is_the_union_and_a_word_without_tokens_adds_nothing():
    # source word not in its caption: its maps are 0, 0 / 0 is NaN, never above the threshold (the authors' code)
    target_only = blend_of([(SOURCE, TARGET)], [([], [3, 4])]).mask((4, 4))[0, 0]
    assert torch.equal(target_only, grid(["....", "....", "..##", "..##"]))
    source_only = blend_of([(SOURCE, TARGET)], [([2], [])]).mask((4, 4))[0, 0]
    assert torch.equal(source_only, grid(["##..", "##..", "....", "...."]))
    assert not blend_of([(SOURCE, TARGET)], [([], [])]).mask((4, 4)).any()


def test_mask_sums_layers_and_steps_and_ignores_scale():
    # every collected layer and step adds to one running sum: a second, equal call changes nothing after the
    # normalisation, and neither does scaling the maps
    once = blend_of([(SOURCE, TARGET)], [([2], [3, 4])])
    twice = blend_of([(SOURCE, TARGET)], [([2], [3, 4])])
    twice.collect(torch.stack([torch.stack((SOURCE * 3, TARGET * 3))]))
    assert torch.equal(once.mask((4, 4)), twice.mask((4, 4)))
    # a later step adds the target word at (0, 3) with 4.0: the new maximum. The earlier sums stay: (3, 3) holds
    # 0.5 + 1.5 = 2.0, half the maximum, still in; (2, 0) holds 0.4, a tenth, now out
    twice.collect(torch.stack([torch.stack((SOURCE * 0, maps({(0, 0, 3, 3): 4.0})))]))
    assert torch.equal(twice.mask((4, 4))[0, 0], grid(["####", "####", "..##", "..##"]))
    # another resolution is not collected
    before = twice.maps.clone()
    twice.collect(torch.ones(1, 2, 2, 64, K))
    assert torch.equal(twice.maps, before)


def test_blend_keeps_the_source_outside_the_mask_exactly():
    lb = blend_of([(SOURCE, TARGET)], [([2], [3, 4])], start=0.2, num_steps=10)  # blends from step int(2.0) = 2
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(lb(1, x), x)  # before the start step
    out = lb(2, x)
    mask = lb.mask((8, 8))[0].expand(4, 8, 8)
    src, tgt = x[0], x[1]
    assert torch.equal(out[0], src)  # the source branch is never changed
    assert torch.equal(out[1][~mask], src[~mask])  # outside: the source, exactly
    assert torch.equal(out[1][mask], (src + (tgt - src))[mask])  # inside: the authors' x0 + 1 * (x1 - x0)
    torch.testing.assert_close(out[1][mask], tgt[mask])
    assert 0 < mask.float().mean() < 1


def test_a_batch_of_two_equals_one_by_one_and_a_query_without_words_is_left_alone():
    other_src, other_tgt = maps({(1, 1, 2, 1): 0.7}), maps({(0, 3, 0, 6): 0.2})
    x = torch.randn(4, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    both = blend_of([(SOURCE, TARGET), (other_src, other_tgt)], [([2], [3, 4]), ([1], [6])])
    first = blend_of([(SOURCE, TARGET)], [([2], [3, 4])])
    second = blend_of([(other_src, other_tgt)], [([1], [6])])
    assert torch.equal(both.mask((8, 8)), torch.cat([first.mask((8, 8)), second.mask((8, 8))]))
    assert torch.equal(both(5, x), torch.cat([first(5, x[:2]), second(5, x[2:])]))
    # the second query without a blended word: its rows go through unchanged, the first is blended as before
    partial = blend_of([(SOURCE, TARGET), (other_src, other_tgt)], [([2], [3, 4]), None])
    out = partial(5, x)
    assert torch.equal(out[2:], x[2:]) and torch.equal(out[:2], first(5, x[:2]))


def test_the_controller_hands_over_the_edited_down_and_up_cross_attention_maps():
    """The maps collected are the target's after the controller's edit (re-weighting included), as the authors'
    attention store holds them; mid-block, self-attention and unknown layers are not collected."""
    eq = torch.ones(K)
    eq[3] = 2.0
    edit = TokenEdit("replace", mapper=torch.eye(K), equalizer=eq)  # target maps = source maps, token 3 doubled
    lb = LocalBlend([([2], [3])], num_steps=4, start=0.0, threshold=0.3, map_side=4, num_tokens=K)
    ctrl = AttentionController([edit], num_steps=4, cross_replace_steps=1.0, self_replace_steps=0.0,
                               self_replace_max_tokens=1024, blend=lb)
    src = maps({(0, 1, 1, 2): 0.5, (1, 1, 1, 3): 0.25})
    probs = torch.stack([torch.rand(2, 16, K), torch.rand(2, 16, K), src, torch.rand(2, 16, K)]).view(-1, 16, K)
    for place in ("mid", None):
        ctrl(probs, True, 2, place)
    ctrl(probs, False, 2, "down")
    assert lb.maps is None
    ctrl(probs, True, 2, "up")
    # source: token 2's 0.5 at cell 5; target: the source's token 3 (0.25) doubled by the equalizer
    want = torch.zeros(1, 2, 16)
    want[0, 0, 5], want[0, 1, 5] = 0.5, 0.5
    assert torch.equal(lb.maps, want)
    with pytest.raises(ValueError, match="LocalBlend built for 1 queries, controller for 2"):
        AttentionController([edit, edit], num_steps=4, cross_replace_steps=1.0, self_replace_steps=0.0,
                            self_replace_max_tokens=1024, blend=lb)


def test_start_and_threshold_are_checked():
    with pytest.raises(ValueError, match="local_blend_threshold 1.0 is not in"):
        LocalBlend([None], num_steps=4, start=0.2, threshold=1.0, map_side=4)
    with pytest.raises(ValueError, match="local_blend_start 1.5 is not a fraction"):
        LocalBlend([None], num_steps=4, start=1.5, threshold=0.3, map_side=4)
    assert LocalBlend([None], num_steps=50, start=0.2, threshold=0.3, map_side=4).start_step == 10


# --- on the tiny UNet ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sd():
    from benchmark.models.diffusion import load_pipeline, set_scheduler

    # on `cpu:0`, the stand-in for a GPU that ModelDeviceGuard checks the blend's tensors against
    pipe, _ = load_pipeline("sd", weights="tiny", model_id="unused", revision="unused", device=str(MODEL_DEVICE))
    set_scheduler(pipe, "DDIMScheduler")
    return pipe


@pytest.fixture(scope="module")
def sd64(sd):
    """The tiny pipeline in float64, for claims that two computations agree: in float32 a batch of two and one by one
    differ by another batch size's CPU kernel rounding (0 on some machines, 1.6e-5 of latents ~13 on others, over
    the 3 guided steps); in float64 that rounding sits ~1e-15 below the float32 noise the sampler keeps."""
    import copy

    return copy.deepcopy(sd).to(dtype=torch.float64)


NOISE = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(0))


def _sample_with_blend(sd, pairs, words, noise):
    n = 3
    with ModelDeviceGuard(pipeline_modules(sd)):  # every tensor the blend meets must be on the model's device
        edits = [attention.build_token_edit(sd.tokenizer, s, t, mode="refine") for s, t in pairs]
        side = attention.blend_map_side(sd.unet.config, 16)
        lb = LocalBlend(words, num_steps=n, start=0.0, threshold=0.9, map_side=side, device=sd.unet.device)
        ctrl = AttentionController(edits, num_steps=n, cross_replace_steps=0.4, self_replace_steps=0.6,
                                   self_replace_max_tokens=64, device=sd.unet.device, blend=lb)
        caps = [c for p in pairs for c in p]
        xT = noise.repeat_interleave(2, 0)  # [source, target] of each query from its x_T
        with controlled_attention(sd.unet, ctrl):
            places = {name.split(".")[0]: proc.place for name, proc in sd.unet.attn_processors.items()}
            out = inv.ddim_sample(sd.unet, inv.ddim_grid(sd.scheduler, n), xT, inv.encode_text(sd, caps),
                                  inv.encode_text(sd, [""] * len(caps)), 7.5,
                                  on_step=lambda i: setattr(ctrl, "step", i), after_step=lb)
    return lb, out, places


def test_on_the_unet_a_batch_of_two_equals_one_by_one(sd64):
    """Nothing mixes the queries of a batch. The UNet runs in float64 (`sd64`); its noise estimates are cast to
    float32 (`inversion._eps`), so the batch and one-by-one runs agree bit for bit unless a float64 result lands
    within ~1e-15 of a float32 rounding boundary; the tolerance (the float32 one, 1e-5 on latents ~13) is there for
    that case, and a mixed-up query is off by the latents' own size."""
    sd = sd64
    pairs = [("a cat sitting on a chair", "a dog sitting on a chair"), ("a red ball", "a red hat")]
    words = [([2], [2]), ([3], [3])]
    both, out, places = _sample_with_blend(sd, pairs, words, NOISE)
    assert places == {"down_blocks": "down", "mid_block": "mid", "up_blocks": "up"}
    assert attention.blend_map_side(sd.unet.config, 16) == 16  # the tiny UNet's cross-attention down level
    for k in range(2):
        one, own, _ = _sample_with_blend(sd, pairs[k:k + 1], words[k:k + 1], NOISE[k:k + 1])
        torch.testing.assert_close(both.maps[k:k + 1], one.maps, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(out[2 * k:2 * k + 2], own, rtol=1e-4, atol=1e-5)
    mask = both.mask((16, 16)).expand(-1, 4, -1, -1)
    assert torch.equal(out[1::2][~mask], out[0::2][~mask])
    assert 0 < mask.float().mean() < 1  # the 0.9 threshold leaves part of each latent out on the random weights


# --- the editor ---------------------------------------------------------------------------------------------------

def _editor_cfg(*extra):
    from benchmark.commands.run import compose

    cfg, _ = compose(["editor=p2p", "profile=tiny", *extra])
    return cfg.editor


@pytest.mark.parametrize(("override", "words"), [
    ("editor.local_blend=true", "local_blend must be false or blended_word"),
    ("editor.local_blend=word", "local_blend must be false or blended_word"),
    ("editor.blended_word_reweight=two", "blended_word_reweight must be null or a number"),
    ("editor.local_blend_threshold=1.5", "local_blend_threshold 1.5 is not in"),
])
def test_bad_settings_are_refused(override, words):
    from hydra.utils import instantiate

    with pytest.raises(Exception, match=words):
        instantiate(_editor_cfg(override))


def test_defaults_are_off_and_the_authors_constants():
    cfg = _editor_cfg()
    assert (cfg.local_blend, cfg.blended_word_reweight) == (False, None)
    assert (cfg.local_blend_start, cfg.local_blend_threshold) == (0.2, 0.3)


def test_equalizer_from_the_blended_word(sd):
    """eq_params {"words": (target word,), "values": (2,)}: the target caption's word tokens at 2, the rest 1; a word
    the caption only has with punctuation ("sea.") is not matched, as in the authors' code."""
    from types import SimpleNamespace

    from hydra.utils import instantiate

    editor = instantiate(_editor_cfg("editor.blended_word_reweight=2", "editor.mode=refine"))
    q = SimpleNamespace(id="q", blended_word="cat dog")
    words = editor._blended_words(q)
    assert words == ("cat", "dog") and editor._reweight(words) == {"dog": 2.0}
    e = attention.build_token_edit(editor.pipe.tokenizer, "a cat sitting on a chair", "a dog sitting on a chair",
                                   mode="refine", reweight=editor._reweight(words))
    assert torch.nonzero(e.equalizer != 1).flatten().tolist() == [2] and e.equalizer[2] == 2.0  # B a(1) dog(2)
    unmatched = attention.build_token_edit(editor.pipe.tokenizer, "a bird in the sky.", "a bird in the sea.",
                                           mode="refine", reweight=editor._reweight(("sky", "sea")))
    assert torch.equal(unmatched.equalizer, torch.ones(77))
    assert editor._blended_words(SimpleNamespace(id="n", blended_word=None)) is None
    assert editor.work["blended_word_absent"] == 1
    with pytest.raises(ValueError, match="query b: blended_word 'a b c' is not two space-separated words"):
        editor._blended_words(SimpleNamespace(id="b", blended_word="a b c"))


def test_pie_run_with_local_blend_keeps_the_source_outside_the_mask(tmp_path, monkeypatch):
    """The harness on a PIE-Bench fixture with the official setting and Direct Inversion: in every blended query's
    final latents the target equals the source branch's reconstruction outside the mask (so the blend runs after
    Direct Inversion's source offset, as the authors' step does); a query without a blended_word is not blended and
    is counted; one whose words are no words of its captions is counted (its empty mask makes it the source)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_pie_queryset import box, encode, write_release

    from benchmark.commands.run import compose, run_pipeline
    from benchmark.querysets.pie import build

    m = encode(box(100, 300, 100, 300))
    entries = [
        ("111000000001", "1/111000000001.jpg", "a [cat] sitting on a chair", "a [dog] sitting on a chair", "i", "1",
         "cat dog", m),
        ("111000000002", "1/111000000002.jpg", "a red [ball] on the grass", "a red [hat] on the grass", "i", "1",
         "ball hat", m),
        ("300000000003", "3/300000000003.jpg", "a bird [and a cloud] in the sky", "a bird in the sky", "i", "3", "",
         m),
        ("111000000004", "1/111000000004.jpg", "a bird in the [sky].", "a bird in the [sea].", "i", "1", "sky sea",
         m),
    ]
    build(write_release(tmp_path / "data", entries), tmp_path / "pie")
    calls, finals = [], []
    blend_call, sample = LocalBlend.__call__, inv.ddim_sample

    def spy_blend(self, step, x):
        out = blend_call(self, step, x)
        calls.append((self.active.clone(), x.clone(), out.clone(), self.mask(x.shape[-2:])))
        return out

    def spy_sample(*a, **kw):
        finals.append(sample(*a, **kw))
        return finals[-1]

    monkeypatch.setattr(LocalBlend, "__call__", spy_blend)
    monkeypatch.setattr(inv, "ddim_sample", spy_sample)
    cfg, choices = compose(["editor=p2p", "queryset=pie", f"queryset.root={tmp_path / 'pie'}", "profile=tiny",
                            f"paths.results={tmp_path / 'results'}", "progress=false", "stages=[edit]",
                            "preflight=false", "batch_size=2", "editor.inversion=direct",
                            "editor.cross_replace_steps=0.4", "editor.self_replace_steps=0.6", "editor.mode=refine",
                            "editor.local_blend=blended_word", "editor.blended_word_reweight=2",
                            # the random weights' attention is diffuse: at 0.3 every position is in the mask
                            "editor.local_blend_threshold=0.92"])
    st = run_pipeline(cfg, choices["editor"])["edit"]
    assert (st.computed, st.failed) == (4, 0)
    assert (st.work["local_blends"], st.work["blended_word_absent"], st.work["blended_word_unmatched"]) == (3, 1, 1)
    n = int(cfg.editor.steps)
    assert len(calls) == 2 * n and len(finals) == 2  # two batches: [cat, ball], [cloud (no word), sky.]
    for b, final in enumerate(finals):
        active, _, out, mask = calls[(b + 1) * n - 1]
        assert torch.equal(out, final)  # the blended latents are the sampler's result
        src, tgt = final[0::2], final[1::2]
        for k in range(2):
            if not active[k]:  # no blended_word: the blend never touched its target
                assert all(torch.equal(c[2][2 * k + 1], c[1][2 * k + 1]) for c in calls[b * n:(b + 1) * n])
                continue
            outside = ~mask[k].expand_as(src[k])
            assert torch.equal(tgt[k][outside], src[k][outside])
            if b == 0:  # a real word pair: part of the latent is the target's own
                assert 0 < (~outside).float().mean() < 1 and not torch.equal(tgt[k], src[k])
            else:  # "sky" / "sea" match no word of "... sky." / "... sea.": empty mask, the target is the source
                assert not mask[k].any() and torch.equal(tgt[k], src[k])

"""Prompt-to-Prompt equal to the authors' code (google/prompt-to-prompt): token mappers, the cross-attention window,
word lookup for re-weighting, and null-text optimisation's Adam steps. Every expected value below was worked out by
hand from the authors' rules (described in benchmark/editing/token_maps.py), not computed by the code under test."""

from types import SimpleNamespace

import pytest
import torch

from benchmark.editing import inversion as inv
from benchmark.editing import token_maps as tm
from benchmark.editing.attention import AttentionController, build_token_edit

pytestmark = pytest.mark.usefixtures("single_thread_torch")

# token ids standing for start of text (B), words (a, b, c, d, x) and end of text (E)
B, A, BB, C, D, X, E = 100, 1, 2, 3, 4, 5, 99


@pytest.fixture(scope="module")
def tok():
    from benchmark.models.tokenizer import build_clip_tokenizer

    return build_clip_tokenizer()


# --- refinement: the global alignment ---------------------------------------------------------------------------

def test_alignment_of_an_inserted_token():
    # source B a c E, target B a x c E: x is new (own map), the rest pair up
    assert tm.global_alignment([B, A, C, E], [B, A, X, C, E]) == [0, 1, -1, 2, 3]
    mapper, alphas = tm.reference_refinement([B, A, C, E], [B, A, X, C, E], 8)
    # padding (positions 5..7) maps onto the same positions of the source, alpha 1
    assert mapper == [0, 1, 0, 2, 3, 5, 6, 7] and alphas == [1, 1, 0, 1, 1, 1, 1, 1]
    # the earlier rule aligned the padding tails from the end of each caption instead
    assert tm.aligned_refinement([B, A, C, E], [B, A, X, C, E], 8)[0][5:] == [4, 5, 6]


def test_alignment_of_a_substituted_token_keeps_its_own_map():
    # B a c E -> B a d E: the reference never pairs different tokens (d keeps its own attention) ...
    assert tm.global_alignment([B, A, C, E], [B, A, D, E]) == [0, 1, -1, 3]
    # ... where the earlier rule mapped a one-for-one substitution onto the replaced token
    mapper, alphas = tm.aligned_refinement([B, A, C, E], [B, A, D, E], 4)
    assert mapper[2] == 2 and alphas[2] == 1.0


def test_alignment_ties_break_as_the_reference_does():
    # B a b E -> B b a E: pairing a or pairing b score the same; the trace-back from the end prefers skipping a
    # target token first, which leaves the target's "a" unpaired and pairs the target's "b" with the source's.
    assert tm.global_alignment([B, A, BB, E], [B, BB, A, E]) == [0, 2, -1, 3]
    # difflib took the first longest block instead: the target's "a" paired, its "b" new
    mapper, alphas = tm.aligned_refinement([B, A, BB, E], [B, BB, A, E], 4)
    assert (mapper[2], alphas[2], alphas[1]) == (1, 1.0, 0.0)


# --- word swap ----------------------------------------------------------------------------------------------------

def test_swap_of_a_one_token_word_for_a_three_token_word_keeps_its_attention_mass():
    # source B a cat on E (cat at 2), target B a X1 X2 X3 on E (X at 2..4), 8 positions
    w = tm.reference_swap([([2], [2, 3, 4])], 8)
    for k in (2, 3, 4):
        assert w[2][k] == pytest.approx(1 / 3)  # 1 / len(target word tokens)
    assert w[0][0] == w[1][1] == 1.0
    # after the last swapped word the reference maps target position j onto source position j, so the target's
    # "on" (5) takes the source's position 5 (padding), not the source's "on" (3)
    assert w[5][5] == w[6][6] == w[7][7] == 1.0 and w[3][5] == 0.0
    assert sum(1 for row in w for v in row if v) == 2 + 3 + 3


def test_swap_of_a_three_token_word_for_a_one_token_word_adds_the_maps():
    # source B a Y1 Y2 Y3 on E, target B a cat on E
    w = tm.reference_swap([([2, 3, 4], [2])], 8)
    assert w[2][2] == w[3][2] == w[4][2] == 1.0  # 1 / len(target tokens) = 1: the maps add up
    # then target j takes source j: the target's "on" (3) takes the source's Y2 (3); positions 6, 7 are never reached
    assert w[3][3] == w[4][4] == w[5][5] == 1.0
    assert all(w[i][6] == 0 and w[i][7] == 0 for i in range(8))


def test_swap_with_captions_uses_the_target_word_token_count(tok):
    src, tgt = "a cat on the grass", "a snowmobile on the grass"
    n_cat = len(tm.token_ids(tok, "cat")) - 2
    n_new = len(tm.token_ids(tok, "snowmobile")) - 2
    assert (n_cat, n_new) == (1, 2)  # the premise: one token swapped for two
    e = build_token_edit(tok, src, tgt, mode="replace")
    assert e.mode == "replace"
    assert e.mapper[2, 2] == e.mapper[2, 3] == pytest.approx(1 / 2)
    old = build_token_edit(tok, src, tgt, mode="replace", token_mapping="aligned")
    assert old.mapper[2, 2] == old.mapper[2, 3] == 1.0  # 1 / len(source word tokens)


def test_auto_swaps_same_word_counts_and_refines_others(tok):
    assert build_token_edit(tok, "a red ball", "a blue ball", mode="auto").mode == "replace"
    assert build_token_edit(tok, "a ball", "a big red ball", mode="auto").mode == "refine"
    with pytest.raises(ValueError, match="same number of words"):
        build_token_edit(tok, "a ball", "a big red ball", mode="replace")


# --- word lookup for re-weighting -----------------------------------------------------------------------------------

def test_reweighting_finds_words_as_the_reference_does(tok):
    # "ball," is one space-separated word: "ball" does not select it (the earlier rule found the token run)
    assert tm.reference_word_positions(tok, "a ball, a cat", "ball") == []
    assert tm.aligned_word_positions(tok, "a ball, a cat", "ball") == [2]
    # tokens B a(1) ball(2) ,(3) a(4) cat(5) E: the word "ball," covers the word and its comma
    assert tm.reference_word_positions(tok, "a ball, a cat", "ball,") == [2, 3]
    assert tm.reference_word_positions(tok, "a cat and a cat", "cat") == [2, 5]
    assert tm.reference_word_positions(tok, "a cat and a cat", 3) == [4]
    e = build_token_edit(tok, "a ball, a dog", "a ball, a cat", mode="auto", reweight={"ball": 3.0, "cat": 2.0})
    assert torch.nonzero(e.equalizer != 1).flatten().tolist() == [5] and e.equalizer[5] == 2.0


# --- the cross-attention window -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "expected"), [(3, 3), (4, 4), (50, 40)])
def test_cross_attention_window_counts_n_plus_one_steps(n, expected):
    # int(0.8 * (n + 1)): 3.2 -> 3, 4.0 -> 4, 40.8 -> 40 (the earlier int(0.8 * n) gave 2, 3, 40)
    ctrl = AttentionController([], num_steps=n, cross_replace_steps=0.8, self_replace_steps=0.8,
                               self_replace_max_tokens=1024)
    assert ctrl.cross_until == expected
    assert ctrl.self_until == int(0.8 * n)  # self-attention counts n steps, as the authors' code does


# --- null-text optimisation: Adam sees the mean's gradient ----------------------------------------------------------

class LinearUNet(torch.nn.Module):
    """eps = w * emb[:, 0, 0] everywhere: d eps / d emb[0, 0, 0] = w, every other embedding element has no effect."""

    def __init__(self, w: float) -> None:
        super().__init__()
        self.w = w
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    @property
    def device(self):
        return torch.device("cpu")

    @property
    def dtype(self):
        return torch.float32

    def forward(self, x, t, encoder_hidden_states):
        return SimpleNamespace(sample=x * 0 + self.w * encoder_hidden_states[:, 0, 0].view(-1, 1, 1, 1))


def test_null_text_first_adam_step_is_the_unscaled_loss_step():
    """One step from a_t = 0.5 to the final alpha 1: pred = sqrt(2) x + c eps with c = sqrt(1 - 1) - sqrt(1) = -1.
    With x = 0, cond = 0 and the null embedding 0, eps = 0 and pred = 0; target = -delta everywhere, so
    dL/de = 2 delta * c * (1 - g) * w = 13 delta (g = 7.5, w = 1). delta = 1e-8 / 13 makes the gradient 1e-8 = Adam's
    eps, so Adam's first step is lr * g / (|g| + eps) = lr / 2. A loss scaled by the 16 latent elements without
    scaling eps would step lr * 16 / 17 instead."""
    lr, delta = 0.01, 1e-8 / 13
    grid = inv.DDIMGrid(torch.tensor([500]), torch.full((1000,), 0.5), 1.0, 1000)
    x_t = torch.zeros(1, 4, 2, 2)
    traj = [torch.full((1, 4, 2, 2), -delta), x_t]
    nulls = inv.null_text_optimise(LinearUNet(1.0), grid, traj, torch.zeros(1, 2, 3), torch.zeros(1, 2, 3),
                                   guidance=7.5, inner_steps=1, lr=lr, lr_decay=0.01, early_stop=0.0,
                                   early_stop_growth=0.0)
    e = nulls[0]
    assert e[0, 0, 0].item() == pytest.approx(-lr / 2, rel=1e-5)
    assert e[0, 0, 0].item() != pytest.approx(-lr * 16 / 17, rel=1e-3)
    assert torch.count_nonzero(e) == 1  # elements without gradient do not move


def test_loss_scale_is_a_power_of_two_at_least_the_element_count():
    assert [inv.loss_scale(n) for n in (1, 2, 3, 1024, 1025, 16384)] == [1, 2, 4, 1024, 2048, 16384]


def test_null_text_with_the_tiny_unet_equals_the_unscaled_loss_bit_for_bit(source_pair):
    """A power-of-two loss scale, undone on the fp32 gradient, is exact: the optimised embeddings equal a plain
    loop over the unscaled mean loss (the authors' loss) with Adam's defaults, to the bit, in fp32."""
    sd, x0, cond, empty = source_pair
    grid = inv.ddim_grid(sd.scheduler, 2)
    traj = inv.ddim_invert(sd.unet, grid, x0, cond)
    kw = dict(guidance=7.5, inner_steps=2, lr=0.01, lr_decay=0.01, early_stop=0.0, early_stop_growth=0.0)
    ours = inv.null_text_optimise(sd.unet, grid, traj, cond, empty, **kw)

    plain, x, e = [], traj[-1], empty.clone()
    for i, t in enumerate(grid.timesteps.tolist()):
        a_t, a_prev = grid.alpha(t), grid.alpha(t - grid.stride)
        with torch.no_grad():
            eps_c = inv._eps(sd.unet, x, t, cond)
        e = e.detach().clone().requires_grad_(True)
        opt = torch.optim.Adam([e], lr=0.01 * (1 - 0.01 * i))
        for _ in range(2):
            eps_u = inv._eps(sd.unet, x, t, e)
            pred = inv.ddim_move(x, eps_u + 7.5 * (eps_c - eps_u), a_t, a_prev)
            loss = ((pred - traj[len(traj) - i - 2]) ** 2).flatten(1).mean(1).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        plain.append(e.detach())
        with torch.no_grad():
            x = inv.ddim_move(x, inv.guided_eps(sd.unet, x, t, e, cond, 7.5), a_t, a_prev)
    for a, b in zip(ours, plain, strict=True):
        assert torch.equal(a, b)


@pytest.fixture(scope="module")
def source_pair(demo_qs):
    from benchmark.io.imageio import load_rgb
    from benchmark.models.diffusion import load_pipeline, set_scheduler

    pipe, _ = load_pipeline("sd", weights="tiny", model_id="unused", revision="unused", device="cpu")
    set_scheduler(pipe, "DDIMScheduler")
    q = demo_qs.queries[0]
    image = load_rgb(demo_qs.path(q.image)).resize((32, 32))
    return (pipe, inv.encode_images(pipe, [image]), inv.encode_text(pipe, [q.source_caption]),
            inv.encode_text(pipe, [""]))

"""P2P's three inversions, as PIE-Bench compares them: null-text (Mokady et al.), negative-prompt (Miyake et al.) and
Direct Inversion (Ju et al., PnP Inversion). Each is pinned by what its authors' code does to the source branch,
and by the UNet work it costs, counted through the harness."""

from pathlib import Path

import pytest
import torch

from benchmark.commands.run import compose, run_pipeline
from benchmark.editing import inversion as inv
from benchmark.editing.work_counter import UNET_FORWARD, UNET_FORWARD_BACKWARD


@pytest.fixture(scope="module")
def tiny_sd(demo_qs):
    from benchmark.io.imageio import load_rgb
    from benchmark.models.diffusion import load_pipeline, set_scheduler

    pipe, _ = load_pipeline("sd", weights="tiny", model_id="unused", revision="unused", device="cpu")
    set_scheduler(pipe, "DDIMScheduler")
    q = demo_qs.queries[0]
    images = [load_rgb(demo_qs.path(demo_qs.queries[i].image)).resize((32, 32)) for i in (0, 7)]
    src = inv.encode_text(pipe, [demo_qs.queries[i].source_caption for i in (0, 7)])
    return pipe, inv.encode_images(pipe, images), src, inv.encode_text(pipe, [""] * 2), q


@pytest.mark.parametrize("steps", [1, 3, 5])
def test_direct_inversion_source_branch_retraces_the_trajectory(tiny_sd, steps):
    """Sampling with the empty null text at guidance 7.5, plus each step's offset, lands on every latent of the DDIM
    inversion in turn (the authors' claim, to float rounding), while plain sampling does not: the offsets are not
    zero, and each is measured from the trajectory's own latent."""
    pipe, x0, src, empty, _ = tiny_sd
    grid = inv.ddim_grid(pipe.scheduler, steps)
    traj = inv.ddim_invert(pipe.unet, grid, x0, src)
    offsets = inv.direct_offsets(pipe.unet, grid, traj, src, empty, guidance=7.5)
    assert len(offsets) == steps and all(o.shape == x0.shape and o.dtype == torch.float32 for o in offsets)
    assert all(o.abs().max() > 1e-4 for o in offsets)

    # one corrected step from each trajectory latent lands on the next one (one float rounding apart)
    for i, t in enumerate(grid.timesteps.tolist()):
        x = traj[steps - i]
        step = inv.ddim_move(x, inv.guided_eps(pipe.unet, x, t, empty, src, 7.5), grid.alpha(t),
                             grid.alpha(t - grid.stride))
        torch.testing.assert_close(step + offsets[i], traj[steps - i - 1], atol=1e-6, rtol=1e-6)

    # the whole corrected walk stays on the trajectory (rounding, amplified by the guided steps, aside); an
    # uncorrected walk drifts away by orders of magnitude more
    visited = []

    def correct(i, x):
        x = x + offsets[i]
        visited.append(x)
        return x

    out = inv.ddim_sample(pipe.unet, grid, traj[-1], src, empty, 7.5, after_step=correct)
    plain = inv.ddim_sample(pipe.unet, grid, traj[-1], src, empty, 7.5)
    drift = (plain - traj[0]).abs().max()
    assert drift > 1e-2
    for i, x in enumerate(visited):
        assert (x - traj[steps - i - 1]).abs().max() < 1e-3 * max(1.0, float(drift))
    assert torch.equal(out, visited[-1])


def test_direct_offsets_of_a_batch_equal_one_by_one(tiny_sd):
    """Nothing mixes queries: offsets of two sources together equal each source's own (to the rounding that another
    batch size's kernels bring, carried through the inversion; a mixed-up query would be off by the offsets' size)."""
    pipe, x0, src, empty, _ = tiny_sd
    grid = inv.ddim_grid(pipe.scheduler, 3)
    both = inv.direct_offsets(pipe.unet, grid, inv.ddim_invert(pipe.unet, grid, x0, src), src, empty, guidance=7.5)
    for k in range(2):
        traj = inv.ddim_invert(pipe.unet, grid, x0[k : k + 1], src[k : k + 1])
        own = inv.direct_offsets(pipe.unet, grid, traj, src[k : k + 1], empty[k : k + 1], guidance=7.5)
        for a, b in zip(both, own, strict=True):
            assert (a[k : k + 1] - b).abs().max() < 1e-3 * max(1e-2, float(b.abs().max()))


def test_negative_prompt_source_branch_ignores_guidance(tiny_sd):
    """With the source caption as its own null text, eps_u + w (eps_c - eps_u) = eps_c whatever w: the source branch
    is plain conditional DDIM sampling, at guidance 1 or 7.5 alike.

    eps_u and eps_c are two rows of one batched UNet call on equal inputs; in float32 some CPUs' kernels round the
    rows differently (~1e-6, test_diffusion), which w - 1 = 6.5 and three steps amplify. The samplings therefore run
    on a float64 copy of the UNet, whose estimates `_eps` casts to float32: equal rows then round to equal float32
    values, and the tolerance only covers the float32 arithmetic of the guidance formula itself."""
    import copy

    pipe, x0, src, _, _ = tiny_sd
    grid = inv.ddim_grid(pipe.scheduler, 3)
    x_t = inv.ddim_invert(pipe.unet, grid, x0, src)[-1]
    unet64 = copy.deepcopy(pipe.unet).to(dtype=torch.float64)
    at_1 = inv.ddim_sample(unet64, grid, x_t, src, src, 1.0)
    at_7 = inv.ddim_sample(unet64, grid, x_t, src, src, 7.5)
    torch.testing.assert_close(at_1, at_7, atol=1e-5, rtol=1e-5)
    with_empty = inv.ddim_sample(unet64, grid, x_t, src, inv.encode_text(pipe, [""] * 2), 7.5)
    assert (with_empty - at_7).abs().max() > 1e-3


# --- through the harness --------------------------------------------------------------------------------------------

SHARD = ("shard.count=4", "batch_size=2")  # demo_mini's queries 0, 4, 8, 12: two of each of two sources


def _run(results, *extra):
    cfg, choices = compose(["editor=p2p", "queryset=demo_mini", "profile=tiny", f"paths.results={results}",
                            "progress=false", "stages=[edit]", "preflight=false", *extra])
    return cfg, run_pipeline(cfg, choices["editor"])


@pytest.mark.parametrize("inversion", ["negative_prompt", "direct"])
def test_each_inversion_costs_what_its_algorithm_does(tmp_path, capsys, inversion):
    """Per source: DDIM inversion n rows; Direct Inversion adds one guided step from each trajectory latent (2 rows
    per step); negative-prompt nothing more. No backward pass in either. Per query: guided sampling of source and
    target side by side (4 rows per step). The counts are printed with the stage."""
    cfg, summary = _run(tmp_path, f"editor.inversion={inversion}", *SHARD)
    st = summary["edit"]
    n, q, sources = int(cfg.editor.steps), st.computed, st.work["inversions_computed"]
    assert (q, st.failed, sources, st.work["inversions_reused"]) == (4, 0, 2, 4)
    per_source = n + (2 * n if inversion == "direct" else 0)
    assert st.work[UNET_FORWARD] == sources * per_source + q * 4 * n
    assert st.work[UNET_FORWARD_BACKWARD] == 0
    per_query = st.work[UNET_FORWARD] / q
    shown = f"{per_query:,.0f}" if per_query.is_integer() else f"{per_query:,.1f}"
    out = capsys.readouterr().out
    assert f"UNet per query: {shown} forward, 0 forward+backward" in out
    # the local blend's counters exist only where an option reads the blended words
    assert not {"local_blends", "blended_word_absent", "blended_word_unmatched"} & set(st.work)
    assert "blended_word" not in out


def test_inversions_are_stored_apart_and_name_the_editor(tmp_path):
    """Three inversions of the same sources in one results folder: each computes its own (the stored tensors
    differ), a rerun of one reuses its own, their edits differ, and each run's editor signature names its
    inversion."""
    pngs, signatures = {}, {}
    for inversion in ("null_text", "negative_prompt", "direct"):
        _, summary = _run(tmp_path, f"editor.inversion={inversion}", "limit=2")
        st = summary["edit"]
        assert st.work["inversions_computed"] == 1, inversion  # demo_mini's first two queries share one source
        run_dir = Path(summary["run_dir"])
        pngs[inversion] = {p.name: p.read_bytes() for p in (run_dir / "edits").glob("*.png")}
        signatures[inversion] = summary["editor_sig"]
    assert len(set(signatures.values())) == 3
    assert pngs["null_text"] != pngs["direct"] != pngs["negative_prompt"] != pngs["null_text"]
    assert len(list((tmp_path / "inversions").rglob("*.safetensors"))) == 3
    _, again = _run(tmp_path, "editor.inversion=direct", "limit=2", "editor.self_replace_steps=0.5")
    assert again["edit"].work["inversions_computed"] == 0 and again["edit"].work["inversions_reused"] == 2


def test_an_unknown_inversion_is_refused_with_the_choices():
    from hydra.utils import instantiate

    cfg, _ = compose(["editor=p2p", "profile=tiny", "editor.inversion=nulltext"])
    with pytest.raises(Exception, match="unknown inversion 'nulltext'.*null_text, negative_prompt, direct"):
        instantiate(cfg.editor)

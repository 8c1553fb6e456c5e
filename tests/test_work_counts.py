"""Cost is counted, not guessed: every edit stage records the UNet sample evaluations its editor made (forward, and
forward+backward where a gradient follows) and the inversions it computed or reused, in EditStats, run.json's
`edit_work` and the stage's console line. The counts are checked against what each editor's algorithm does."""

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.commands.run import compose, run_pipeline
from benchmark.editing.work_counter import UNET_FORWARD, UNET_FORWARD_BACKWARD, count_unet_calls, difference


class _Out:
    def __init__(self, sample):
        self.sample = sample


class _ToyUNet(torch.nn.Module):
    """Called like a diffusers UNet: (sample, timestep, encoder_hidden_states=...), returning `.sample` or a tuple."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()), requires_grad=False)

    def forward(self, sample, timestep, encoder_hidden_states=None, return_dict=True):
        out = sample * self.scale + (encoder_hidden_states.mean() if encoder_hidden_states is not None else 0)
        return _Out(out) if return_dict else (out,)


CALL = st.tuples(st.integers(1, 5),                                              # rows
                 st.sampled_from(["no_grad", "inference", "grad_plain", "grad_input", "grad_weights"]),
                 st.booleans(),                                                  # sample as keyword
                 st.booleans())                                                  # return_dict


@settings(max_examples=60, deadline=None)
@given(st.lists(CALL, max_size=12))
def test_every_call_adds_its_rows_to_forward_or_forward_backward(calls):
    """Rows of the latent input, counted as forward+backward exactly when the output requires a gradient (grad mode
    and a parameter or an input that requires one), else forward."""
    unet, work = _ToyUNet(), Counter()
    handle = count_unet_calls(unet, work)
    expected = Counter({UNET_FORWARD: 0, UNET_FORWARD_BACKWARD: 0})
    for rows, mode, as_kw, return_dict in calls:
        x, emb = torch.randn(rows, 2, 3, 3), torch.randn(rows, 4, 8)
        unet.scale.requires_grad_(mode == "grad_weights")
        if mode == "grad_input":
            emb.requires_grad_(True)
        ctx = {"no_grad": torch.no_grad, "inference": torch.inference_mode}.get(mode, torch.enable_grad)
        with ctx():
            if as_kw:
                unet(sample=x, timestep=1, encoder_hidden_states=emb, return_dict=return_dict)
            else:
                unet(x, 1, encoder_hidden_states=emb, return_dict=return_dict)
        backward = mode in ("grad_input", "grad_weights")
        expected[UNET_FORWARD_BACKWARD if backward else UNET_FORWARD] += rows
    assert dict(work) == dict(expected)
    handle.remove()
    unet(torch.randn(3, 2, 3, 3), 1)
    assert dict(work) == dict(expected)  # removed: no longer counted


def test_difference_keeps_zeros():
    assert difference({"a": 5, "b": 2}, {"a": 5, "b": 1}) == {"a": 0, "b": 1}
    assert difference({"a": 3, "c": 1}, {"a": 1}) == {"a": 2, "c": 1}


def _run(tmp_path, editor, *extra):
    cfg, choices = compose([f"editor={editor}", "queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path}",
                            "progress=false", "stages=[edit]", "preflight=false", *extra])
    return cfg, run_pipeline(cfg, choices["editor"])


def _edit_work(summary):
    return json.loads((Path(summary["run_dir"]) / "run.json").read_text())["edit_work"]


SHARD = "shard.count=4"  # with shard.index 0: queries 0, 4, 8, 12 of demo_mini, two of each source


def test_p2p_counts_what_null_text_inversion_and_prompt_to_prompt_do(tmp_path, capsys):
    """Tiny P2P (n DDIM steps, k null-text inner steps, early stop off: a loss is never below 0) on 4 queries of two
    sources (every 4th query of demo_mini, 7 per source), batches of 2. Per inversion: DDIM inversion n rows; null-text n conditional estimates, n x k inner
    steps with a backward, and n guided steps of 2 rows; per query: guided sampling of source and target side by
    side, 4 rows per step. A rerun edits nothing and records zeros."""
    cfg, summary = _run(tmp_path, "p2p", SHARD, "batch_size=2", "editor.null_text_early_stop=0",
                        "editor.null_text_early_stop_growth=0")
    st_ = summary["edit"]
    n, k, q = int(cfg.editor.steps), int(cfg.editor.null_text_inner_steps), st_.computed
    assert q == 4 and st_.failed == 0
    # inversions this call computed: one per query without sharing, one per distinct source with it (here 2)
    inversions = st_.work.get("inversions_computed", q)
    assert inversions in (2, q)
    assert st_.work[UNET_FORWARD] == inversions * (n + n + 2 * n) + q * 4 * n
    assert st_.work[UNET_FORWARD_BACKWARD] == inversions * n * k
    per_query = st_.work_per_query()
    assert per_query[UNET_FORWARD] == pytest.approx(st_.work[UNET_FORWARD] / q)
    out = capsys.readouterr().out
    fwd, bwd = (f"{per_query[key]:,.0f}" if per_query[key].is_integer() else f"{per_query[key]:,.1f}"
                for key in (UNET_FORWARD, UNET_FORWARD_BACKWARD))
    assert f"UNet per query: {fwd} forward, {bwd} forward+backward" in out
    first = _edit_work(summary)
    assert list(first.values()) == [{"queries": q, "work": st_.work, "per_query": per_query}]

    _, again = _run(tmp_path, "p2p", SHARD, "batch_size=2", "editor.null_text_early_stop=0",
                    "editor.null_text_early_stop_growth=0")
    st2 = again["edit"]
    assert st2.computed == 0 and {UNET_FORWARD, UNET_FORWARD_BACKWARD} <= set(st2.work)
    assert set(st2.work.values()) == {0}
    recorded = _edit_work(again)  # both invocations, by run id: the rerun's entry does not replace the first's
    assert recorded[summary["run_id"]] == first[summary["run_id"]]
    assert recorded[again["run_id"]] == {"queries": 0, "work": st2.work, "per_query": {}}


def test_ip2p_counts_three_rows_per_step_and_query(tmp_path, capsys):
    """InstructPix2Pix's guidance runs [text+image, image only, neither] in one UNet call: 3 rows per query and
    step, no backward, whatever the batches (3 queries in batches of 2)."""
    cfg, summary = _run(tmp_path, "ip2p", "limit=3", "batch_size=2")
    st_ = summary["edit"]
    steps = int(cfg.editor.steps)
    assert st_.computed == 3
    assert st_.work == {UNET_FORWARD: 3 * steps * 3, UNET_FORWARD_BACKWARD: 0}
    assert f"UNet per query: {3 * steps} forward, 0 forward+backward" in capsys.readouterr().out


def test_an_editor_that_counts_nothing_records_and_prints_nothing(tmp_path, capsys):
    _, summary = _run(tmp_path, "identity", "limit=3")
    assert summary["edit"].work == {}
    out = capsys.readouterr().out
    assert "UNet" not in out and "inversions" not in out
    meta = json.loads((Path(summary["run_dir"]) / "run.json").read_text())
    assert "edit_work" not in meta

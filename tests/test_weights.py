"""benchmark.plan.weights: resolution of every checkpoint a run loads, presence checks that agree with the loaders,
and idempotent fetching, against local servers on 127.0.0.1 (never the internet)."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import HELPERS, ROOT, child_pythonpath
from local_servers import FakeHub, FileServer, serving
from omegaconf import OmegaConf

from benchmark.commands.run import compose
from benchmark.plan import weights as W
from benchmark.plan.config import read_plan


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """Empty HF and torch hub caches, no proxy for 127.0.0.1."""
    hf = tmp_path / "hf"
    monkeypatch.setattr(W, "hf_cache_dir", lambda: hf)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return hf


def _pretrained_nodes(cfg):
    metrics = OmegaConf.to_container(cfg.metrics, resolve=True)
    return {f"metrics {p}" for p, n in W._walk(metrics, "") if n.get("weights") == "pretrained"}


@pytest.mark.parametrize("editor", ["ip2p", "sdedit"])
def test_every_pretrained_component_is_resolved_once(editor):
    cfg, _ = compose([f"editor={editor}", "metrics=hatie_vqa", "profile=pretrained"])
    found = W.resolve(read_plan(cfg), editor)
    assert len({c.key for c in found}) == len(found)
    assert {c.component for c in found} == {f"editor {editor}"} | _pretrained_nodes(cfg)
    assert {c.kind for c in found} <= {"hf-pipeline", "hf-model", "hf-file", "url"}
    ed = next(c for c in found if c.component.startswith("editor"))
    assert (ed.source, ed.revision) == (cfg.editor.model_id, cfg.editor.revision)
    # pinned wherever the loader pins: every hub model except open_clip's file (open_clip loads `main`)
    assert all(W._COMMIT.fullmatch(c.revision) for c in found if c.kind in ("hf-pipeline", "hf-model"))


@pytest.mark.parametrize("editor", ["ip2p", "identity"])
def test_tiny_profile_needs_nothing(editor, capsys):
    cfg, _ = compose([f"editor={editor}", "metrics=hatie_vqa", "profile=tiny"])
    assert W.resolve(read_plan(cfg), editor) == []
    assert W.main([f"editor={editor}", "metrics=hatie", "profile=tiny"]) == 0
    assert "nothing to download" in capsys.readouterr().out


def test_unknown_pretrained_component_is_reported_not_dropped():
    cfg, _ = compose(["profile=pretrained"])
    cfg.editor = OmegaConf.create({"_target_": "x.Editor", "weights": "pretrained"})
    cfg.metrics = OmegaConf.create({"m": {"_target_": "some.loader", "weights": "pretrained"}})
    found = W.resolve(read_plan(cfg), "x")
    assert {c.component: c.kind for c in found} == {"editor x": "unknown", "metrics m": "unknown"}
    assert {r["status"] for r in W.table_rows(found)} == {"unknown"}  # never claimed present, nor missing


def test_list_names_missing_checkpoints_and_the_fix(empty_caches, capsys):
    assert W.main(["--list", "editor=ip2p", "metrics=basic"]) == 0
    out = capsys.readouterr().out
    assert "missing  editor ip2p: timbrooks/instruct-pix2pix @ 31519b5cb02a7fd89b906d88731cd4d6a7bbf88d" in out
    assert str(empty_caches / "models--timbrooks--instruct-pix2pix") in out
    assert "1 checkpoints, 1 missing; download them with: editmeter weights editor=ip2p metrics=basic" in out


def test_fetch_offline_is_one_clear_error(empty_caches, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert W.main(["editor=ip2p", "metrics=basic"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert "HF_HUB_OFFLINE is set" in err[0] and err[1].startswith("  - editor ip2p: timbrooks/instruct-pix2pix @ ")
    assert err[2] == "Fix: run again with network access and HF_HUB_OFFLINE=0: HF_HUB_OFFLINE=0 editmeter weights editor=ip2p metrics=basic"


def test_url_fetch_checks_the_hash_and_is_idempotent(empty_caches, monkeypatch, capsys):
    import hashlib

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    data = os.urandom(4096)
    good = f"/w/tiny-{hashlib.sha256(data).hexdigest()[:8]}.pth"
    with serving(FileServer({good: data, "/w/bad-00000000.pth": data})) as srv:
        ck = W.Checkpoint("metrics x", "url", srv.url + good)
        assert ck.location() is None
        assert W._fetch_missing([ck], "t") == 0
        assert ck.location() == ck.cache_path() and ck.cache_path().read_bytes() == data
        assert W._fetch_missing([ck], "t") == 0 and len(srv.downloads) == 1  # second call downloads nothing
        assert "all 1 checkpoints are present; nothing to download" in capsys.readouterr().out
        bad = W.Checkpoint("metrics y", "url", srv.url + "/w/bad-00000000.pth")
        assert W._fetch_missing([bad], "t") == 1
        assert bad.location() is None and "hash" in capsys.readouterr().err.lower()


def _tiny_dino_files():
    from benchmark.io.model_cache import tiny_model_dir
    from benchmark.models.dino import TINY_DINO_CONFIG, _builder

    folder = tiny_model_dir("dinov2-tiny", TINY_DINO_CONFIG, _builder(TINY_DINO_CONFIG))
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_hub_fetch_via_the_cli_then_the_loader_finds_it_offline(tmp_path, monkeypatch, capsys):
    """`weights` downloads the DINOv2 checkpoint from a local hub (HF_ENDPOINT) at its pinned revision; a second
    call, offline, downloads nothing, and the loader's own `from_pretrained` call then loads it offline."""
    from transformers import Dinov2Model

    from benchmark.models.dino import DINO_ID, DINO_REVISION

    files = _tiny_dino_files()
    assert "model.safetensors" in files
    files["pytorch_model.bin"] = b"decoy: never needed when safetensors exist"
    only_dino = ["editor=identity", "metrics=hatie", *(f"metrics.hatie.{k}.weights=tiny"
                                                       for k in ("segmenter", "clip", "lpips", "fid"))]
    env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT, HELPERS), "HF_HUB_CACHE": str(tmp_path),
           "NO_PROXY": "127.0.0.1,localhost"}
    with serving(FakeHub({DINO_ID: (DINO_REVISION, files)})) as hub:
        env.update(HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0")
        first = subprocess.run([sys.executable, "-m", "benchmark.plan.weights", *only_dino], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "1 of 1 checkpoints present (1 downloaded now)" in first.stdout
        fetched = {p.rsplit("/", 1)[1] for p in hub.downloads}
        assert "model.safetensors" in fetched and "pytorch_model.bin" not in fetched
        n = len(hub.downloads)
        monkeypatch.setattr(W, "hf_cache_dir", lambda: tmp_path)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert W.main(only_dino) == 0
        assert "all 1 checkpoints are present; nothing to download" in capsys.readouterr().out
        model = Dinov2Model.from_pretrained(DINO_ID, revision=DINO_REVISION, cache_dir=tmp_path)  # as load_dino
        assert model.config.hidden_size == 32 and len(hub.downloads) == n


def test_pipeline_presence_needs_every_loaded_component(empty_caches):
    from benchmark.models.diffusion import tiny_pipeline_dir

    sha = "0" * 40
    snap = empty_caches / "models--org--pipe" / "snapshots" / sha
    shutil.copytree(tiny_pipeline_dir("ip2p"), snap)
    ck = W.Checkpoint("editor e", "hf-pipeline", "org/pipe", sha)
    assert ck.location() == snap and ck.present_size() > 0
    for weights_file in (snap / "unet").glob("*.safetensors"):
        weights_file.unlink()
    assert ck.location() is None  # a model folder without weights is not a usable pipeline
    assert W.Checkpoint("editor e", "hf-pipeline", "org/pipe", "1" * 40).location() is None  # other revision


@pytest.mark.slow  # a subprocess importing diffusers: about 25 s on the shared 2-core machine
def test_pipeline_fetch_skips_the_safety_checker_and_loads_offline(tmp_path):
    """`weights editor=ip2p` downloads the pipeline through diffusers' own download from a local hub, without the
    safety checker the loader never loads; the loader's from_pretrained call then works offline from that cache."""
    import json

    import diffusers

    from benchmark.models.diffusion import tiny_pipeline_dir

    src = tiny_pipeline_dir("ip2p")
    files = {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    index = json.loads(files["model_index.json"])
    index["safety_checker"] = ["stable_diffusion", "StableDiffusionSafetyChecker"]  # as in the real repo
    files["model_index.json"] = json.dumps(index).encode()
    files["safety_checker/config.json"] = b"{}"
    files["safety_checker/model.safetensors"] = b"never fetched"
    cfg, _ = compose(["editor=ip2p", "metrics=basic", "profile=pretrained"])
    repo, sha = cfg.editor.model_id, cfg.editor.revision
    env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), "HF_HUB_CACHE": str(tmp_path), "NO_PROXY": "127.0.0.1,localhost"}
    with serving(FakeHub({repo: (sha, files)})) as hub:
        env.update(HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0")
        proc = subprocess.run([sys.executable, "-m", "benchmark.plan.weights", "editor=ip2p", "metrics=basic"], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        fetched = {p.split(f"/resolve/{sha}/", 1)[1] for p in hub.downloads}
    assert "unet/diffusion_pytorch_model.safetensors" in fetched
    assert not any(f.startswith("safety_checker/") for f in fetched)
    assert W.Checkpoint("editor ip2p", "hf-pipeline", repo, sha).cache_path().name in {p.name for p in
                                                                                      tmp_path.iterdir()}
    pipe = diffusers.StableDiffusionInstructPix2PixPipeline.from_pretrained(  # as load_pipeline, offline
        repo, revision=sha, cache_dir=tmp_path, safety_checker=None, requires_safety_checker=False)
    assert pipe.unet.config.in_channels == 8


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_hub_fails_in_seconds_with_one_line_per_checkpoint_and_the_fix(tmp_path):
    """`make weights` with no route to the hub: one probe, then one line per missing checkpoint and the fix; no
    minute of huggingface_hub retries, no 'see the stacktrace above'."""
    import time

    hub = f"http://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_ENDPOINT": hub,
           "HF_HUB_OFFLINE": "0", "NO_PROXY": "127.0.0.1,localhost", "TORCH_HOME": str(tmp_path / "torch")}
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "benchmark.plan.weights", "editor=ip2p", "metrics=basic"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines[0] == "error: 1 checkpoint(s) missing and their host does not answer (probed once, nothing downloaded):"
    assert lines[1].startswith("  - editor ip2p: timbrooks/instruct-pix2pix @ ") and f"{hub}/: " in lines[1]
    assert lines[2].startswith("Fix: ") and "editmeter weights editor=ip2p metrics=basic" in lines[2]
    assert "profile=tiny" in lines[3] and len(lines) == 4
    assert "Retrying" not in run.stderr + run.stdout and "stacktrace" not in run.stderr + run.stdout
    assert took < 30, f"{took:.0f} s"  # imports dominate; the probe itself is one refused connection


def test_an_unreachable_url_host_is_probed_once_not_downloaded(empty_caches, monkeypatch, capsys):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    url = f"http://127.0.0.1:{_closed_port()}/w"
    cks = [W.Checkpoint("metrics a", "url", f"{url}/a-0000.pth"), W.Checkpoint("metrics b", "url", f"{url}/b-0000.pth")]
    assert W._fetch_missing(cks, "t", "editmeter weights editor=x metrics=y") == 1
    err = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[0] for ln in err[1:3]] == ["  - metrics a", "  - metrics b"]
    assert err[3] == ("Fix: restore network access (or set HTTPS_PROXY, or HF_ENDPOINT to a reachable hub mirror), "
                      "then rerun: editmeter weights editor=x metrics=y")


def test_list_does_not_ask_an_unreachable_hub_for_sizes(empty_caches, monkeypatch, capsys):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(W, "hub_endpoint", lambda: f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(W, "remote_size", lambda ck: pytest.fail("asked an unreachable hub for a size"))
    assert W.main(["--list", "editor=ip2p", "metrics=basic"]) == 0
    assert "1 checkpoints, 1 missing" in capsys.readouterr().out

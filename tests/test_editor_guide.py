"""docs/editors.md stays true: its code runs, every symbol it names exists, and tiny overrides work as it says."""

import ast
import dataclasses
import inspect
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from benchmark.editing.editor import Editor, PromptKindError, query_seed

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "editors.md"
pytestmark = pytest.mark.usefixtures("single_thread_torch")


def guide_section(number: int) -> str:
    text = GUIDE.read_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def load_as_module(name: str, source: str) -> types.ModuleType:
    """Execute guide code as module `name` (registered, so Hydra's `_target_` finds it)."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<docs/editors.md:{name}>", "exec"), module.__dict__)  # noqa: S102 - the guide's own code
    return module


@pytest.fixture
def guide_module():
    added = []

    def load(name, source):
        added.append(name)
        return load_as_module(name, source)

    yield load
    for name in added:
        sys.modules.pop(name, None)


def sample(demo_qs, n=3):
    qs = [q for q in demo_qs.queries if q.edit_type in ("obj_rep", "attr_chg", "bg_chg")][:n]
    from benchmark.io.imageio import load_rgb

    return qs, [load_rgb(demo_qs.path(q.image)) for q in qs], [query_seed(0, q.id) for q in qs]


def check_contract(editor, demo_qs):
    """The properties section 1 of the guide promises (the full contract is tests/test_editors.py)."""
    import json

    assert isinstance(editor, Editor) and editor.prompt_kind in ("instruction", "description")
    queries, images, seeds = sample(demo_qs)
    out = editor.edit(queries, images, seeds=seeds)
    assert len(out) == len(queries)
    assert all(isinstance(o, Image.Image) and o.mode == "RGB" and o.size == s.size for o, s in zip(out, images, strict=True))
    alone = [editor.edit([q], [im], seeds=[s])[0] for q, im, s in zip(queries, images, seeds, strict=True)]
    levels = max(int(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).max()) for a, b in zip(out, alone, strict=True))
    assert levels <= 1
    deferred = [f() for f in editor.edit_deferred(queries, images, seeds=seeds)]
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out, deferred, strict=True))
    json.dumps(editor.info())
    return out, images


def test_minimal_pil_editor_and_its_yaml_work_as_written(demo_qs, guide_module):
    from hydra.utils import instantiate

    section = guide_section(2)
    (source,) = [b for b in code_blocks(section, "python") if b.startswith("# editors/grey.py")]
    (config,) = code_blocks(section, "yaml")
    guide_module("editors.grey", source)
    editor = instantiate(yaml.safe_load(config))
    out, images = check_contract(editor, demo_qs)
    # it does what the guide says: grey pixels (R = G = B) that still follow the source
    arr = np.asarray(out[0], dtype=np.int16)
    assert np.abs(arr[..., 0] - arr[..., 1]).max() <= 1 and np.abs(arr[..., 1] - arr[..., 2]).max() <= 1
    assert not np.array_equal(arr, np.asarray(images[0], dtype=np.int16))


def test_diffusion_editor_steps_assemble_into_a_working_editor(demo_qs, guide_module):
    """Section 3's four code blocks, concatenated, are a complete DiffusionEditor that passes the contract."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    blocks = code_blocks(guide_section(3), "python")
    assert blocks[0].startswith("# editors/myeditor.py") and len(blocks) == 4
    guide_module("editors.myeditor", "\n".join(blocks))
    (config,) = code_blocks(guide_section(3), "yaml")  # step 5, resolved under the tiny profile as a run does
    assert config.startswith("# configs/editor/myeditor.yaml")
    tree = OmegaConf.merge({"profile": OmegaConf.load(ROOT / "configs" / "profile" / "tiny.yaml")},
                           {"editor": OmegaConf.create(config)})
    editor = instantiate(OmegaConf.to_container(tree.editor, resolve=True))
    check_contract(editor, demo_qs)
    info = editor.info()
    assert info["name"] == "myeditor" and info["strength"] == 0.75 and info["weights"] == "tiny"
    q = dataclasses.replace(demo_qs.queries[0], target_caption="")
    with pytest.raises(PromptKindError, match=q.id):
        editor.check_prompts([q])


def test_the_guide_editors_pass_the_checklists_ruff(tmp_path):
    """The checklist runs `python -m ruff check editors/<name>.py`: the guide's two editors, saved where it says,
    pass it with the project's settings (pyproject.toml, first-party imports as in editors/)."""
    import subprocess

    pytest.importorskip("ruff")
    files = {"editors/grey.py": next(b for b in code_blocks(guide_section(2), "python")
                                     if b.startswith("# editors/grey.py")),
             "editors/myeditor.py": "\n".join(code_blocks(guide_section(3), "python"))}
    for name, source in files.items():
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--stdin-filename", name, "-"],
                              input=source, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)


def test_guide_overrides_and_yaml_match_the_ledits_editor():
    """Section 4's `tiny_overrides` and section 5's YAML are the real editors/ledits.py and its config."""
    from typing import Any, ClassVar

    from benchmark.editing.base import DiffusionEditor
    from editors.ledits import LeditsPPEditor

    (snippet,) = code_blocks(guide_section(4), "python")
    ns = {"DiffusionEditor": DiffusionEditor, "ClassVar": ClassVar, "Any": Any}
    exec(compile(snippet, "<docs/editors.md:4>", "exec"), ns)  # noqa: S102
    assert ns["LeditsPPEditor"].tiny_overrides == LeditsPPEditor.tiny_overrides
    (config,) = code_blocks(guide_section(5), "yaml")
    real = yaml.safe_load((ROOT / "configs" / "editor" / "ledits.yaml").read_text())
    shown = yaml.safe_load(config)
    assert shown.items() <= real.items(), {k: (v, real.get(k)) for k, v in shown.items() if real.get(k) != v}


# ---------------------------------------------------------------------------------------------------------------
# Every code symbol the guide names in backticks resolves.


def _symbol_universe() -> dict[str, object]:
    """Names the guide may use bare: the public names of the modules and classes it documents, their fields and
    parameters, config keys, test names and environment variables the code reads."""
    import diffusers

    import benchmark.editing.base
    import benchmark.editing.editor
    import benchmark.io.model_cache
    import benchmark.io.types
    import benchmark.models.diffusion
    import benchmark.plan.config
    import editors.ledits
    from benchmark.editing.base import DiffusionEditor, Item
    from benchmark.io.types import Query
    from benchmark.models.diffusion import TINY_COMPONENTS, load_pipeline
    from editors.ledits import LeditsPPEditor

    names: dict[str, object] = {}
    for mod in (benchmark.editing.editor, benchmark.editing.base, benchmark.models.diffusion, benchmark.io.model_cache,
                benchmark.io.types, benchmark.plan.config, editors.ledits):
        names.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
    names["<self>"] = {k for cls in (DiffusionEditor, LeditsPPEditor) for k in {*dir(cls), *_instance_attributes(cls)}}
    for cls in (Editor, DiffusionEditor, LeditsPPEditor, Item, Query, diffusers.DiffusionPipeline):
        names.update({k: getattr(cls, k) for k in dir(cls) if not k.startswith("__")})
        if cls.__module__.startswith(("benchmark", "editors")):
            names.update({k: cls for k in _instance_attributes(cls)})
    for f in (Editor.edit, Editor.edit_deferred, Editor.prepare, DiffusionEditor.__init__, LeditsPPEditor.__init__,
              DiffusionEditor._edit_chunk, DiffusionEditor.initial_latents, load_pipeline,
              benchmark.io.model_cache.tiny_model_dir, diffusers.StableDiffusionPipeline.__call__):
        names.update({k: f for k in inspect.signature(f).parameters})
    names.update({f.name: Query for f in dataclasses.fields(Query)} | {f.name: Item for f in dataclasses.fields(Item)})
    names.update({k: TINY_COMPONENTS for k in TINY_COMPONENTS})
    # configs/costs.yaml rows: their fields (benchmark.plan.budget.Cost) and `confidence` values (benchmark.plan.budget.CONFIDENCE)
    from benchmark.plan.budget import CONFIDENCE, Cost

    names.update({f.name: Cost for f in dataclasses.fields(Cost)} | {k: CONFIDENCE for k in CONFIDENCE})
    # the provenance keys load_pipeline writes
    names.update({k: load_pipeline for k in re.findall(r'"(\w+)":', inspect.getsource(load_pipeline))})
    for cfg in [ROOT / "configs" / "config.yaml", *(ROOT / "configs" / "editor").glob("*.yaml"),
                *(ROOT / "configs" / "profile").glob("*.yaml")]:
        data = yaml.safe_load(cfg.read_text()) or {}
        for key, value in data.items():
            names[key] = cfg
            if isinstance(value, dict):
                names.update({k: cfg for k in value})
    for path in [*ROOT.glob("tests/*.py"), ROOT / "Makefile"]:
        text = path.read_text()
        names.update({k: path for k in re.findall(r"^(?:def |async def )?(\w+)\s*(?:\(|[?:]?=)", text, flags=re.M)})
    for path in ROOT.glob("benchmark/**/*.py"):
        names.update({k: path for k in re.findall(r"environ(?:\.get)?[\[(]\"(\w+)\"", path.read_text())})
    names.update({k: getattr(diffusers, k) for k in ("AutoencoderKL", "UNet2DConditionModel")})
    names["CLIPTextConfig"] = __import__("transformers").CLIPTextConfig
    names["super"] = super
    names["__init__"] = object.__init__
    # config groups (`profile=tiny`), leaderboard counts, classes the guide's own code defines
    defaults = yaml.safe_load((ROOT / "configs" / "config.yaml").read_text()).get("defaults", [])
    names.update({k: "config group" for d in defaults if isinstance(d, dict) for k in d})
    names.update({k: "leaderboard" for k in re.findall(r'"(n_\w+)"', (ROOT / "benchmark" / "tables" / "leaderboard.py").read_text())})
    for block in code_blocks(GUIDE.read_text(), "python"):
        tree = ast.parse(block if not block.startswith("    ") else "class X:\n" + block)
        names.update({n.name: "guide" for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name != "X"})
    return names


def _instance_attributes(cls: type) -> set[str]:
    """`self.x` assigned anywhere in the class's source (tuple targets included)."""
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.add(t.attr)
    return out


# Words in backticks that are values, not code: PIL's image mode.
NOT_CODE = {"RGB"}


def _resolve_dotted(name: str, universe: dict[str, object]) -> bool:
    import importlib

    head, *rest = name.split(".")
    if head == "self":  # an attribute of the diffusion editors the guide documents
        return rest[0] in universe["<self>"]
    if head in ("benchmark", "editors", "torch", "PIL"):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
        return False
    if head not in universe:
        return False
    obj = universe[head]
    for attr in rest:
        if dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            return True
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def unresolved(span: str, universe: dict[str, object]) -> list[str]:
    """The code names in one backtick span that do not exist ([] for prose-like spans: commands, placeholders)."""
    if span in NOT_CODE or span.startswith(("python ", "make ", "-", "+", "$", "/")) or "<" in span or "..." in span:
        return []
    if span == "oc.select":  # OmegaConf's resolver
        from omegaconf import OmegaConf

        return [] if OmegaConf.has_resolver("oc.select") else [span]
    if span.startswith('"'):  # a string value the guide lists: a family or a prompt kind
        from benchmark.models.diffusion import FAMILIES

        return [] if span.strip('"') in {*FAMILIES, "instruction", "description"} else [span]
    path = span.split("::")[0]
    if "/" in path or re.fullmatch(r"[\w.]+\.(py|yaml|md|jsonl)", path):
        if path == "edits.jsonl":
            from benchmark.stages.edit import EDITS_LOG

            return [] if EDITS_LOG == path else [span]
        file = ROOT / path
        if not file.exists():
            return [span]
        if "::" in span:
            return [] if re.search(rf"^def {span.split('::')[1]}\(", file.read_text(), flags=re.M) else [span]
        return []
    if re.fullmatch(r"\w+:\s+\S+", span):  # a YAML setting
        return [] if span.split(":")[0] in universe else [span]
    code = re.sub(r'"[^"]*"', '""', span)  # string literals are values
    tokens = re.findall(r"(?<![\w.])[A-Za-z_][\w]*(?:\(\))?(?:\.[A-Za-z_]\w*)*", code)
    if " " in code and not re.match(r"^[\w.]+\(", code):
        return []  # prose with spaces that is not a call
    if " " in code:  # a call written with its parameters in words: check the callee only
        tokens = tokens[:1]
    bad = []
    for token in tokens:
        token = token.replace("()", "")
        if token in ("true", "false", "tiny", "pretrained", "auto", "demo", "None"):
            continue
        if "." in token:
            ok = _resolve_dotted(token, universe)
        else:  # diffusers classes are looked up lazily by name
            ok = token in universe or (token[:1].isupper() and hasattr(__import__("diffusers"), token))
        if not ok:
            bad.append(token)
    return bad


def guide_spans() -> list[str]:
    prose = re.sub(r"```.*?```", "", GUIDE.read_text(), flags=re.S)
    return sorted(set(re.findall(r"`([^`\n]+)`", prose)))


def test_every_symbol_the_guide_names_exists():
    universe = _symbol_universe()
    spans = guide_spans()
    assert len(spans) > 80  # the guide names many symbols; an empty or unparsed guide must not pass
    bad = {s: unresolved(s, universe) for s in spans}
    assert not {s: b for s, b in bad.items() if b}


def test_symbol_check_catches_misspelled_names():
    universe = _symbol_universe()
    assert unresolved("DiffusionEditor._edit_chunk", universe) == []
    for typo in ("DiffusionEditor._edit_chunks", "benchmark.editing.base.Items", "tiny_override", "hyperparams()",
                 "self.generator(items)", "tests/test_editors.py::test_contracts", "editors/ledit.py", '"sd15"',
                 "stepz: 3"):
        assert unresolved(typo, universe), typo


def test_guide_code_is_python():
    for block in code_blocks(GUIDE.read_text(), "python"):
        ast.parse(block if not block.startswith("    ") else "class X:\n" + block)


# ---------------------------------------------------------------------------------------------------------------
# Tiny overrides (guide section 4) and the LEDITS++ editor written from the guide.


def test_shared_tiny_pipelines_are_untouched_by_overrides():
    from benchmark.models.diffusion import TINY_UNET, tiny_configs, tiny_pipeline_dir
    from editors.ledits import LeditsPPEditor

    shared = tiny_configs()
    assert tiny_configs({}) == shared and shared["unet"] == TINY_UNET
    assert tiny_pipeline_dir("sd", overrides={}) == tiny_pipeline_dir("sd")
    merged = tiny_configs(LeditsPPEditor.tiny_overrides)
    assert merged["unet"]["block_out_channels"] == [32, 32, 64, 64]
    # settings not overridden keep the shared value; other components are the shared ones
    assert {k: v for k, v in merged["unet"].items() if k not in LeditsPPEditor.tiny_overrides["unet"]} == {
        k: v for k, v in TINY_UNET.items() if k not in LeditsPPEditor.tiny_overrides["unet"]}
    assert all(merged[c] == shared[c] for c in ("vae", "text", "scheduler"))


@pytest.mark.parametrize("overrides, named", [
    ({"unett": {"layers_per_block": 1}}, "unett"),
    ({"unet": {"block_channels": [32]}}, "block_channels"),
    ({"text": {"hidden_sise": 16}}, "hidden_sise"),
    ({"vae": [1, 2]}, "mapping"),
])
def test_bad_tiny_overrides_fail_before_building_naming_the_editor(overrides, named, monkeypatch):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.models import diffusion
    from benchmark.models.diffusion import TinyOverrideError

    monkeypatch.setattr(diffusion, "tiny_model_dir", lambda *a: pytest.fail("built despite a bad override"))
    from omegaconf import open_dict

    cfg, _ = compose(["editor=ledits", "queryset=demo", "profile=tiny"])
    with open_dict(cfg):
        cfg.editor.tiny_overrides = overrides  # as a YAML key or `+editor.tiny_overrides=...` would set it
    with pytest.raises(Exception, match=rf"'ledits'.*{named}") as err:  # Hydra wraps what the class raises
        instantiate(cfg.editor)
    assert isinstance(err.value, TinyOverrideError) or isinstance(err.value.__cause__, TinyOverrideError)


@pytest.fixture(scope="module")
def ledits():
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg, _ = compose(["editor=ledits", "queryset=demo", "profile=tiny"])
    return instantiate(cfg.editor)


def test_ledits_tiny_unet_has_the_attention_level_it_needs(ledits):
    """The override's reason: LEDITS++ reads cross-attention maps at 1/4 of the latent size (its `att_res`)."""
    unet = ledits.pipe.unet
    latent = ledits.resolution // ledits.pipe.vae_scale_factor
    sizes, side = [], latent
    for block in unet.down_blocks:
        if getattr(block, "has_cross_attention", False):
            sizes.append(side)
        side //= 2 if block.downsamplers else 1
    assert latent // 4 in sizes
    # ... and keeps SD v1's pattern at another depth: cross-attention at every level but the lowest, mirrored up
    down = [getattr(b, "has_cross_attention", False) for b in unet.down_blocks]
    up = [getattr(b, "has_cross_attention", False) for b in unet.up_blocks]
    assert down == [True] * (len(down) - 1) + [False] and up == down[::-1]
    info = ledits.info()
    assert info["tiny_overrides"] == {"unet": LeditsPPEditorOverrides()} and info["revision"].startswith("diffusion-sd-")


def LeditsPPEditorOverrides():  # noqa: N802 - reads as the class attribute it returns
    from editors.ledits import LeditsPPEditor

    return LeditsPPEditor.tiny_overrides["unet"]


def test_ledits_target_caption_acts_only_through_edit_guidance(ledits, demo_qs):
    from benchmark.io.imageio import load_rgb

    q = next(q for q in demo_qs.queries if q.edit_type == "attr_chg")
    other = dataclasses.replace(q, target_caption=q.target_caption + " at night, oil painting")
    src, seed = load_rgb(demo_qs.path(q.image)), query_seed(0, q.id)
    a, b = (np.asarray(ledits.edit([x], [src], seeds=[seed])[0], np.int16) for x in (q, other))
    assert np.abs(a - b).max() > 2  # the edit concept steers the output
    scale = ledits.edit_guidance_scale
    try:
        ledits.edit_guidance_scale = 0.0
        a0, b0 = (np.asarray(ledits.edit([x], [src], seeds=[seed])[0], np.int16) for x in (q, other))
    finally:
        ledits.edit_guidance_scale = scale
    assert np.array_equal(a0, b0)  # without edit guidance the target caption cannot matter


def test_editor_interface_is_documented():
    """Every public class, function and method of the editor interface says what it is and returns."""
    documented_dunders = {"__init__", "__call__", "__enter__", "__exit__", "_edit_chunk"}
    missing = []
    for path in [*sorted((ROOT / "benchmark" / "editing").glob("*.py"))]:
        def walk(node, prefix, path=path):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.ClassDef):
                    public = not child.name.startswith("_") or child.name in documented_dunders
                    if public and not ast.get_docstring(child):
                        missing.append(f"{path.relative_to(ROOT)}:{child.lineno} {prefix}{child.name}")
                    if isinstance(child, ast.ClassDef):
                        walk(child, f"{prefix}{child.name}.")

        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), path
        walk(tree, "")
    assert not missing

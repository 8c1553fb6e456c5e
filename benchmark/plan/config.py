"""The configuration: the config tree's location, name validation with suggestions, composition, the run plan read
from a composed config (`read_plan`, `plan_run`: benchmark.plan.run_plan), building its components (`instantiate`,
`build_editor`), and config signatures.

With the entry points, this is the one module that imports omegaconf and Hydra (docs/architecture.md): below it,
code takes the plan or plain values."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.io.errors import RunError
from benchmark.io.provenance import PROJECT_ROOT
from benchmark.plan.run_plan import (
    AggregateOptions,
    BudgetOptions,
    CarryOptions,
    EditorSpec,
    InputLimits,
    PreflightOptions,
    RunPlan,
    Selection,
)

CONFIG_DIR = PROJECT_ROOT / "configs"
# Config groups whose option names users type on the command line.
CHECKED_GROUPS = ("editor", "queryset", "metrics", "profile")
_ROOT_TOKEN = "<root>"


class UnknownOptionError(ValueError):
    """A config group option does not exist; the message lists the valid names."""


class UnknownKeyError(UnknownOptionError):
    """A `key=value` override names a key the composed config does not have; the message suggests close keys."""


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("em_root"):
        OmegaConf.register_new_resolver("em_root", lambda: str(PROJECT_ROOT))
    if not OmegaConf.has_resolver("em_pin"):  # a user's pin (benchmark.io.pins): `${em_pin:kris,<commit>,field,default}`
        OmegaConf.register_new_resolver("em_pin", _pinned)


def _pinned(section: str, key: Any, field: str, default: Any = None) -> Any:
    from benchmark.io.pins import pinned

    return pinned(section, None if key is None else str(key), field, default)


def options(group: str) -> list[str]:
    """Names of the options of a config group (its YAML files)."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def check_option(group: str, name: str) -> None:
    valid = options(group)
    if name in valid:
        return
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownOptionError(f"unknown {group} {name!r}.{hint} Valid {group} names: {', '.join(valid)}")


_OVERRIDE_RE = re.compile(r"^(?:\+|\+\+)?(?P<group>[a-z_]+)=(?P<value>[^=]*)$")


def check_overrides(overrides: Sequence[str]) -> None:
    """Validate group selections such as `editor=ip2p` (also sweeps `editor=a,b`) before Hydra composes anything."""
    for ov in overrides:
        m = _OVERRIDE_RE.match(ov)
        if not m or m["group"] not in CHECKED_GROUPS:
            continue
        for name in m["value"].split(","):
            if name:
                check_option(m["group"], name.strip())


def config_groups() -> list[str]:
    """Top-level config groups (folders of `configs/` holding YAML), Hydra's own `hydra/` excluded."""
    return sorted(d.name for d in CONFIG_DIR.iterdir() if d.is_dir() and d.name != "hydra" and any(d.glob("*.yaml")))


def _is_group(key: str) -> bool:
    return "/" in key or (CONFIG_DIR / key).is_dir()


def _key_paths(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key path of a plain container, intermediate nodes included (list items by index)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        path = f"{prefix}{k}"
        yield path
        yield from _key_paths(v, path + ".")


def check_keys(overrides: Sequence[str]) -> None:
    """Reject `key=value` (and `~key`) overrides whose key the composed config lacks, naming close keys.

    Runs before Hydra, whose own message is a bare "not in struct". `+key=`/`++key=` add keys and pass, `hydra.*`
    is Hydra's business, and group selections are checked by `check_overrides`. The config is composed with the
    overrides' group selections; a swept group (`editor=a,b`) is composed once per choice, since a key such as
    `editor.noise_std` must exist for every job of the sweep.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        parsed = OverridesParser.create().parse_overrides([o for o in overrides if "=" in o or o.startswith("~")])
    except HydraException:
        return  # a syntax error: Hydra's own message names it
    # keyed with the package (`metrics/gedit_judge@metrics.gedit.backbone`): a group selected into a package is
    # composed only as written, package included
    groups = {o.get_key_element(): (list(o.sweep_string_iterator()) if o.is_sweep_override()
                                    else [o.get_value_element_as_str()])
              for o in parsed if _is_group(o.key_or_group) and not o.key_or_group.startswith("hydra")
              and not o.is_delete()}
    keys = [o for o in parsed if not _is_group(o.key_or_group) and not o.key_or_group.startswith("hydra")
            and not (o.is_add() or o.is_force_add())]
    if not keys:
        return
    base = {g: f"{g}={choices[0]}" for g, choices in groups.items()}
    swept = [g for g, choices in groups.items() if len(choices) > 1]
    first = f" (with {', '.join(base[g] for g in swept)})" if swept else ""
    variants: list[tuple[str, list[str]]] = [(first, list(base.values()))]
    for g in swept:
        variants += [(f" (with {g}={c})", list((base | {g: f"{g}={c}"}).values())) for c in groups[g][1:]]
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for label, sel in variants:
            paths = list(_key_paths(OmegaConf.to_container(compose("config", overrides=sel), resolve=False)))
            known = set(paths)
            for o in keys:
                if o.key_or_group not in known:
                    raise UnknownKeyError(_unknown_key_message(o.key_or_group, label, paths))


def _unknown_key_message(key: str, label: str, paths: list[str]) -> str:
    """Suggest siblings when the parent exists (`editor.noise_st`), else any close key path (`limt`)."""
    parent, _, leaf = key.rpartition(".")
    if parent in paths:
        siblings = [p[len(parent) + 1:] for p in paths if p.startswith(parent + ".") and "." not in p[len(parent) + 1:]]
        close = [f"{parent}.{c}" for c in difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.6)]
        valid = f"Keys of {parent!r}: {', '.join(siblings) or '(none)'}."
    else:
        close = difflib.get_close_matches(key, paths, n=3, cutoff=0.6)
        valid = f"Top-level keys: {', '.join(p for p in paths if '.' not in p)}."
    if close:
        return f"unknown key {key!r}{label}. Did you mean {' or '.join(repr(c) for c in close)}?"
    return f"unknown key {key!r}{label}. {valid} To add a new key, write '+{key}=...'."


def compose(overrides: list[str]) -> tuple[Any, dict[str, str]]:
    """Compose the config as the command line would (for tests and notebooks); returns (cfg, group choices).

    Unknown group options raise `UnknownOptionError`, unknown keys `UnknownKeyError` (with suggestions).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException

    register_resolvers()
    check_overrides(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    except ConfigCompositionException:
        check_keys(overrides)  # a mistyped key: say which and suggest; anything else: Hydra's own error
        raise
    return cfg, dict(cfg.hydra.runtime.choices)


def portable(obj: Any) -> Any:
    """Replace the checkout's absolute path by `<root>` so signatures match across clones."""
    if isinstance(obj, dict):
        return {k: portable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [portable(v) for v in obj]
    if isinstance(obj, str):
        return obj.replace(str(PROJECT_ROOT), _ROOT_TOKEN)
    return obj


class SettingError(RunError, ValueError):
    """A config value is out of its range (e.g. `limits.max_source_pixels=0`); raised before any work."""


class LabelError(ValueError):
    """A run label (editor name, `make score NAME=`) cannot be used as a folder name."""


def check_label(name: object, what: str = "editor name") -> str:
    """Return `name` if it is safe as one results folder name (the rule of query ids), else raise LabelError."""
    from benchmark.querysets.io import check_id

    try:
        return check_id(name, what, why="labels become folder names")  # type: ignore[arg-type]
    except ValueError as err:
        raise LabelError(str(err)) from None


def apply_run_checks(cfg: Any, editor_name: str) -> None:
    """Before any work: refuse an unsafe label or an unknown editor dtype, and set the input limits of `cfg.limits`
    (docs/inputs.md); a bad value raises `SettingError` (a RunError: the entry point prints it without a traceback).
    The checks of `plan_run`, for a config."""
    plan_run(cfg, editor_name)


def check_plan(plan: RunPlan) -> None:
    """`apply_run_checks` on a plan: its label, its editor's `_target_` and dtype, its suites' precisions, then its
    input limits, set for this process (`benchmark.io.imageio`, `benchmark.editing.editor`)."""
    from benchmark.editing.editor import set_max_prompt_chars
    from benchmark.io.imageio import set_limits
    from benchmark.io.protocols import check_protocol
    from benchmark.models.diffusion import DtypeError, check_dtype

    check_label(plan.editor.label)
    if not plan.editor.target:
        _no_target(plan.editor.file)
    if "dtype" in plan.editor.config:
        try:
            check_dtype(plan.editor.config["dtype"], what=f"editor {plan.editor.label!r}")
        except DtypeError as err:
            raise SettingError(str(err)) from None
    check_metric_precisions(plan.metrics)
    check_protocol(plan.protocol)
    check_carry(plan.carry)
    check_run_numbers(plan)
    limits = plan.limits
    try:
        set_limits(max_pixels=limits.max_source_pixels, min_source_side=limits.min_source_side)
        if limits.max_prompt_chars is not None:
            set_max_prompt_chars(limits.max_prompt_chars)
    except ValueError as err:
        raise SettingError(f"{err}: fix it on the command line or in configs/config.yaml (docs/inputs.md)") from None


STAGES = ("edit", "score", "aggregate")


def _whole(value: Any, low: int | None = None) -> bool:
    """`value` is an int (not a bool) of at least `low` (None: any)."""
    return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)


def check_run_numbers(plan: RunPlan) -> None:
    """The run's own numbers and names, refused with one line naming the key: `batch_size` a whole number of at least 1;
    `limit` null or a whole number of at least 1 (a negative one would slice from the end, 0 would run nothing and
    call it done); `shard.count` at least 1 and `shard.index` in [0, count); `seed` a whole number; `num_workers` at
    least 0; `stages` a list of `STAGES` (a misspelt one ran nothing, exit 0; an empty one only opens the run folder); `aggregate.bootstrap_resamples`
    at least 0; `max_failed_fraction` in [0, 1]; `device` and `editor.device` ones torch knows."""
    if not _whole(plan.batch_size, 1):
        raise SettingError(f"batch_size={plan.batch_size!r}: use a whole number of at least 1 (the queries per editor "
                           "and metric call; configs/config.yaml)")
    sel = plan.selection
    if sel.limit is not None and not _whole(sel.limit, 1):
        raise SettingError(f"limit={sel.limit!r}: use a whole number of at least 1 (the first N queries of this "
                           "run's shard), or limit=null for all of them")
    if not _whole(sel.shard_count, 1) or not _whole(sel.shard_index, 0) or sel.shard_index >= sel.shard_count:
        raise SettingError(f"shard.index={sel.shard_index!r} shard.count={sel.shard_count!r}: use shard.count=K with "
                           "K a whole number of at least 1 and shard.index from 0 to K-1 (docs/cli.md, `editmeter run` keys)")
    if not _whole(plan.seed):
        raise SettingError(f"seed={plan.seed!r}: use a whole number (each query's seed is a hash of it and the query id)")
    if not _whole(plan.num_workers, 0):
        raise SettingError(f"num_workers={plan.num_workers!r}: use a whole number of at least 0 (0 loads images in the "
                           "main process)")
    unknown = [s for s in plan.stages if s not in STAGES]
    if unknown:
        raise SettingError(f"stages={list(plan.stages)!r}: unknown stage {unknown[0]!r}; use a list of "
                           f"{', '.join(STAGES)}, e.g. stages=[edit,score,aggregate]")
    if not _whole(plan.aggregate.bootstrap_resamples, 0):
        raise SettingError(f"aggregate.bootstrap_resamples={plan.aggregate.bootstrap_resamples!r}: use a whole number "
                           "of at least 0 (below 2 the tables have no standard errors)")
    fraction = plan.max_failed_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise SettingError(f"max_failed_fraction={fraction!r}: use a share from 0 to 1 (the run exits 1 when more of "
                           "its queries failed)")
    check_device(plan.device, "device")
    if plan.editor.config.get("device") is not None:
        check_device(plan.editor.config["device"], "editor.device")


def check_device(device: Any, key: str) -> None:
    """`auto`, or a device torch can parse (`cpu`, `cuda`, `cuda:1`, ...); torch is imported only for the latter."""
    if device == "auto":
        return
    import torch

    try:
        torch.device(str(device))
    except (RuntimeError, ValueError, TypeError):
        raise SettingError(f"{key}={device!r}: use auto, cpu, cuda or cuda:N (a device torch knows)") from None


REUSE_MODES = ("carry", "strict")


def check_carry(carry: CarryOptions) -> None:
    """`reuse` is carry or strict; `carry.sample` a positive whole number; `carry.tolerance` a level in 0-255."""
    if carry.mode not in REUSE_MODES:
        raise SettingError(f"reuse={carry.mode!r} is not a reuse mode: use reuse=carry (adopt an earlier run's edits "
                           "after a verified sample when only the code changed) or reuse=strict (edit everything)")
    for key, value, low, high in (("carry.sample", carry.sample, 1, None), ("carry.tolerance", carry.tolerance, 0, 255)):
        if not _whole(value, low) or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise SettingError(f"{key}={value!r}: use a whole number {bound} (docs/results.md#carry-over)")


def group_choices(cfg: Any) -> dict[str, str]:
    """The config group choices (editor, metrics, ...) of a composed or a Hydra-run config ({} outside both)."""
    if "hydra" in cfg:
        return dict(cfg.hydra.runtime.choices)
    from hydra.core.hydra_config import HydraConfig

    try:
        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # not inside a Hydra run
        return {}


def editor_overrides(cfg: Any) -> tuple[str, ...]:
    """The `editor.<key>=<value>` overrides of this run (sorted), from Hydra's record of the command line."""
    try:
        if "hydra" in cfg:
            task = list(cfg.hydra.overrides.task)
        else:
            from hydra.core.hydra_config import HydraConfig

            task = list(HydraConfig.get().overrides.task)
    except ValueError:  # not inside a Hydra run
        return ()
    return tuple(sorted(o for o in task if o.lstrip("+~").startswith("editor.")))


def _editor_file(choice: str | None) -> str:
    """The YAML file the run's editor config came from (`configs/editor/<choice>.yaml`), for error messages."""
    return f"configs/editor/{choice}.yaml" if choice else "the editor config (configs/editor/<name>.yaml)"


def _no_target(where: str) -> None:
    """Refuse an editor config without `_target_` (the class Hydra builds), naming its YAML file and the fix."""
    raise SettingError(f"{where} has no `_target_` key: Hydra builds the editor from it. Add the "
                       "class path as its first key, e.g. `_target_: editors.<name>.<Class>` "
                       "(docs/editors.md, section 5)")


def build_editor(editor: EditorSpec) -> Any:
    """Build the plan's editor. A config without `_target_`, with a `_target_` that cannot be imported, or whose
    keys the class's constructor does not take (a required argument missing, an unknown one) raises `SettingError`
    naming the YAML file and the key, before the class is built."""
    import inspect

    from hydra.utils import get_object

    where, target = editor.file, editor.target
    if not target:
        _no_target(where)
    try:
        cls = get_object(target)
    except (ImportError, ValueError) as err:
        raise SettingError(f"{where}: `_target_: {target}` cannot be imported ({err}); write the class path as "
                           "editors.<module>.<Class>, with the module in editors/ (docs/editors.md)") from None
    keys = [k for k in editor.config if not str(k).startswith("_")]
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # no introspectable signature: the constructor judges its own arguments
        signature = None
    if signature is not None:
        try:
            signature.bind(**dict.fromkeys(keys))
        except TypeError as err:
            raise SettingError(f"{where}: {target} does not take its keys as written ({err}). Add the missing key "
                               "to the YAML (or pass editor.<key>=... on the command line; +editor.<key>=... adds "
                               "one the YAML lacks), or remove the unknown one") from None
    return instantiate(editor.config, at="editor")


def instantiate(spec: Any, at: str = "") -> Any:
    """Build a component from its `_target_` mapping (Hydra's `instantiate`: configs call constructors). `at`: the
    dotted key the mapping sits at in the run config (`editor`, `metrics.hatie`), so Hydra's errors name the key
    as they do for the composed config (`Missing mandatory value: editor.folder`).
    A RunError the constructor raises (a setup error with its message: an unset api_key_env, missing input files)
    comes out of Hydra's InstantiationException as itself, so every command prints it as one message."""
    from hydra.utils import instantiate as hydra_instantiate
    from omegaconf import DictConfig, OmegaConf

    from benchmark.io.errors import run_error_in

    try:
        if not at or isinstance(spec, DictConfig):
            return hydra_instantiate(spec)
        root: Any = OmegaConf.create({}, flags={"allow_objects": True})
        OmegaConf.update(root, at, spec, force_add=True)
        return hydra_instantiate(OmegaConf.select(root, at))
    except Exception as exc:  # noqa: BLE001 - only a RunError is unwrapped; anything else re-raises as it was
        err = run_error_in(exc)
        if err is None or err is exc:
            raise
        raise err from None


def locate_class(path: str) -> Any:
    """The class a dotted `_target_` names, imported, not built (Hydra's `get_class`: raises when it is none)."""
    from hydra.utils import get_class

    return get_class(path)


def read_yaml(path: Path) -> Any:
    """A YAML file of configs/ (e.g. the cost table) as plain containers, interpolations resolved."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def read_plan(cfg: Any, editor_name: str | None = None) -> RunPlan:
    """The run plan of a composed (or Hydra-run) config, read once: `editor_name` labels the run (default: the
    `editor=` choice). Reads values only; `plan_run` also checks them."""
    from omegaconf import OmegaConf

    choices = group_choices(cfg)
    option = choices.get("editor")
    editor = OmegaConf.to_container(cfg.editor, resolve=True) if cfg.get("editor") is not None else {}
    metrics = OmegaConf.to_container(cfg.metrics, resolve=True) if cfg.get("metrics") is not None else {}
    queryset = OmegaConf.to_container(cfg.queryset, resolve=True) if cfg.get("queryset") is not None else {}
    stages = cfg.get("stages") or ()
    opts = cfg.get("preflight_opts") or {}
    budget = cfg.get("budget") or {}
    limits = cfg.get("limits") or {}
    return RunPlan(
        editor=EditorSpec(label=editor_name if editor_name is not None else str(option or ""), option=option,
                          config=editor, file=_editor_file(option)),
        queryset=queryset, metrics=metrics, metrics_option=str(choices.get("metrics", "")),
        profile=str(cfg.profile.name), profile_weights=str(cfg.profile.get("weights")),
        seed=cfg.seed, results=Path(cfg.paths.results),
        selection=Selection(cfg.shard.index, cfg.shard.count, cfg.limit),
        stages=(stages,) if isinstance(stages, str) else tuple(stages), batch_size=cfg.batch_size, num_workers=cfg.num_workers,
        retry_failed=cfg.retry_failed, fail_fast=bool(cfg.get("fail_fast", False)),
        max_failed_fraction=cfg.get("max_failed_fraction", 0.1), progress=cfg.progress,
        device=str(cfg.get("device", "auto")),
        preflight=PreflightOptions(bool(cfg.get("preflight", True)), opts.get("sample"), opts.get("probe_timeout_s"),
                                   opts.get("disk_factor")),
        budget=BudgetOptions(budget.get("max_gpu_hours"), bool(budget.get("accept", False))),
        limits=InputLimits(limits.get("max_source_pixels"), limits.get("min_source_side"),
                           limits.get("max_prompt_chars")),
        aggregate=AggregateOptions(cfg.aggregate.bootstrap_resamples, cfg.aggregate.bootstrap_seed),
        editor_overrides=editor_overrides(cfg),
        protocol=str(cfg.get("protocol", "single_turn")),
        carry=CarryOptions(str(cfg.get("reuse", "carry")), (cfg.get("carry") or {}).get("sample", 16),
                           (cfg.get("carry") or {}).get("tolerance", 0)),
    )


def plan_run(cfg: Any, editor_name: str) -> RunPlan:
    """The checked plan of one run, read before any work: the label is checked first (before anything is read),
    then the plan (`check_plan`, which also sets the process's input limits)."""
    check_label(editor_name)
    plan = read_plan(cfg, editor_name)
    check_plan(plan)
    return plan


def check_metric_precisions(metrics: dict[str, Any]) -> None:
    """Refuse, before any work, a suite `precision` that is unknown or that its device cannot run (tf32 off CUDA);
    `metrics`: the plan's metric configs."""
    from benchmark.io.model_cache import resolve_device
    from benchmark.metrics.precision import PrecisionError, check_precision

    for name, node in metrics.items():
        if hasattr(node, "get") and node.get("precision") is not None:
            try:
                check_precision(node["precision"], resolve_device(str(node.get("device", "auto"))),
                                what=f"metrics {name}")
            except PrecisionError as err:
                raise SettingError(str(err)) from None


# The key scheme: 1 hashed the file of every project module an editor imports (by path); 2 hashes the content of
# the definitions that make pixels (benchmark.plan.code_identity). run.json records the parts (`editor_key`).
KEY_SCHEME = 2


def editor_setting(editor_cfg: dict[str, Any], info: dict[str, Any], seed: int, profile: str,
                   rewrites_instruction: bool = False, protocol: str = "single_turn") -> str:
    """The hash of what an editor's edits depend on besides its code: full config, provenance info (weights,
    revision, dtype), seed, weight profile, the declaration that it rewrites instructions, and a protocol other
    than single_turn. Two runs with one setting and one query set differ only by code: carry-over compares them."""
    from benchmark.io.hashing import stable_hash

    keyed: dict[str, Any] = {"config": _same_numbers(portable(editor_cfg)), "info": _same_numbers(portable(info)),
                             "seed": int(seed), "profile": profile}
    if rewrites_instruction:
        keyed["rewrites_instruction"] = True
    if protocol != "single_turn":
        keyed["protocol"] = protocol
    return stable_hash(keyed)


def editor_code_digest(target: Any, protocol: str = "single_turn") -> str:
    """The content digest of the definitions that make an editor's pixels (benchmark.plan.code_identity); "" without
    a `_target_`."""
    from benchmark.plan.code_identity import code_identity

    if not isinstance(target, str):
        return ""
    return code_identity(target, multi_turn=protocol == "multi_turn").digest


def editor_key(editor_cfg: dict[str, Any], info: dict[str, Any], seed: int, profile: str,
               rewrites_instruction: bool = False, protocol: str = "single_turn",
               code: str | None = None) -> dict[str, Any]:
    """The parts of an editor signature: the setting, the code, the stored format and the scheme. `code`: the
    editor's code digest where the run resolved it already (`benchmark.plan.resolved.Components.editor_code`);
    computed here when not given."""
    from benchmark.plan.code_identity import EDIT_FORMAT

    if code is None:
        code = editor_code_digest(editor_cfg.get("_target_"), protocol)
    return {"scheme": KEY_SCHEME, "edit_format": EDIT_FORMAT,
            "setting": editor_setting(editor_cfg, info, seed, profile, rewrites_instruction, protocol),
            "code": code}


def editor_signature(editor_cfg: dict[str, Any], info: dict[str, Any], seed: int, profile: str,
                     rewrites_instruction: bool = False, protocol: str = "single_turn") -> str:
    """The key of an editor's edits: a hash of `editor_key` (its setting, the content of the code that makes its
    pixels, the edit format). Moving a module or changing code no pixel depends on changes no signature."""
    from benchmark.io.hashing import stable_hash

    return stable_hash(editor_key(editor_cfg, info, seed, profile, rewrites_instruction, protocol))


def setting_of_run(meta: dict[str, Any]) -> str | None:
    """The editor setting (`editor_setting`) of an earlier run, from its run.json: recorded by scheme 2, computed
    from the recorded config, info, seed and profile for a run of scheme 1; None when run.json lacks them."""
    key = meta.get("editor_key")
    if isinstance(key, dict) and isinstance(key.get("setting"), str):
        return key["setting"]
    try:
        return editor_setting(meta["editor_config"], meta["editor_info"], int(meta["seed"]), str(meta["profile"]),
                              bool(meta.get("rewrites_instruction", False)),
                              str(meta.get("protocol") or "single_turn"))
    except (KeyError, TypeError, ValueError):
        return None


def _same_numbers(obj: Any) -> Any:
    """Integral floats as ints, so `editor.guidance_scale=5` and `=5.0` (one setting written two ways, e.g. in a
    sweep) key one run folder instead of two."""
    if isinstance(obj, dict):
        return {k: _same_numbers(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_same_numbers(v) for v in obj]
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    return obj


# Settings that change speed, not scores: left out of the metric signature so shards run with different batch
# sizes, workers or devices merge into one set of scores.
NON_SEMANTIC_KEYS = frozenset({"batch_size", "chunk_size", "cache_size", "num_workers", "load_threads", "prefetch",
                               "device",
                               # a judge endpoint's transport (its served model and version are in its identity)
                               "base_url", "api_key_env", "cache_dir", "concurrency", "max_retries", "backoff_s",
                               "timeout_s"})


# Settings added after results existed whose default changes nothing: at the default they are left out of the
# signature, so runs made before the setting existed keep theirs (and are not re-scored for nothing).
NEUTRAL_DEFAULTS = {"precision": "fp32"}


def _semantic(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _semantic(v) for k, v in obj.items()
                if k not in NON_SEMANTIC_KEYS and not (k in NEUTRAL_DEFAULTS and v == NEUTRAL_DEFAULTS[k])}
    if isinstance(obj, list):
        return [_semantic(v) for v in obj]
    return obj


def config_targets(cfg: Any) -> list[str]:
    """Every `_target_` string of a config tree (nested components included), sorted."""
    found: set[str] = set()
    todo = [cfg]
    while todo:
        node = todo.pop()
        if isinstance(node, Mapping):  # a DictConfig too
            for k, v in node.items():
                if k == "_target_" and isinstance(v, str):
                    found.add(v)
                else:
                    todo.append(v)
        elif isinstance(node, Sequence) and not isinstance(node, str):
            todo.extend(node)
    return sorted(found)


_METRIC_CODE: dict[tuple[str, ...], str] = {}  # this process's source files do not change under it


def metric_code_digest(metrics_cfg: Any) -> str:
    """The content digest of the definitions that compute a metric set's values (benchmark.plan.code_identity)."""
    from benchmark.plan.code_identity import metric_code_identity

    targets = tuple(config_targets(metrics_cfg))
    if targets not in _METRIC_CODE:
        _METRIC_CODE[targets] = metric_code_identity(targets).digest
    return _METRIC_CODE[targets]


def metric_signature(metrics_cfg: dict[str, Any], infos: dict[str, Any]) -> str:
    """A metric set's signature: its config, its metrics' versions, what was resolved at run time, and the content of
    the code that computes its values (docs/results.md, "Scores are current")."""
    from benchmark.io.hashing import stable_hash

    payload: dict[str, Any] = {"config": portable(_semantic(metrics_cfg)),
                               "versions": {k: i.version for k, i in infos.items()},
                               "code": metric_code_digest(metrics_cfg)}
    # What the config leaves to run time (HATIE's `segmenter.backend: auto` -> detectron2 or torchvision, and its
    # weights): shards resolved differently must never share a signature. Absent for metrics that resolve nothing.
    identity = {k: i.identity for k, i in infos.items() if getattr(i, "identity", None)}
    if identity:
        payload["identity"] = identity
    return stable_hash(payload)

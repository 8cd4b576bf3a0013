"""Checks of the config fields a person sets on a Hugging Face model, before it is built: sizes and
counts in range (NOTE: [Config ranges]), rope types and activations transformers knows, and dict or
list fields given as JSON text."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Mapping

from sample_models._user import ModelSpecError

__all__ = [
    "MAX_REPEATS",
    "LEGACY_ROPE",
    "check_ranges",
    "check_rope",
    "check_legacy_rope",
    "check_activations",
    "from_text",
]

# NOTE: [Config ranges] transformers checks a config field's type (its strict dataclasses) but
# not its range: n_head=0 or vocab_size=0 build a model that divides by zero or cannot take a
# token. A field named as a size, a count of heads, layers, experts or positions, given as a
# whole number, must be at least 1 (checked on the fields a person sets, under their canonical
# names through the config's attribute_map). Counts of layers and experts are modules to build
# one by one: at most MAX_REPEATS (Llama-3-405B has 126 layers; n_layer=1e12 would never finish).
MAX_REPEATS = 1024
_REPEATED = re.compile(r"(^n_layer$|.*_layers$|.*experts$)")
_DIMENSION = re.compile(
    r"(^(n|num|d)_.*|.*_(size|dim|heads|layers|embeddings|positions|channels|experts|"
    r"embd|head|layer|inner|tok|model|ff|kv)$)"
)


def from_text(value: Any) -> Any:
    """A dict or list field given as JSON text (how overrides stay hashable: the app's cache key
    and a plan's model label) read back; any other value unchanged."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def check_ranges(name: str, aliases: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
    """Refuse dimension fields below 1 (NOTE: [Config ranges]) before the config is made: some
    configs divide by them as they are made (Llama's head_dim)."""
    for key in sorted(overrides):
        canonical, value = aliases.get(key, key), overrides[key]
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value < 1
            and (_DIMENSION.match(key) or _DIMENSION.match(canonical))
        ):
            shown = key if key == canonical else f"{key} ({canonical})"
            raise ModelSpecError(
                f"hf:{name}: {shown} must be at least 1 (got {value}): it is a size or a count "
                f"of heads, layers or positions; e.g. {key}=2"
            )
        if isinstance(value, int) and value > MAX_REPEATS and (_REPEATED.match(key) or _REPEATED.match(canonical)):
            raise ModelSpecError(
                f"hf:{name}: {key} must be at most {MAX_REPEATS} (got {value}): each is a module "
                "built and traced one by one; real models have at most a few hundred"
            )


def check_rope(name: str, config: Any, transformers: Any) -> None:
    """transformers' own rope validation only warns about an unknown ``rope_type``; building the
    model then fails with a KeyError. Refuse it here with the types transformers knows."""
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, Mapping):
        return
    known = {"default", *transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS}
    for params in rope.values() if all(isinstance(v, Mapping) for v in rope.values()) and rope else [rope]:
        kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, Mapping) else None
        if kind not in known:
            raise ModelSpecError(
                f"hf:{name}: rope_parameters' rope_type must be one of {', '.join(sorted(known))} "
                f'(got {kind!r}); e.g. rope_parameters={{"rope_type": "linear", "factor": 2.0}}'
            )


# NOTE: [Rope fields in transformers 5]
# transformers 5 keeps a model's rotary settings in one dict, ``rope_parameters`` (``{"rope_theta":
# 500000.0, "rope_type": "default"}``), and its config has no ``rope_theta`` or ``rope_scaling``
# field any more, so a field check against ``config.to_dict()`` refused ``--set
# rope_theta=500000``. Its configs still take both as arguments, as checkpoints' config.json files
# write them, and fold them into ``rope_parameters`` (``rope_scaling``'s keys beside the theta).
# They are accepted where the config has ``rope_parameters``, and checked to have landed there.
LEGACY_ROPE = ("rope_theta", "rope_scaling")


def check_legacy_rope(name: str, config: Any, overrides: Mapping[str, Any]) -> None:
    """A ``rope_theta`` set (NOTE: [Rope fields in transformers 5]) must be a positive number and be
    the theta of the built config's ``rope_parameters``."""
    if "rope_theta" not in overrides:
        return
    theta = overrides["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ModelSpecError(f"hf:{name}: rope_theta must be a positive number (got {theta!r}); e.g. rope_theta=500000")
    rope = getattr(config, "rope_parameters", None)
    got = rope.get("rope_theta") if isinstance(rope, Mapping) else None
    if got != theta:
        raise ModelSpecError(
            f"hf:{name}: rope_theta={theta} did not reach the config's rope_parameters (it holds "
            f'{rope!r}); set rope_parameters instead, e.g. rope_parameters={{"rope_type": "default", '
            f'"rope_theta": {float(theta)}}}'
        )


def check_activations(name: str, overrides: Mapping[str, Any], transformers: Any) -> None:
    """An activation named in a config field must be one of transformers' ``ACT2FN`` (building
    the model looks it up and raises a KeyError)."""
    known = transformers.activations.ACT2FN
    for key in sorted(overrides):
        value = overrides[key]
        if ("activation" in key or key.endswith("_act")) and isinstance(value, str) and value not in known:
            close = difflib.get_close_matches(value, list(known), n=3)
            raise ModelSpecError(
                f"hf:{name}: {key} must name an activation transformers has (got {value!r})"
                + (f"; did you mean {', '.join(close)}?" if close else "")
                + f"; e.g. {key}=gelu_new or {key}=silu"
            )

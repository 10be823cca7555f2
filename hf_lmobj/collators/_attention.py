"""How a packed batch tells a model where its documents are, at O(B x T) wherever the model allows.

A packed row holds several documents; each token may attend only within its own document. The
batch can say so in three forms (``packed_attention=``), cheapest first:

* ``"position_ids"``: ``position_ids`` restarting at 0 per document, no ``attention_mask``, and
  ``use_cache=False``: transformers' ``create_causal_mask`` then builds the block-causal mask inside
  the forward (eager, sdpa and flex attention alike), but only without a cache, which a stock model
  builds by default even in train mode; so ``use_cache=False`` travels in the batch and
  ``model(**batch)`` isolates documents in train and eval mode. 8 to 32 bytes per position.
* ``"cu_seq_lens"``: flash-attention's varlen kwargs (``cu_seq_lens_q/k``, ``max_length_q/k``)
  plus ``position_ids``; no mask at all.
* ``"4d_mask"``: an additive float ``[B, 1, T, T]`` mask (4 T^2 bytes per row), for the models whose
  mask builder ignores ``position_ids`` (e.g. OPT, and BERT-family decoders such as
  ``BertLMHeadModel``). Built for rows longer than :data:`DENSE_MASK_MAX_LENGTH` only when asked
  for by name.

``"auto"`` picks ``"cu_seq_lens"`` for flash-attention and ``"position_ids"`` otherwise; given a
``model`` it reads the model's own mask code and picks ``"4d_mask"`` where ``position_ids`` would
leak, or refuses a model that cannot isolate packed documents at all: its ``forward`` takes no
``position_ids`` (e.g. Bloom, Mamba, the seq2seq decoders), or it has recurrent layers that a mask
does not reach (``layer_types`` other than attention, e.g. Jamba).

Example:
    >>> import torch
    >>> extra = packed_attention_inputs("position_ids", torch.tensor([[0, 1, 0]]))
    >>> extra
    {'use_cache': False}
    >>> packed_attention_inputs("4d_mask", torch.tensor([[0, 1, 0]]))["attention_mask"].shape
    torch.Size([1, 1, 3, 3])
"""

from __future__ import annotations

import ast
import inspect
import sys
from typing import Any

import torch

from hf_lmobj.packing.masks import (
    block_attention_mask,
    document_ids_from_position_ids,
    flash_attention_kwargs,
)

PACKED_ATTENTION = ("auto", "position_ids", "cu_seq_lens", "4d_mask")
FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3")
MASK_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention"})
RECURRENT_LAYER_TYPES = frozenset({"linear_attention", "mamba", "conv", "hybrid", "hybrid_sliding", "recurrent"})
DENSE_MASK_MAX_LENGTH = 1024  # longest row that gets a [B, 1, T, T] mask without being asked (4 MiB/row)
MASK_BUILDERS = frozenset(
    {
        "create_causal_mask",
        "create_sliding_window_causal_mask",
        "create_chunked_causal_mask",
        "create_masks_for_generate",
    }
)


def is_flash_attention(attn_implementation: str) -> bool:
    """transformers' flash-attention kernels and Hub kernels of it (``kernels-community/flash-attn3``).

    >>> [is_flash_attention(name) for name in ("flash_attention_2", "kernels-community/flash-attn3", "sdpa", "flash")]
    [True, True, False, False]
    """
    hub_kernel = "/" in attn_implementation and "flash" in attn_implementation.lower()  # "org/repo[:fn]"
    return attn_implementation in FLASH_IMPLEMENTATIONS or hub_kernel


def check_attn_implementation(value: Any, mask_implementations: tuple[str, ...] = MASK_IMPLEMENTATIONS) -> str:
    """``value`` when it is one of ``mask_implementations`` or a flash-attention one, else a ``ValueError``.

    >>> check_attn_implementation("sdpa")
    'sdpa'
    """
    if not isinstance(value, str) or not (value in mask_implementations or is_flash_attention(value)):
        raise ValueError(
            f"attn_implementation must be one of {mask_implementations} or a flash-attention one "
            f"{FLASH_IMPLEMENTATIONS}, got {value!r}; or pass model= to read it from the model"
        )
    return value


def attention_from_model(model: Any, attn_implementation: str, mask_dtype: torch.dtype) -> tuple[str, torch.dtype]:
    """What ``model=`` tells a collator: its attention implementation and, for a floating model, its dtype.

    Falls back to the given values for what the model does not say.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> model = GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=16)).to(torch.bfloat16)
    >>> model.config._attn_implementation = "eager"
    >>> attention_from_model(model, "sdpa", torch.float32)
    ('eager', torch.bfloat16)
    """
    if model is None:
        return attn_implementation, mask_dtype
    config = getattr(model, "config", None)
    attn_implementation = getattr(config, "_attn_implementation", None) or attn_implementation
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        mask_dtype = dtype
    return attn_implementation, mask_dtype


def choose_packed_attention(requested: str, attn_implementation: str, model: Any = None) -> str:
    """The concrete form (``"position_ids"``, ``"cu_seq_lens"`` or ``"4d_mask"``) for a batch.

    ``requested`` other than ``"auto"`` is returned as is, after a check that ``model`` (when
    given) can take packed documents at all.

    Example:
        >>> choose_packed_attention("auto", "sdpa"), choose_packed_attention("auto", "flash_attention_2")
        ('position_ids', 'cu_seq_lens')
    """
    if requested not in PACKED_ATTENTION:
        raise ValueError(f"packed_attention must be one of {PACKED_ATTENTION}, got {requested!r}")
    if model is not None:
        require_position_ids(model)
    if requested != "auto":
        return requested
    if is_flash_attention(attn_implementation):
        return "cu_seq_lens"
    return "position_ids" if model is None else model_packing_support(model)


def require_position_ids(model: Any) -> None:
    """Raise ``ValueError`` naming the model when its ``forward`` takes no ``position_ids``."""
    forward = getattr(model, "forward", None)
    if "position_ids" not in (inspect.signature(forward).parameters if callable(forward) else {}):
        raise ValueError(
            f"{type(model).__name__}.forward takes no position_ids, so it cannot tell packed documents "
            "apart (they would attend to each other); use packing=False (one document per row), or "
            "a model that takes position_ids"
        )


def model_packing_support(model: Any) -> str:
    """``"position_ids"`` when ``model`` isolates packed documents from them, else ``"4d_mask"``.

    Read from the model's code, not by running it: its ``forward`` must take ``position_ids``, and
    every transformers mask builder (``create_causal_mask`` and kin) its modules call must be
    passed them; a model whose builders ignore them needs the 4D mask. Raises ``ValueError``
    naming the model when it cannot isolate packed documents or its mask code cannot be read.
    """
    name = type(model).__name__
    require_position_ids(model)
    layer_types = _layer_types(model)
    recurrent = layer_types & RECURRENT_LAYER_TYPES
    if recurrent:
        raise ValueError(
            f"{name} has {sorted(recurrent)} layers: they carry state from one packed document into the "
            "next (a mask only reaches attention layers); use packing=False, or flash-attention "
            "(cu_seq_lens) where the model's kernels take sequence boundaries"
        )
    unknown = layer_types - ATTENTION_LAYER_TYPES - {"mlp", "moe"}
    if unknown:
        raise ValueError(
            f"cannot check that {name}'s {sorted(unknown)} layers isolate packed documents; pass "
            "packed_attention='position_ids' or '4d_mask' if you know which the model takes"
        )
    reads = [_builders_read_positions(module) for module in _model_modules(model)]
    found = [r for r in reads if r is not None]
    if not found:
        raise ValueError(
            f"cannot check that {name} isolates packed documents (no transformers mask builder in "
            "its code); pass packed_attention='position_ids' or '4d_mask' if you know which it takes"
        )
    if all(found):
        return "position_ids"
    if layer_types - {"full_attention"}:
        raise ValueError(
            f"{name} builds its masks without position_ids and has {sorted(layer_types)} layers: one "
            "4D mask cannot serve them all; use packing=False or flash-attention (cu_seq_lens)"
        )
    return "4d_mask"


def packed_attention_inputs(
    form: str,
    position_ids: torch.Tensor,
    mask_dtype: torch.dtype = torch.float32,
    causal: bool = True,
    asked: bool = True,
) -> dict[str, Any]:
    """The batch entries, besides ``position_ids`` (B, T), that isolate the packed documents.

    ``asked=False`` (the form came from ``"auto"``) refuses to build a 4D mask for rows longer
    than :data:`DENSE_MASK_MAX_LENGTH`.
    """
    if form == "position_ids":
        return {"use_cache": False}
    if form == "cu_seq_lens":
        return {**flash_attention_kwargs(position_ids), "use_cache": False}
    if form != "4d_mask":
        raise ValueError(f"unknown packed attention form {form!r}")
    check_dense_mask(position_ids.shape[1], asked)
    documents = document_ids_from_position_ids(position_ids)  # (B, T)
    return {"attention_mask": block_attention_mask(documents, causal, mask_dtype), "use_cache": False}


def check_dense_mask(width: int, asked: bool) -> None:
    """Refuse a ``[B, 1, T, T]`` mask for rows longer than :data:`DENSE_MASK_MAX_LENGTH` unless asked.

    Example:
        >>> check_dense_mask(4096, asked=True)  # asked by name: built at any length
        >>> check_dense_mask(4096, asked=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: this model needs a [B, 1, T, T] mask ...; at T=4096 that is 64 MiB per row. Pass ...
    """
    if not asked and width > DENSE_MASK_MAX_LENGTH:
        raise ValueError(
            f"this model needs a [B, 1, T, T] mask to isolate packed documents; at T={width} that is "
            f"{4 * width * width / 2**20:.0f} MiB per row. Pass packed_attention='4d_mask' to build it "
            f"anyway, keep rows <= {DENSE_MASK_MAX_LENGTH} tokens, or use flash-attention"
        )


def _layer_types(model: Any) -> set[str]:
    """The kinds of the model's layers as its (text) config names them, e.g. {"full_attention"}."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = set(getattr(text, "layer_types", None) or ())
    kinds |= set(getattr(text, "layers_block_type", None) or ())  # Bamba, Jamba, Zamba: mamba / attention
    return kinds


def _model_modules(model: Any) -> list[str]:
    """Names of the transformers modeling modules that define the model's layers."""
    classes = {type(m) for m in model.modules()} if hasattr(model, "modules") else {type(model)}
    return sorted({c.__module__ for c in classes if c.__module__.startswith("transformers.models.")})


def _builders_read_positions(module_name: str) -> bool | None:
    """Whether every mask-builder call in a module passes ``position_ids`` (None: no such call)."""
    module = sys.modules.get(module_name)
    try:
        tree = ast.parse(inspect.getsource(module))
    except (TypeError, OSError):
        return None
    dict_keys: dict[str, set[str]] = {}  # name -> string keys of the dict it holds
    builders = set(MASK_BUILDERS)  # names bound to a builder (`mask_fn = create_causal_mask if ...`)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        target, value = node.targets[0].id, node.value
        if isinstance(value, ast.Dict):
            dict_keys[target] = {k.value for k in value.keys if isinstance(k, ast.Constant)}
        elif isinstance(value, ast.Call) and _name(value.func) == "copy" and isinstance(value.func, ast.Attribute):
            source = value.func.value
            if isinstance(source, ast.Name) and source.id in dict_keys:
                dict_keys[target] = set(dict_keys[source.id])
        elif any(_name(n) in MASK_BUILDERS for n in ast.walk(value) if isinstance(n, (ast.Name, ast.Attribute))):
            builders.add(target)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) in builders]
    if not calls:
        return None
    return all(_passes_positions(call, dict_keys) for call in calls)


def _passes_positions(call: ast.Call, dict_keys: dict[str, set[str]]) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "position_ids":
            return True
        if keyword.arg is None and isinstance(keyword.value, ast.Name):
            if "position_ids" in dict_keys.get(keyword.value.id, ()):
                return True
    return False


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None

"""Multi-token prediction (MTP): extra prediction depths on any stock causal LM, and their targets.

The stock model predicts token ``t + 1`` from position ``t`` (depth 0). ``MultiTokenPredictionModel``
adds ``D`` depths; depth ``k`` predicts token ``t + k + 1`` from position ``t``, through the model's
own output head (shared, as in both papers). Two architectures:

* ``"sequential"`` (DeepSeek-V3): ``h_k = Block_k(W_k [RMSNorm(h_{k-1}); RMSNorm(Emb(x_{t+k}))])``,
  starting from the stock model's final hidden state ``h_0`` (the input of its output head). Each
  depth sees the true token just before its target, so the causal chain stays complete.
* ``"parallel"`` (Gloeckle et al. 2024): ``h_k = Block_k(h_0)``: independent heads on a shared trunk.

Each depth then applies its own RMSNorm before the shared head. ``Block`` is one pre-norm
transformer block (causal self-attention with rotary positions, SwiGLU MLP) whose attention never
crosses a document boundary of a packed row.

Targets: :func:`hf_lmobj.models.mtp_targets.multi_token_targets` (depth 0 the batch's next-token
targets as given, depth ``k`` those shifted ``k`` further, never across a document, the row end or
padding; a row too short for a depth gives it no target, and a count of 0).

The model must be a decoder-only causal LM (a class of transformers' causal-LM auto mapping, or
named ``*ForCausalLM``): encoders (``BertForMaskedLM``), encoder-decoders (T5) and encoder classes
run as decoders without ``is_decoder=True`` (``BertLMHeadModel``, which then attends both ways)
are refused. Tensor parallelism: a head sharded on the vocabulary (``tp_plan="auto"``, torch's
``ColwiseParallel``) is scored by the vocab-parallel loss at every depth; the MTP modules are
replicated, each TP rank computing them whole (the same result as one process).

Training loss (``AuxiliaryObjectiveTrainer``): ``L_0 + loss_weight / D * sum_k L_k``, each ``L_k`` a
token sum over depth ``k``'s targets divided by their global count. Saving keeps the stock model
loadable by ``from_pretrained`` alone: the MTP modules go into a ``mtp/`` folder beside it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from hf_lmobj.checks import check_length, check_number
from hf_lmobj.files import atomic_output, write_atomic
from hf_lmobj.models.auxiliary_model import AuxiliaryModel, split_state_dict
from hf_lmobj.models.mtp_blocks import MTPModule, _initialize
from hf_lmobj.models.mtp_targets import (
    count_multi_token_targets,
    document_positions,
)

MTPArchitecture = Literal["sequential", "parallel"]
MTP_ARCHITECTURES: tuple[str, ...] = ("sequential", "parallel")
MTP_FOLDER = "mtp"  # beside the stock model's files
MTP_CONFIG_NAME = "mtp_config.json"
MTP_WEIGHTS_NAME = "model.safetensors"


@dataclass
class MTPConfig:
    """How many extra depths, of which kind, and how much their loss weighs.

    Sizes left to ``None`` follow the stock model (``resolve``): its hidden size, head count,
    embedding width, MLP width (else 8/3 of the hidden size) and initializer range.

    Example:
        >>> MTPConfig(num_depths=2, architecture="parallel").loss_weight
        0.3
        >>> MTPConfig(num_depths=0)
        Traceback (most recent call last):
        ...
        ValueError: num_depths must be an int >= 1 (extra tokens predicted per position), got 0
    """

    num_depths: int = 1  # D: depth k predicts token t + k + 1
    architecture: str = "sequential"  # "sequential" (DeepSeek-V3) | "parallel" (Gloeckle et al.)
    loss_weight: float = 0.3  # lambda: loss = L_0 + lambda / D * sum_k L_k (DeepSeek-V3: 0.3, later 0.1)
    hidden_size: int | None = None  # width of the stock model's final hidden state
    embedding_size: int | None = None  # width of its input embeddings (sequential only)
    num_attention_heads: int | None = None  # heads of each depth's block
    intermediate_size: int | None = None  # SwiGLU width of each depth's block
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    initializer_range: float | None = None  # std of the normal init of linear weights

    def __post_init__(self) -> None:
        self.num_depths = check_length(self.num_depths, "num_depths", 1, why="extra tokens predicted per position")
        if not isinstance(self.architecture, str) or self.architecture not in MTP_ARCHITECTURES:
            raise ValueError(f"architecture must be one of {MTP_ARCHITECTURES}, got {self.architecture!r}")
        self.loss_weight = check_number(self.loss_weight, "loss_weight", 0.0, hint="DeepSeek-V3 uses 0.3")
        for name in ("hidden_size", "embedding_size", "num_attention_heads", "intermediate_size"):
            why = "None follows the model"
            setattr(self, name, check_length(getattr(self, name), name, 1, why=why, optional=True))
        if self.hidden_size is not None and self.num_attention_heads is not None:
            head_dim, rest = divmod(self.hidden_size, self.num_attention_heads)
            if rest or head_dim % 2:
                raise ValueError(
                    f"hidden_size {self.hidden_size} must split into num_attention_heads {self.num_attention_heads} "
                    "heads of an even width (rotary positions rotate pairs); set num_attention_heads"
                )
        self.rms_norm_eps = check_number(self.rms_norm_eps, "rms_norm_eps", 0.0, low_open=True)
        self.rope_theta = check_number(self.rope_theta, "rope_theta", 0.0, low_open=True)
        self.initializer_range = check_number(
            self.initializer_range,
            "initializer_range",
            0.0,
            low_open=True,
            optional=True,
            hint="None follows the model",
        )

    def resolve(self, model: PreTrainedModel) -> MTPConfig:
        """A copy with every size taken from ``model`` where left to None."""
        text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        hidden = self.hidden_size or text.hidden_size
        embedding = model.get_input_embeddings()
        return dataclasses.replace(
            self,
            hidden_size=hidden,
            embedding_size=self.embedding_size or getattr(embedding, "embedding_dim", hidden),
            num_attention_heads=self.num_attention_heads or text.num_attention_heads,
            intermediate_size=self.intermediate_size
            or getattr(text, "intermediate_size", None)
            or -(-8 * hidden // 192) * 64,
            initializer_range=self.initializer_range or getattr(text, "initializer_range", 0.02),
        )


#: Model types whose causal-LM class is an encoder run as a decoder: causal only with this config flag set.
DECODER_FLAGS = {"xlm": "causal"}  # every other type in both the causal-LM and masked-LM mappings: is_decoder


def check_causal_lm(model: Any) -> None:
    """Refuse anything but a stock decoder-only causal LM with an output head (see the module docstring).

    Judged by the class (transformers' causal-LM auto mapping, or a ``*ForCausalLM`` name, through
    subclasses), never by ``config.is_decoder`` alone, which decoder-only configs such as Llama leave unset.

    Example:
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> check_causal_lm(BertForMaskedLM(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...     intermediate_size=8, vocab_size=16)))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: multi-token prediction needs a decoder-only causal LM (AutoModelForCausalLM), got BertForMaskedLM...
    """
    name = type(model).__name__
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model must be a stock causal LM (a transformers PreTrainedModel), got {name}")
    config = model.config
    causal_names = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    lineage = [cls.__name__ for cls in type(model).__mro__]
    if getattr(config, "is_encoder_decoder", False) or not any(
        n in causal_names or n.endswith("ForCausalLM") for n in lineage
    ):
        kind = "an encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "not a causal-LM class"
        raise TypeError(
            f"multi-token prediction needs a decoder-only causal LM (AutoModelForCausalLM), got {name} ({kind}); "
            "load the model with AutoModelForCausalLM"
        )
    model_type = getattr(config, "model_type", None)
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        flag = DECODER_FLAGS.get(model_type, "is_decoder")
        if not getattr(config, flag, False):
            raise ValueError(
                f"{name} is an encoder class that attends to later tokens unless its config sets {flag}=True; "
                f"set {flag}=True in the config (a causal LM must not see the tokens it predicts)"
            )
    if model.get_output_embeddings() is None:
        raise TypeError(f"model must be a causal LM with an output head (get_output_embeddings()), got {name}")


def _check_fits(config: MTPConfig, model: PreTrainedModel) -> None:
    """The resolved sizes fit the model: h_0 feeds the modules, the head scores them, rows hold D + 2 tokens."""
    weight = getattr(model.get_output_embeddings(), "weight", None)
    width = weight.shape[1] if isinstance(weight, torch.Tensor) and weight.dim() == 2 else config.hidden_size
    if config.hidden_size != width:
        raise ValueError(
            f"hidden_size {config.hidden_size} must equal the output head's input width {width} (the MTP modules "
            "read the head's input and feed the head); leave hidden_size None"
        )
    embedding = model.get_input_embeddings()
    table = getattr(embedding, "embedding_dim", None)
    if config.architecture == "sequential" and table is not None and config.embedding_size != table:
        raise ValueError(
            f"embedding_size {config.embedding_size} must equal the model's input embedding width {table}; "
            "leave embedding_size None"
        )
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    positions = getattr(text, "max_position_embeddings", None)
    if isinstance(positions, int) and config.num_depths > positions - 2:
        raise ValueError(
            f"num_depths {config.num_depths} leaves no target for the deepest depths: depth k needs rows of k + 2 "
            f"tokens and the model takes at most max_position_embeddings={positions}; use num_depths <= "
            f"{positions - 2}"
        )


def _whole(x: torch.Tensor) -> torch.Tensor:
    """A DTensor (a head input replicated by torch's ColwiseParallel) as the full local tensor; else ``x``."""
    # not at the top: hf_lmobj.trainer imports hf_lmobj.models (no cycle at import time)
    from hf_lmobj.losses.vocab_parallel import dtensor_type

    dtensor = dtensor_type()
    return x.full_tensor() if dtensor is not None and isinstance(x, dtensor) else x


class MultiTokenPredictionModel(AuxiliaryModel):
    """A stock causal LM (``base``) plus ``config.num_depths`` MTP modules (``mtp``).

    ``forward`` / ``generate`` / the embeddings / ``config`` are the stock model's, so scoring,
    sampling and evaluation code written for it runs unchanged; ``AuxiliaryObjectiveTrainer``
    adds the extra depths' losses. ``save_pretrained(dir)`` writes the stock model to ``dir``
    (loadable by ``AutoModelForCausalLM.from_pretrained(dir)`` alone) and the MTP modules to
    ``dir/mtp``; ``MultiTokenPredictionModel.from_pretrained(dir)`` reads both.

    Args:
        model: a stock ``AutoModelForCausalLM`` model.
        config: the MTP settings (sizes default to the model's).
        seed: seed of the modules' initial weights (an explicit generator; the global RNG is untouched).

    Example:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> base = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64))
        >>> model = MultiTokenPredictionModel(base, MTPConfig(num_depths=2))
        >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1]])}
        >>> batch["labels"] = batch["input_ids"].masked_fill(batch["position_ids"] == 0, -100)
        >>> from hf_lmobj.models.mtp_targets import document_ids, multi_token_targets
        >>> multi_token_targets(batch, 2).tolist()  # depth 0, 1, 2 (two documents: 5 6 7 | 8 9)
        [[[6, 7, -100, 9, -100]], [[7, -100, -100, -100, -100]], [[-100, -100, -100, -100, -100]]]
        >>> [tuple(h.shape) for h in model.depth_hidden_states(torch.zeros(1, 5, 32), batch["input_ids"],
        ...                                                  document_ids(batch))]
        [(1, 5, 32), (1, 5, 32)]
    """

    def __init__(self, model: PreTrainedModel, config: MTPConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        check_causal_lm(model)
        if config is not None and not isinstance(config, MTPConfig):
            raise TypeError(f"config must be an MTPConfig or None, got {type(config).__name__}")
        seed = check_length(seed, "seed", 0, why="the seed of the MTP modules' initial weights")
        self.base = model
        self.mtp_config = (config or MTPConfig()).resolve(model)
        _check_fits(self.mtp_config, model)
        self.mtp = nn.ModuleList(MTPModule(self.mtp_config) for _ in range(self.mtp_config.num_depths))
        _initialize(self.mtp, self.mtp_config.initializer_range, seed)
        self.mtp.to(device=model.device, dtype=model.dtype)

    # ---- the stock model's face (config, device, embeddings, num_parameters: AuxiliaryModel) ----
    @property
    def stock_model(self) -> PreTrainedModel:
        """The model that is saved as a stock checkpoint (here: the causal LM itself)."""
        return self.base

    def forward(self, *args: Any, **kwargs: Any):
        """The stock model's forward (the extra depths run in the trainer's loss)."""
        return self.base(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any):
        return self.base.generate(*args, **kwargs)

    # ---- the extra depths ---------------------------------------------------------------------
    def depth_hidden_states(
        self, hidden: torch.Tensor, input_ids: torch.Tensor, documents: torch.Tensor
    ) -> list[torch.Tensor]:
        """The head inputs of depths 1..D, each (B, T, H), from the stock head's input ``hidden`` (B, T, H).

        ``input_ids`` (B, T) give the next-token embeddings of the sequential modules; ``documents``
        (B, T) (:func:`document_ids`) keep attention and rotary positions within each document.
        """
        hidden = _whole(hidden)  # (B, T, H) on every TP rank: the MTP modules are replicated
        positions = document_positions(documents)  # (B, T)
        sequential = self.mtp_config.architecture == "sequential"
        embeddings = _whole(self.base.get_input_embeddings()(input_ids)) if sequential else None  # (B, T, E)
        length = input_ids.shape[1]
        outputs, previous = [], hidden
        for depth, module in enumerate(self.mtp, start=1):
            following = None  # x_{t+k}, zeros past the row end (a depth longer than the row has no target)
            if sequential:
                following = F.pad(embeddings[:, depth:], (0, 0, 0, min(depth, length)))  # (B, T, E)
            h, normed = module(previous if sequential else hidden, following, positions, documents)
            outputs.append(normed)
            previous = h
        return outputs

    def combine_losses(self, losses: list[torch.Tensor]) -> torch.Tensor:
        """``L_0 + loss_weight / D * sum_k L_k`` from the per-depth losses ``[L_0, L_1, ..., L_D]``.

        Example:
            >>> from transformers import GPT2Config, GPT2LMHeadModel
            >>> m = MultiTokenPredictionModel(GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2,
            ...     vocab_size=16)), MTPConfig(num_depths=2, loss_weight=0.5, num_attention_heads=2))
            >>> m.combine_losses([torch.tensor(2.0), torch.tensor(1.0), torch.tensor(3.0)]).item()  # 2 + 0.5 * 2
            3.0
        """
        if len(losses) != self.mtp_config.num_depths + 1:
            raise ValueError(f"expected {self.mtp_config.num_depths + 1} losses (depth 0..D), got {len(losses)}")
        return losses[0] + (self.mtp_config.loss_weight / self.mtp_config.num_depths) * torch.stack(losses[1:]).sum()

    @property
    def vocab_size(self) -> int:
        """Rows of the output head (the whole vocabulary, also when the head is a TP shard)."""
        weight = getattr(self.base.get_output_embeddings(), "weight", None)
        return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else int(self.base.config.vocab_size)

    def count_targets(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """(1 + D,) targets of each depth in ``batch`` (see :func:`count_multi_token_targets`); the batch is checked."""
        return count_multi_token_targets(batch, self.mtp_config.num_depths, self.vocab_size)

    # ---- saving -------------------------------------------------------------------------------
    def save_pretrained(
        self,
        save_directory: str | Path,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        is_main_process: bool = True,
        **kwargs: Any,
    ) -> None:
        """The stock model into ``save_directory``, the MTP config and weights into ``save_directory/mtp``.

        Each MTP file is written atomically (:mod:`hf_lmobj.files`: whole, old or new, never cut short), the
        weights before the config, so a first save interrupted between the two leaves no config: the folder
        then reads as holding no MTP modules rather than naming weights that are not there.
        """
        from safetensors.torch import save_file

        state_dict = self.state_dict() if state_dict is None else state_dict
        base_state = split_state_dict(state_dict, "base.")
        mtp_state = {k: v.detach().contiguous().cpu() for k, v in split_state_dict(state_dict, "mtp.").items()}
        self.base.save_pretrained(save_directory, state_dict=base_state, is_main_process=is_main_process, **kwargs)
        if not is_main_process:
            return
        folder = Path(save_directory) / MTP_FOLDER
        with atomic_output(folder / MTP_WEIGHTS_NAME) as tmp:
            save_file(mtp_state, str(tmp), metadata={"format": "pt"})
        write_atomic(folder / MTP_CONFIG_NAME, json.dumps(dataclasses.asdict(self.mtp_config), indent=2) + "\n")

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> MultiTokenPredictionModel:
        """The stock model from ``path`` (``kwargs`` go to its ``from_pretrained``) and the MTP modules from ``path/mtp``."""
        from safetensors.torch import load_file

        folder = Path(path) / MTP_FOLDER
        if not (folder / MTP_CONFIG_NAME).is_file():
            raise FileNotFoundError(f"{folder / MTP_CONFIG_NAME} not found: {path} holds no MTP modules")
        base = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        config = MTPConfig(**json.loads((folder / MTP_CONFIG_NAME).read_text()))
        model = cls(base, config)
        model.mtp.load_state_dict(load_file(str(folder / MTP_WEIGHTS_NAME)))
        return model

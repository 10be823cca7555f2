"""ELECTRA pre-training (Clark et al. 2020): a small masked-LM generator and a replaced-token discriminator.

One step on a ``DataCollatorForMaskedLM`` batch (``input_ids`` corrupted at the selected positions,
``labels`` the original token there, -100 elsewhere):

1. the generator (``ElectraForMaskedLM``) reads the corrupted input; its output head runs on the
   selected positions only (``(M, V)`` logits, M = selected tokens) and gives the MLM loss;
2. a replacement is *sampled* at each selected position from those logits, detached (temperature
   ``sampling_temperature``, Gumbel-max, no gradient: token ids are not differentiable), from
   generators keyed by ``(seed, step, row)`` only, so a row gets the same draws whatever batch,
   accumulation split or process it lands in (:mod:`hf_lmobj.collators.seeding`);
3. the discriminator (``ElectraForPreTraining``) reads the original text with those samples put in
   and predicts, for every real token, whether it was replaced. Its label is ``replaced_input !=
   original``: a sample equal to the original token (a generator hit) counts as original.

Loss (:func:`~hf_lmobj.models.electra_loss.electra_loss`): ``MLM + rtd_weight * RTD`` (``rtd_weight`` 50 as in the paper), MLM a
token sum over the selected positions and RTD a token sum of binary cross-entropies over the real
tokens, each divided by its own global count (``AuxiliaryObjectiveTrainer`` sums the counts over
accumulation steps and processes).

The generator (about 1/4 to 1/3 of the discriminator's width, same depth) shares the
discriminator's whole embedding module (token, position and token-type embeddings and their
LayerNorm); its output head is tied to the shared token embedding. ``save_pretrained(dir)`` writes
the discriminator to ``dir`` as a stock ``ElectraForPreTraining`` (fine-tune it with
``AutoModelForSequenceClassification.from_pretrained(dir)``) and the generator to ``dir/generator``.

``forward`` checks its batch: ``input_ids`` a non-empty (B, T) integer tensor of ids in the shared
vocabulary, ``labels`` of the same shape (-100 or a token id, never on padding), a 2-D
``attention_mask`` of that shape, and optionally the collator's ``masked_positions``
(``return_sparse_indices=True``: the flat indices of the selected tokens, checked against
``labels`` and then used to gather the generator's hidden states). A batch whose labels are all -100 trains the discriminator only;
evaluation reports a term without a single target as nan (``AuxiliaryObjectiveTrainer``). Tensor
parallelism is refused, at construction and at every forward (the tied head and the shared
embeddings would be vocab-sharded DTensors that sampling and the embedding lookup cannot serve):
use DDP or FSDP2.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
)

from hf_lmobj.checks import check_id_range, check_labels, check_length, check_number
from hf_lmobj.collators.seeding import example_key
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.files import write_atomic
from hf_lmobj.models.auxiliary_model import AuxiliaryModel, split_state_dict
from hf_lmobj.models.electra_loss import (
    ElectraPretrainingOutput,
    count_electra_targets,
    rtd_positions,
    sample_replacements,
    selected_positions,
)
from hf_lmobj.models.head import capture_head
from hf_lmobj.models.sharding import mesh_model_parallel_size

GENERATOR_FOLDER = "generator"  # beside the discriminator's files
ELECTRA_CONFIG_NAME = "electra_pretraining.json"  # in the generator folder


@dataclass
class ElectraPretrainingConfig:
    """How the two losses combine and how replacements are drawn.

    Example:
        >>> ElectraPretrainingConfig().rtd_weight
        50.0
        >>> ElectraPretrainingConfig(sampling_temperature=0.0)
        Traceback (most recent call last):
        ...
        ValueError: sampling_temperature must be a finite number in (0, inf), got 0.0; 1.0 samples from the generator's softmax
    """

    rtd_weight: float = 50.0  # lambda: loss = MLM + lambda * RTD (the paper's 50)
    sampling_temperature: float = 1.0  # replacements ~ softmax(logits / temperature)

    def __post_init__(self) -> None:
        self.rtd_weight = check_number(self.rtd_weight, "rtd_weight", 0.0, hint="the paper uses 50")
        self.sampling_temperature = check_number(
            self.sampling_temperature, "sampling_temperature", 0.0, low_open=True,
            hint="1.0 samples from the generator's softmax",
        )  # fmt: skip


def generator_config(discriminator: ElectraConfig, fraction: float = 0.25) -> ElectraConfig:
    """The generator's config: ``fraction`` of the discriminator's width (and heads), same depth and embeddings.

    Example:
        >>> d = ElectraConfig(hidden_size=256, num_attention_heads=4, intermediate_size=1024, embedding_size=128)
        >>> g = generator_config(d, 0.25)
        >>> g.hidden_size, g.num_attention_heads, g.intermediate_size, g.embedding_size
        (64, 1, 256, 128)
    """
    if not isinstance(discriminator, ElectraConfig):
        raise TypeError(f"discriminator must be an ElectraConfig, got {type(discriminator).__name__}")
    fraction = check_number(fraction, "generator_fraction", 0.0, 1.0, low_open=True, hint="the paper: 1/4 to 1/3")
    hidden = max(1, round(discriminator.hidden_size * fraction))
    heads = max(1, round(discriminator.num_attention_heads * fraction))
    while hidden % heads:
        heads -= 1
    return ElectraConfig(
        **{
            **discriminator.to_dict(),
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "intermediate_size": max(1, round(discriminator.intermediate_size * fraction)),
            "architectures": ["ElectraForMaskedLM"],
        }
    )


#: Config fields the generator and the discriminator must share to share one embedding module.
SHARED_FIELDS = (
    "vocab_size",
    "embedding_size",
    "max_position_embeddings",
    "type_vocab_size",
    "position_embedding_type",
)


def check_not_tensor_parallel(*models: nn.Module) -> None:
    """Refuse models sharded by tensor parallelism (``tp_plan`` / ``parallelize_module``): ELECTRA cannot serve them.

    FSDP2 and DDP are fine. Example:
        >>> check_not_tensor_parallel(nn.Linear(2, 2))  # no DTensor parameters
    """
    for model in models:
        degree = max(getattr(model, "tp_size", None) or 1, mesh_model_parallel_size(model))
        if degree > 1:
            raise ValueError(
                f"ELECTRA pre-training does not support tensor parallelism ({type(model).__name__} is sharded over "
                f"{degree} tensor-parallel ranks): the generator's head is tied to the shared word embedding, and "
                "sampling replacements needs whole rows of its logits; load both models without tp_plan / "
                "parallelize_module and train with data parallelism (DDP) or FSDP2"
            )


class ElectraPretrainingModel(AuxiliaryModel):
    """A generator (``ElectraForMaskedLM``) and a discriminator (``ElectraForPreTraining``) sharing embeddings.

    ``forward(input_ids, labels, attention_mask=None, token_type_ids=None, masked_positions=None, *,
    sampling_seed, sampling_step=0)`` runs both (see the module docstring) and returns an :class:`ElectraPretrainingOutput`.

    Args:
        generator, discriminator: stock models with the same vocabulary and ``embedding_size``;
            the generator's embeddings are replaced by the discriminator's (kept in sync from here on).
        config: loss weight and sampling temperature.

    Example:
        >>> import torch
        >>> from transformers import ElectraConfig
        >>> disc = ElectraConfig(vocab_size=64, embedding_size=32, hidden_size=32, num_hidden_layers=2,
        ...                      num_attention_heads=2, intermediate_size=64)
        >>> model = ElectraPretrainingModel.from_config(disc, generator_fraction=0.25)
        >>> model.generator.config.hidden_size, model.shares_embeddings()
        (8, True)
        >>> batch = {"input_ids": torch.tensor([[5, 4, 7, 8]]), "labels": torch.tensor([[-100, 6, -100, -100]])}
        >>> out = model(**batch, sampling_seed=0)
        >>> tuple(out.generator_logits.shape), tuple(out.discriminator_logits.shape), out.replaced.dtype
        ((1, 64), (1, 4), torch.bool)
        >>> int(count_electra_targets(batch)[0]), int(count_electra_targets(batch)[1])  # MLM, RTD targets
        (1, 4)
    """

    def __init__(
        self,
        generator: ElectraForMaskedLM,
        discriminator: ElectraForPreTraining,
        config: ElectraPretrainingConfig | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(generator, ElectraForMaskedLM) or not isinstance(discriminator, ElectraForPreTraining):
            raise TypeError(
                "generator must be an ElectraForMaskedLM and discriminator an ElectraForPreTraining, got "
                f"{type(generator).__name__} and {type(discriminator).__name__}"
            )
        if config is not None and not isinstance(config, ElectraPretrainingConfig):
            raise TypeError(f"config must be an ElectraPretrainingConfig or None, got {type(config).__name__}")
        for field in SHARED_FIELDS:
            if getattr(generator.config, field, None) != getattr(discriminator.config, field, None):
                raise ValueError(
                    f"generator and discriminator must agree on {field} to share embeddings: "
                    f"{getattr(generator.config, field, None)} != {getattr(discriminator.config, field, None)}"
                )
        tables = (generator.get_output_embeddings().weight.shape, discriminator.get_input_embeddings().weight.shape)
        if tuple(tables[0]) != tuple(tables[1]):
            raise ValueError(
                f"the generator's output head {tuple(tables[0])} must match the discriminator's word embedding "
                f"{tuple(tables[1])} (vocab x embedding_size) to be tied to it; resize both to one tokenizer"
            )
        check_not_tensor_parallel(generator, discriminator)
        self.generator = generator
        self.discriminator = discriminator
        self.electra_config = config or ElectraPretrainingConfig()
        self.tie_embeddings()

    @classmethod
    def from_config(
        cls,
        discriminator: ElectraConfig,
        generator_fraction: float = 0.25,
        config: ElectraPretrainingConfig | None = None,
        *,
        seed: int = 0,
        attn_implementation: str | None = None,
    ) -> ElectraPretrainingModel:
        """Both models built from the discriminator's config (initial weights from ``seed``; global RNG restored)."""
        seed = check_length(seed, "seed", 0, why="the seed of both models' initial weights")
        generator = generator_config(discriminator, generator_fraction)
        kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            disc = AutoModelForPreTraining.from_config(discriminator, **kwargs)
            gen = AutoModelForMaskedLM.from_config(generator, **kwargs)
        return cls(gen, disc, config)

    def tie_embeddings(self) -> None:
        """Point the generator's embedding module and output head at the discriminator's embeddings."""
        shared = self.discriminator.electra.embeddings
        self.generator.electra.embeddings = shared
        self.generator.get_output_embeddings().weight = shared.word_embeddings.weight

    def shares_embeddings(self) -> bool:
        """Whether the generator's embeddings and output head are the discriminator's tensors."""
        shared = self.discriminator.electra.embeddings
        return (
            self.generator.electra.embeddings is shared
            and self.generator.get_output_embeddings().weight is shared.word_embeddings.weight
        )

    # ---- the stock model's face (config, device, embeddings, num_parameters: AuxiliaryModel) ----
    @property
    def stock_model(self) -> ElectraForPreTraining:
        """The model saved as a stock checkpoint (the discriminator, what gets fine-tuned)."""
        return self.discriminator

    def get_output_embeddings(self) -> nn.Module:
        """The generator's output head (the discriminator has no vocabulary head)."""
        return self.generator.get_output_embeddings()

    def count_targets(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """(2,) MLM and RTD targets of ``batch`` (see :func:`count_electra_targets`)."""
        return count_electra_targets(batch)

    # ---- one step -----------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
        *,
        sampling_seed: int,
        sampling_step: int = 0,
    ) -> ElectraPretrainingOutput:
        """Generator on ``input_ids`` (B, T), samples at ``labels != -100``, discriminator on the result.

        ``masked_positions`` (optional, (M,)): those selected positions as flat indices, as
        ``DataCollatorForMaskedLM(return_sparse_indices=True)`` emits them (see
        :func:`~hf_lmobj.models.electra_loss.selected_positions`).
        """
        check_not_tensor_parallel(self.generator, self.discriminator)
        labels, rtd_mask = self._checked_batch(input_ids, labels, attention_mask)  # (B, T) each
        sampling_seed = check_length(sampling_seed, "sampling_seed", 0, why="the seed of the replacement draws")
        sampling_step = check_length(sampling_step, "sampling_step", -1, why="the training step; -1 in evaluation")
        flat = selected_positions(labels, masked_positions)  # (M,) checked before anything runs
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        head = self.generator.get_output_embeddings()
        with capture_head(head, lambda hidden: hidden) as got:  # the head's input, no (B, T, V) logits
            self.generator(input_ids=input_ids, attention_mask=attention_mask, **extra)
        hidden = got[0]  # (B, T, E)
        selected = labels != IGNORE_INDEX  # (B, T)
        generator_logits = head(hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat))  # (M, V)
        mlm_targets = labels.reshape(-1).index_select(0, flat)  # (M,)
        original = torch.where(selected, labels, input_ids)  # (B, T)
        keys = [example_key({"input_ids": row[real]}) for row, real in zip(input_ids, rtd_mask)]
        samples = sample_replacements(
            generator_logits,
            flat // input_ids.shape[1],
            keys,
            sampling_seed,
            sampling_step,
            self.electra_config.sampling_temperature,
        )  # (M,)
        replaced_input_ids = original.reshape(-1).index_copy(0, flat, samples).view_as(original)  # (B, T)
        discriminator_logits = self.discriminator(
            input_ids=replaced_input_ids, attention_mask=attention_mask, **extra
        ).logits  # (B, T)
        return ElectraPretrainingOutput(
            generator_logits=generator_logits,
            mlm_targets=mlm_targets,
            replaced_input_ids=replaced_input_ids,
            replaced=replaced_input_ids != original,
            discriminator_logits=discriminator_logits,
            rtd_mask=rtd_mask,
        )

    def _checked_batch(self, input_ids, labels, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(labels, rtd_mask) once the batch is known to fit the pair (see the module docstring)."""
        if labels is None:
            raise ValueError("an ELECTRA batch needs 'labels' (the original tokens at the selected positions, "
                             "-100 elsewhere: DataCollatorForMaskedLM's)")  # fmt: skip
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype == torch.bool or input_ids.is_floating_point():
            kind = input_ids.dtype if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise TypeError(f"input_ids must be an integer tensor of token ids (B, T), got {kind}")
        if input_ids.dim() != 2 or input_ids.numel() == 0:
            raise ValueError(f"input_ids must be a (B, T) tensor with at least one token, got {tuple(input_ids.shape)}")
        vocab = self.generator.get_output_embeddings().weight.shape[0]
        check_id_range(np.array([int(input_ids.min()), int(input_ids.max())]), vocab)
        labels = check_labels(labels, "labels", vocab, shape=input_ids.shape, shape_of="input_ids' shape")
        rtd_mask = rtd_positions({"input_ids": input_ids, "attention_mask": attention_mask})  # (B, T)
        padded = (labels != IGNORE_INDEX) & ~rtd_mask
        if bool(padded.any()):
            raise ValueError(
                f"labels select {int(padded.sum())} padding position(s) (attention_mask 0): the generator cannot "
                "predict them; set labels to -100 wherever attention_mask is 0"
            )
        return labels, rtd_mask

    # ---- saving -------------------------------------------------------------------------------
    def save_pretrained(
        self,
        save_directory: str | Path,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        is_main_process: bool = True,
        **kwargs: Any,
    ) -> None:
        """The discriminator into ``save_directory`` (stock ``ElectraForPreTraining``), the generator
        and the ELECTRA settings into ``save_directory/generator``."""
        state_dict = self.state_dict() if state_dict is None else state_dict
        folder = Path(save_directory) / GENERATOR_FOLDER
        for prefix, model, target in (
            ("discriminator.", self.discriminator, save_directory),
            ("generator.", self.generator, folder),
        ):
            model.save_pretrained(
                target, state_dict=split_state_dict(state_dict, prefix), is_main_process=is_main_process, **kwargs
            )
        if is_main_process:
            write_atomic(
                folder / ELECTRA_CONFIG_NAME, json.dumps(dataclasses.asdict(self.electra_config), indent=2) + "\n"
            )

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> ElectraPretrainingModel:
        """Both models from ``path`` and ``path/generator``, embeddings shared again."""
        folder = Path(path) / GENERATOR_FOLDER
        if not (folder / ELECTRA_CONFIG_NAME).is_file():
            raise FileNotFoundError(f"{folder / ELECTRA_CONFIG_NAME} not found: {path} holds no ELECTRA generator")
        discriminator = ElectraForPreTraining.from_pretrained(path, **kwargs)
        generator = ElectraForMaskedLM.from_pretrained(folder, **kwargs)
        config = ElectraPretrainingConfig(**json.loads((folder / ELECTRA_CONFIG_NAME).read_text()))
        return cls(generator, discriminator, config)

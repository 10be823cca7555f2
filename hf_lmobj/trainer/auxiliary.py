"""``AuxiliaryObjectiveTrainer``: ``ObjectiveTrainer`` plus multi-token prediction and ELECTRA.

The auxiliary objective follows the model handed to it:

* a :class:`~hf_lmobj.models.mtp.MultiTokenPredictionModel` trains the causal objective plus its extra
  depths: ``L_0 + loss_weight / D * sum_k L_k``. The stock model's output head is captured
  (``capture_head``), so its input feeds depth 0 and the MTP modules, and every depth's loss goes
  through the same chunked ``linear_cross_entropy`` and shared head weight: no depth builds
  ``[tokens, vocab]`` logits;
* an :class:`~hf_lmobj.models.electra.ElectraPretrainingModel` trains ``MLM + rtd_weight * RTD`` on masked
  batches, replacements drawn from generators keyed by ``(args.seed, global step, row)``;
* any other model trains exactly as with ``ObjectiveTrainer``.

Exact under gradient accumulation and data parallelism as ``ObjectiveTrainer``'s loss, term by
term: the denominator (``_get_num_items_in_batch``) is a vector of global counts, one per loss term
(MTP: the targets of depths 0..D; ELECTRA: MLM targets, RTD tokens), summed over the accumulated
micro-batches and over processes.

Evaluation: MTP reports the ordinary next-token ``eval_loss`` / ``eval_perplexity`` (depth 0, what
the stock model is used for); ELECTRA reports ``eval_loss`` (MLM + rtd_weight * RTD, with draws keyed
by ``args.seed`` and step -1), ``eval_mlm_loss``, ``eval_rtd_loss``, ``eval_rtd_accuracy`` and
``eval_masked_accuracy`` (generator argmax at the selected positions), all from token totals, and
``eval_num_masked_tokens`` / ``eval_num_rtd_tokens``. As with ``ObjectiveTrainer``, a term without a
single target in the eval set (MTP's next-token loss; ELECTRA's MLM when every label is -100, its
RTD when every ``attention_mask`` is 0, both when no batch carries labels) is ``nan`` with a
warning, and so is ``eval_loss``.
Training logs add each term's mean over the logging interval (``mtp_depth_<k>_loss``,
``mlm_loss``, ``rtd_loss``; on several processes, this process's share times the process count).

Saving writes the stock model where ``from_pretrained`` finds it and the auxiliary parts beside it
(the models' ``save_pretrained``); resuming from a checkpoint reloads both.
"""

from __future__ import annotations

import inspect
import math
import os
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer
from transformers.trainer import TRAINING_ARGS_NAME

from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.files import atomic_output
from hf_lmobj.losses.functional import token_nll
from hf_lmobj.metrics.trainer_metrics import mean_nll_and_perplexity
from hf_lmobj.models.auxiliary_model import AuxiliaryModel
from hf_lmobj.models.electra import ElectraPretrainingModel
from hf_lmobj.models.electra_loss import electra_loss
from hf_lmobj.models.head import base_model_of, capture_head, linear_head
from hf_lmobj.models.mtp import MultiTokenPredictionModel
from hf_lmobj.models.mtp_targets import document_ids, multi_token_targets
from hf_lmobj.objectives import objective_of_variant
from hf_lmobj.trainer.compute_loss import check_objective, model_inputs
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

Auxiliary = Literal["mtp", "electra"]
AUXILIARY_OBJECTIVES: dict[type, tuple[str, str]] = {  # model class -> (auxiliary name, the objective it rides on)
    MultiTokenPredictionModel: ("mtp", objective_of_variant("mtp").name),
    ElectraPretrainingModel: ("electra", objective_of_variant("electra").name),
}
EVAL_SAMPLING_STEP = -1  # ELECTRA evaluation draws: keyed by (args.seed, -1, row), never a training step's


class AuxiliaryObjectiveTrainer(ObjectiveTrainer):
    """``ObjectiveTrainer`` that also trains the auxiliary objective of its model (see the module docstring).

    Args: those of ``ObjectiveTrainer``; ``objective`` is implied by an auxiliary model (causal for
    MTP, masked for ELECTRA) and may be left out.

    Example:
        >>> import tempfile, torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments
        >>> from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
        >>> base = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64))
        >>> model = MultiTokenPredictionModel(base, MTPConfig(num_depths=2))
        >>> args = TrainingArguments(tempfile.mkdtemp(), use_cpu=True, report_to=[])
        >>> trainer = AuxiliaryObjectiveTrainer(model=model, args=args)
        >>> trainer.objective, trainer.auxiliary
        ('causal', 'mtp')
        >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "labels": torch.tensor([[5, 6, 7, 8, 9]])}
        >>> trainer._get_num_items_in_batch([batch, batch], torch.device("cpu")).tolist()  # depths 0, 1, 2
        [8, 6, 4]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        model = kwargs.get("model", args[0] if args else None)
        self.auxiliary: Auxiliary | None = None
        for cls, (auxiliary, objective) in AUXILIARY_OBJECTIVES.items():
            if isinstance(model, cls):
                if kwargs.get("objective") is not None and check_objective(kwargs["objective"]) != objective:
                    raise ValueError(
                        f"a {cls.__name__} trains the {objective!r} objective; drop objective={kwargs['objective']!r}"
                    )
                kwargs["objective"] = objective
                self.auxiliary = auxiliary  # type: ignore[assignment]
        super().__init__(*args, **kwargs)
        if self.auxiliary is not None and self.args.label_names is None:
            self.label_names = ["labels"]  # the wrapper's forward hides the stock model's signature
        self._term_sums: dict[str, torch.Tensor] = {}
        self._term_last_step = 0
        self._electra_eval: torch.Tensor | None = None  # (6,) float64 sums, see prediction_step

    def _auxiliary_model(self, model: nn.Module | None = None) -> AuxiliaryModel | None:
        """The auxiliary wrapper inside ``model`` (default: the trainer's), or None for a plain model."""
        model = model if model is not None else self.model
        model = base_model_of(self.accelerator.unwrap_model(model)) if self.auxiliary else None
        return model if isinstance(model, AuxiliaryModel) else None

    # ---- counting -------------------------------------------------------------------------
    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> torch.Tensor | None:
        """Per-term target counts over all micro-batches (and processes): the loss denominators."""
        auxiliary = self._auxiliary_model()
        if auxiliary is None:
            return super()._get_num_items_in_batch(batch_samples, device)
        if not batch_samples or not all(self._has_targets(b) for b in batch_samples):
            return None
        counts = sum(auxiliary.count_targets(b).to(device) for b in batch_samples)  # (K,)
        if self._tokens_summed_across_processes():
            counts = self.accelerator.gather(counts.reshape(1, -1)).sum(dim=0) // self._ranks_per_replica()  # (K,)
        return counts

    # ---- the loss -------------------------------------------------------------------------
    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """The auxiliary objective's loss; MTP in evaluation (or asked for outputs): the next-token loss alone."""
        auxiliary = self._auxiliary_model(model)
        mtp = isinstance(auxiliary, MultiTokenPredictionModel)
        if auxiliary is None or (mtp and (return_outputs or self._eval_totals is not None)):
            if isinstance(num_items_in_batch, torch.Tensor) and num_items_in_batch.dim() == 1:
                num_items_in_batch = num_items_in_batch[0]  # depth 0: the main objective's count
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        outputs = None
        if mtp:
            loss = self._mtp_loss(model, auxiliary, inputs, num_items_in_batch)
        else:
            loss, outputs = self._electra_loss(model, auxiliary, inputs, num_items_in_batch)
        if num_items_in_batch is not None and self._tokens_summed_across_processes():
            loss = loss * self._data_parallel_size()  # DDP / FSDP average gradients over the replicas
        self.loss_is_scaled_for_ga = num_items_in_batch is not None
        return (loss, outputs) if return_outputs else loss

    def _mtp_loss(self, model: nn.Module, mtp: MultiTokenPredictionModel, inputs, counts) -> torch.Tensor:
        head = linear_head(model)
        if head is None:
            raise ValueError(
                "multi-token prediction scores every depth through the output head as a plain nn.Linear; "
                "this model's logits come from elsewhere (LoRA on the head, logit scaling): use a stock head"
            )
        targets = multi_token_targets(inputs, mtp.mtp_config.num_depths, mtp.vocab_size)  # (1 + D, B, T)
        counts = _per_term_counts(counts, mtp.mtp_config.num_depths + 1, "one per depth 0..D")
        documents = document_ids(inputs)  # (B, T)
        input_ids = inputs["input_ids"]

        def all_depths(hidden: torch.Tensor) -> torch.Tensor:  # hidden: (B, T, H), the head's input
            states = [hidden, *mtp.depth_hidden_states(hidden, input_ids, documents)]
            losses = [
                self._head_loss_fn(head, targets[k], False, None if counts is None else counts[k])(h)
                for k, h in enumerate(states)
            ]
            self._record_terms({f"mtp_depth_{k}_loss": loss for k, loss in enumerate(losses) if k > 0})
            return mtp.combine_losses(losses)

        with capture_head(head, all_depths) as got:
            model(**model_inputs("causal", inputs, model))
        if len(got) != 1:
            raise RuntimeError(f"expected the output head to run once per forward, it ran {len(got)} times")
        return got[0]

    def _electra_loss(self, model: nn.Module, electra: ElectraPretrainingModel, inputs, counts):
        """(MLM + rtd_weight * RTD, the ElectraPretrainingOutput), draws keyed by (args.seed, global step, row)."""
        counts = _per_term_counts(counts, 2, "MLM targets, RTD tokens")
        output = model(**inputs, sampling_seed=self.args.seed, sampling_step=self.state.global_step)
        loss, mlm, rtd = electra_loss(
            output,
            None if counts is None else counts[0],
            None if counts is None else counts[1],
            electra.electra_config.rtd_weight,
            self.loss_options,
        )
        self._record_terms({"mlm_loss": mlm, "rtd_loss": rtd})
        return loss, output

    # ---- logging the terms ----------------------------------------------------------------
    def _record_terms(self, terms: dict[str, torch.Tensor]) -> None:
        if not torch.is_grad_enabled():
            return
        scale = self._data_parallel_size() if self._tokens_summed_across_processes() else 1
        for name, value in terms.items():
            self._term_sums[name] = self._term_sums.get(name, 0.0) + value.detach().float() * scale

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Adds each auxiliary term's mean per optimizer step since the last training log."""
        if "loss" in logs and self._term_sums:
            steps = max(self.state.global_step - self._term_last_step, 1)
            logs.update({name: round(float(total) / steps, 4) for name, total in self._term_sums.items()})
            self._term_sums, self._term_last_step = {}, self.state.global_step
        super().log(logs, *args, **kwargs)

    # ---- evaluation (ELECTRA: both terms from token totals) --------------------------------
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        if self.auxiliary != "electra" or self._electra_eval is None:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        if inputs.get("labels") is None:  # nothing to score (ObjectiveTrainer's rule): counts nothing
            return None, None, None
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            output = model(**inputs, sampling_seed=self.args.seed, sampling_step=EVAL_SAMPLING_STEP)
            electra = self._auxiliary_model(model)
            loss = electra_loss(output, rtd_weight=electra.electra_config.rtd_weight)[0]
        rows = _electra_row_sums(output, inputs["labels"])  # (B, 6)
        self._electra_eval += self.accelerator.gather_for_metrics(rows).sum(dim=0).cpu()
        return loss.detach(), None, None

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        if self.auxiliary != "electra":
            return super().evaluation_loop(
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
        self._electra_eval = torch.zeros(6, dtype=torch.float64)
        try:  # the stock loop: ObjectiveTrainer's next-token / masked totals do not apply to the pair
            output = Trainer.evaluation_loop(
                self, dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
            totals = self._electra_eval.tolist()  # MLM NLL, count, hits; RTD BCE, count, hits
        finally:
            self._electra_eval = None
        output.metrics.update(self._electra_metrics(metric_key_prefix, *totals))
        return output

    def _electra_metrics(self, p: str, mlm_nll, mlm_count, mlm_hits, rtd_bce, rtd_count, rtd_hits) -> dict[str, Any]:
        """Both terms from token totals; a term without a single target is nan with a warning (never 0.0)."""
        mlm, _ = mean_nll_and_perplexity(mlm_nll, mlm_count, f"the {p} set's masked positions (MLM)")
        rtd, _ = mean_nll_and_perplexity(rtd_bce, rtd_count, f"the {p} set's real tokens (RTD, attention_mask 1)")
        weight = self._auxiliary_model().electra_config.rtd_weight
        return {
            f"{p}_loss": mlm + weight * rtd,  # nan when either term is
            f"{p}_mlm_loss": mlm,
            f"{p}_rtd_loss": rtd,
            f"{p}_masked_accuracy": mlm_hits / mlm_count if mlm_count > 0 else math.nan,
            f"{p}_rtd_accuracy": rtd_hits / rtd_count if rtd_count > 0 else math.nan,
            f"{p}_num_masked_tokens": int(mlm_count),
            f"{p}_num_rtd_tokens": int(rtd_count),
        }

    # ---- saving and resuming --------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The auxiliary model's ``save_pretrained`` (stock model + parts beside it), tokenizer, args."""
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        if not isinstance(model, AuxiliaryModel):
            return super()._save(output_dir, state_dict)
        if not self.args.should_save:
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        model.save_pretrained(output_dir, state_dict=state_dict, is_main_process=True)
        tokenizer = self.processing_class or getattr(self.data_collator, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(output_dir)
        with atomic_output(os.path.join(output_dir, TRAINING_ARGS_NAME)) as tmp:
            torch.save(self.args, tmp)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        target = self.accelerator.unwrap_model(model if model is not None else self.model, keep_torch_compile=False)
        if not isinstance(target, AuxiliaryModel):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        saved = type(target).from_pretrained(resume_from_checkpoint)
        target.load_state_dict(saved.state_dict())

    def _set_signature_columns_if_needed(self) -> None:
        """Keep the dataset columns the *stock* model's forward takes (the wrapper's is generic)."""
        auxiliary = self._auxiliary_model()
        if self._signature_columns is None and auxiliary is not None:
            columns = inspect.signature(auxiliary.stock_model.forward).parameters
            self._signature_columns = [*columns, "label", "label_ids", *self.label_names]
        super()._set_signature_columns_if_needed()


def _per_term_counts(counts: Any, terms: int, what: str) -> torch.Tensor | None:
    """``num_items_in_batch`` of an auxiliary objective: None, or ``terms`` counts (``_get_num_items_in_batch``'s)."""
    if counts is None:
        return None
    if not isinstance(counts, torch.Tensor) or counts.dim() != 1 or counts.numel() != terms:
        shape = tuple(counts.shape) if isinstance(counts, torch.Tensor) else type(counts).__name__
        raise ValueError(
            f"num_items_in_batch of this auxiliary objective holds {terms} counts ({what}), got {shape}; pass "
            "the trainer's _get_num_items_in_batch result or None (each term's local count)"
        )
    return counts


def _electra_row_sums(output, labels: torch.Tensor) -> torch.Tensor:
    """(B, 6) float64 per row: MLM NLL sum, MLM count, MLM argmax hits, RTD BCE sum, RTD count, RTD hits."""
    batch, length = labels.shape
    selected_rows = (labels != IGNORE_INDEX).reshape(-1).nonzero().squeeze(1) // length  # (M,)
    nll = token_nll(output.generator_logits, output.mlm_targets)  # (M,)
    hits = (output.generator_logits.argmax(dim=-1) == output.mlm_targets).double()  # (M,)
    mask = output.rtd_mask  # (B, T)
    bce = F.binary_cross_entropy_with_logits(
        output.discriminator_logits.float(), output.replaced.float(), reduction="none"
    ).masked_fill(~mask, 0.0)  # (B, T)
    rtd_hits = (((output.discriminator_logits > 0) == output.replaced) & mask).sum(dim=1)  # (B,)
    per_row = torch.zeros(batch, 6, dtype=torch.float64, device=labels.device)
    per_row[:, 0].index_add_(0, selected_rows, nll.double())
    per_row[:, 1].index_add_(0, selected_rows, torch.ones_like(nll, dtype=torch.float64))
    per_row[:, 2].index_add_(0, selected_rows, hits)
    per_row[:, 3] = bce.sum(dim=1).double()
    per_row[:, 4] = mask.sum(dim=1).double()
    per_row[:, 5] = rtd_hits.double()
    return per_row

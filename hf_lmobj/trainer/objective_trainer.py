"""``ObjectiveTrainer``: a ``transformers.Trainer`` whose loss is exact for every objective of the registry.

What it changes, and only that:

* **the loss** (``compute_loss``): the batch's targets for the objective (causal: ``shift_labels``
  or ``labels`` shifted; masked: the selected positions; encoder-decoder: the target tokens) are scored
  from the final hidden states and the output embedding with ``linear_cross_entropy``, so the
  ``[tokens, vocab]`` logits are never built and unscored positions cost nothing. Models whose
  head is not a plain ``nn.Linear`` (LoRA on the head, logit scaling after it) fall back to the
  model's logits.
* **the denominator** (``_get_num_items_in_batch``, the hook ``get_batch_samples`` and
  ``prediction_step`` use): the target count of the objective over all gradient-accumulation
  micro-batches, summed over processes when ``average_tokens_across_devices`` (the default). Each
  micro-batch loss is ``sum / count`` (times the process count, as DDP averages gradients), so
  accumulation and data parallelism give the gradients of one big batch.
* **the training data** (``get_train_dataloader``): a :class:`~hf_lmobj.data.PretrainingStream`
  is read through :class:`~hf_lmobj.data.PipelineLoader` (this rank's slice, ranks kept in step,
  each row once per epoch), not through accelerate's dispatcher; the tokens each source gave are
  logged with the loss (``train_tokens_<source>``). A plain ``IterableDataset`` on several
  processes gets tensor-only batches (accelerate's dispatcher concatenates tensors; the model runs
  without a cache through ``TrainingArguments.use_cache``). ``seq_lengths`` (the document lengths of
  a packed row) is kept like a model input.
* **saving** (``save_model``): a model sharded by torch's ``fully_shard`` without accelerate knowing
  it (FSDP2 applied by hand, or accelerate's CPU fallback) is gathered on every rank and written
  whole by the main process, as accelerate does for its own FSDP / ZeRO-3; call it on every rank.
* **evaluation** (``prediction_step`` / ``evaluation_loop``): per-row NLL sums and target counts
  are gathered instead of logits; ``eval_loss`` is total NLL / total targets and
  ``eval_perplexity`` is its exponential, the corpus values (inf where that overflows). (Both are
  pure NLL: no label smoothing or z-loss.) An eval set without a single target reports ``nan``
  for both, with a warning, never 0.0. With ``compute_metrics`` the stock path still collects
  logits for it.

``make_compute_loss_func`` (:mod:`.compute_loss`) gives the same loss (on the model's logits) to a stock
``Trainer(compute_loss_func=...)``; the objective checks and the model's inputs come from there too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import Trainer
from transformers.utils import logging

from hf_lmobj.checks import check_flag, check_length
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.data.loader import PipelineLoader
from hf_lmobj.data.pipeline import PretrainingStream
from hf_lmobj.losses.functional import summed_loss, token_nll
from hf_lmobj.losses.head_chunks import HeadLossOptions
from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy, linear_token_losses
from hf_lmobj.losses.targets import Objective, count_targets, objective_targets
from hf_lmobj.metrics.trainer_metrics import mean_nll_and_perplexity
from hf_lmobj.models.head import capture_head, linear_head, model_logit_softcap
from hf_lmobj.models.sharding import full_state_dict, has_dtensor_parameters, ranks_per_replica
from hf_lmobj.objectives import get_objective, loss_family
from hf_lmobj.trainer.compute_loss import check_objective, infer_objective, model_inputs
from hf_lmobj.trainer.pipeline_training import (
    checked_resume,
    data_fingerprint,
    finish_checkpoint,
    pipeline_loader,
    replay_free,
    source_token_counts,
    tensors_only,
)

logger = logging.get_logger(__name__)


class ObjectiveTrainer(Trainer):
    """``Trainer`` computing any objective's loss (causal, masked, encoder-decoder) exactly and without full logits.

    Args (besides ``Trainer``'s, all keyword-only):
        objective: a pre-training objective word of :mod:`hf_lmobj.objectives` (``"causal"``, ``"masked"``,
            ``"span"``, ...) or None to infer it from the model.
        z_loss: coefficient of the logsumexp**2 penalty (0 = off).
        logit_softcap: ``c * tanh(logits / c)`` before the loss; default the model's
            ``final_logit_softcapping`` if it has one.
        chunk_size: rows per chunk of ``linear_cross_entropy`` (None = about 16M logits).
        use_linear_head: False forces the model's own logits (the reference path).

    Label smoothing comes from ``TrainingArguments.label_smoothing_factor``.

    Example:
        >>> import tempfile, torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments
        >>> _ = torch.manual_seed(0)
        >>> model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16,
        ...                                    bos_token_id=0, eos_token_id=0)).eval()
        >>> args = TrainingArguments(tempfile.mkdtemp(), use_cpu=True, report_to=[])
        >>> trainer = ObjectiveTrainer(model=model, args=args)  # objective=None: inferred from the model
        >>> trainer.objective
        'causal'
        >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]]),
        ...          "labels": torch.tensor([[5, 6, 7, 8], [9, 10, -100, -100]])}
        >>> loss = trainer.compute_loss(model, batch)  # from the hidden states: no [tokens, vocab] logits
        >>> torch.allclose(loss, model(**batch).loss)  # the model's own loss, exactly
        True
    """

    def __init__(
        self,
        *args: Any,
        objective: Objective | None = None,
        z_loss: float = 0.0,
        logit_softcap: float | None = None,
        chunk_size: int | None = None,
        use_linear_head: bool = True,
        ignore_data_fingerprint: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("compute_loss_func") is not None:
            raise ValueError("ObjectiveTrainer computes its own loss: drop compute_loss_func (or use a stock Trainer)")
        super().__init__(*args, **kwargs)
        self.objective: str = check_objective(objective) if objective is not None else infer_objective(self.model)
        logit_softcap = logit_softcap if logit_softcap is not None else model_logit_softcap(self.model)
        self.loss_options = HeadLossOptions(self.args.label_smoothing_factor, z_loss, logit_softcap)
        self.label_smoother = None  # label smoothing is part of loss_options
        self.chunk_size = check_length(chunk_size, "chunk_size", optional=True)
        self.use_linear_head = check_flag(use_linear_head, "use_linear_head")
        self._eval_totals: torch.Tensor | None = None  # (2,) float64: NLL sum, target count
        self._eval_rows: torch.Tensor | None = None  # (B, 2) of the last evaluated batch
        self._pipeline_loader: PipelineLoader | None = None
        self.ignore_data_fingerprint = check_flag(ignore_data_fingerprint, "ignore_data_fingerprint")
        self._data_resume: dict | None = None  # the checkpoint's data state, applied where the Trainer would replay

    # ---- the training data, checkpoints and resume (hf_lmobj.trainer.pipeline_training) ----
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        """``Trainer.train``; a resume is checked first and the data continues without replay.

        ``resume_from_checkpoint=True`` takes the latest *complete* checkpoint of ``output_dir`` (one
        whose save finished). A checkpoint without ``optimizer.pt``, ``scheduler.pt``,
        ``trainer_state.json`` (or, for a ``PretrainingStream``, ``data_state.json``) is refused by
        name, and so is one whose data fingerprint differs (unless ``ignore_data_fingerprint``). A checkpoint
        that already reached ``max_steps`` trains no further step: the model holds its weights, no checkpoint
        is written.
        """
        folder, self._data_resume = checked_resume(
            resume_from_checkpoint, self.args.output_dir, self._data_fingerprint(), self.ignore_data_fingerprint
        )
        return super().train(folder, *args, **kwargs)

    def _data_fingerprint(self) -> dict[str, Any] | None:
        if not isinstance(self.train_dataset, PretrainingStream):
            return None
        return data_fingerprint(self.train_dataset, loss_family(self.objective))

    def _take_data_resume(self) -> dict | None:
        state, self._data_resume = self._data_resume, None
        return state

    def _run_epoch(self, model, epoch, train_dataloader, *args: Any, **kwargs: Any):
        """The stock epoch; a ``PipelineLoader`` resumes from its saved position instead of replaying batches.

        A run resumed at (or past) ``max_steps`` trains nothing: the stock epoch would run one step
        before its stop check (``checkpoint-5`` of a 4-step run).
        """
        if self.state.max_steps > 0 and self.state.global_step >= self.state.max_steps:
            logger.info(f"step {self.state.global_step} of {self.state.max_steps}: nothing to train")
            self.control.should_training_stop = True
            return None
        if not isinstance(train_dataloader, PipelineLoader):
            return super()._run_epoch(model, epoch, train_dataloader, *args, **kwargs)
        with replay_free(self._take_data_resume):
            return super()._run_epoch(model, epoch, train_dataloader, *args, **kwargs)

    def _save_checkpoint(self, model, trial) -> None:
        """The stock checkpoint, then the data state, then a completion marker; old ones rotate last."""
        limit = self.args.save_total_limit
        self.args.save_total_limit = None  # rotation waits until the new checkpoint is complete
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        finish_checkpoint(self, trial, limit, self._data_fingerprint())

    def get_train_dataloader(self):
        """A ``PretrainingStream`` through ``PipelineLoader``; anything else as the stock Trainer does."""
        if isinstance(self.train_dataset, PretrainingStream):
            self._pipeline_loader = pipeline_loader(self.train_dataset, self.args, self._train_batch_size)
            return self._pipeline_loader
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset) and self.args.world_size > 1:
            self.data_collator = tensors_only(self.data_collator)
        return super().get_train_dataloader()

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if "seq_lengths" not in self._signature_columns:  # a packed row's boundaries, read by the collator
            self._signature_columns.append("seq_lengths")

    def pipeline_token_counts(self) -> dict[str, int]:
        """``train_tokens_<source>``: tokens each pipeline source gave, summed over ranks (call on every rank)."""
        return source_token_counts(self._pipeline_loader, self.accelerator, self.args)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The stock log, plus the tokens each pipeline source gave so far (summed over ranks)."""
        if "loss" in logs:
            logs.update(self.pipeline_token_counts())
        super().log(logs, start_time)

    # ---- counting -------------------------------------------------------------------------
    def _has_targets(self, batch: Mapping[str, Any]) -> bool:
        next_token = get_objective(self.objective).next_token
        return batch.get("labels") is not None or (next_token and batch.get("shift_labels") is not None)

    def _ranks_per_replica(self) -> int:
        """Ranks that see the same tokens (tensor / context parallel degree); see ``ranks_per_replica``."""
        return ranks_per_replica(self.accelerator, self.model)

    def _data_parallel_size(self) -> int:
        return self.accelerator.num_processes // self._ranks_per_replica()

    def _tokens_summed_across_processes(self) -> bool:
        return bool(self.args.average_tokens_across_devices) and self.args.world_size > 1

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> torch.Tensor | None:
        """Objective targets over all micro-batches (and processes): the loss denominator."""
        if not batch_samples or not all(self._has_targets(b) for b in batch_samples):
            return None
        count = sum(count_targets(self.objective, b).to(device) for b in batch_samples)
        if self._tokens_summed_across_processes():
            count = (
                self.accelerator.gather(count.reshape(1)).sum() // self._ranks_per_replica()
            )  # TP ranks: same tokens
        return count

    # ---- the loss -------------------------------------------------------------------------
    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """Objective loss: token sum / ``num_items_in_batch`` (else the local target count)."""
        targets = objective_targets(self.objective, inputs)  # (B, T)
        evaluating = self._eval_totals is not None
        head = linear_head(model) if self.use_linear_head and not return_outputs else None
        feed = model_inputs(self.objective, inputs, model)
        if head is not None:
            with capture_head(head, self._head_loss_fn(head, targets, evaluating, num_items_in_batch)) as got:
                outputs = model(**feed)
            if len(got) != 1:
                raise RuntimeError(f"expected the output embedding to run once per forward, it ran {len(got)} times")
            result = got[0]
        else:
            outputs = model(**feed)
            logits = outputs["logits"] if isinstance(outputs, Mapping) else outputs[0]
            result = (
                token_nll(logits, targets, IGNORE_INDEX, HeadLossOptions(logit_softcap=self.loss_options.logit_softcap))
                if evaluating
                else summed_loss(logits, targets, num_items_in_batch, IGNORE_INDEX, self.loss_options)
            )
        if evaluating:
            loss = self._record_eval_rows(result, targets)
        else:
            loss = result
            if num_items_in_batch is not None and self._tokens_summed_across_processes():
                loss = loss * self._data_parallel_size()  # DDP / FSDP average gradients over the replicas
        self.loss_is_scaled_for_ga = num_items_in_batch is not None
        return (loss, outputs) if return_outputs else loss

    def _head_loss_fn(self, head: nn.Linear, targets, evaluating: bool, num_items_in_batch):
        opts, chunk = self.loss_options, self.chunk_size

        def fn(hidden: torch.Tensor) -> torch.Tensor:
            if evaluating:
                return linear_token_losses(
                    hidden, head.weight, targets, bias=head.bias, chunk_size=chunk, logit_softcap=opts.logit_softcap
                )
            return linear_cross_entropy(
                hidden,
                head.weight,
                targets,
                bias=head.bias,
                num_items_in_batch=num_items_in_batch,
                chunk_size=chunk,
                label_smoothing=opts.label_smoothing,
                z_loss=opts.z_loss,
                logit_softcap=opts.logit_softcap,
            )

        return fn

    # ---- evaluation -----------------------------------------------------------------------
    def _record_eval_rows(self, nll: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Keep per-row (NLL sum, target count) of this batch; return its token-mean NLL."""
        counts = (targets != IGNORE_INDEX).sum(dim=-1)  # (B,)
        self._eval_rows = torch.stack([nll.sum(dim=-1).double(), counts.double()], dim=-1)  # (B, 2)
        return nll.sum() / counts.sum().clamp_min(1)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Loss-only steps run the head-free path; rows' NLL sums are gathered, never the logits."""
        if self._eval_totals is None or not self._has_targets(inputs):
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        self._eval_rows = None
        if prediction_loss_only:
            inputs = self._prepare_inputs(inputs)
            with torch.no_grad(), self.compute_loss_context_manager():
                result = (self.compute_loss(model, inputs).detach(), None, None)
        else:
            result = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        rows = self.accelerator.gather_for_metrics(self._eval_rows)  # (B_all, 2), duplicates dropped
        self._eval_totals += rows.sum(dim=0).cpu() / self._ranks_per_replica()  # TP ranks scored the same rows
        return result

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """The stock loop, then ``<prefix>_loss`` / ``<prefix>_perplexity`` from the token totals."""
        self._eval_totals = torch.zeros(2, dtype=torch.float64)
        try:
            output = super().evaluation_loop(
                dataloader,
                description,
                prediction_loss_only=prediction_loss_only,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
            nll, count = self._eval_totals.tolist()
        finally:
            self._eval_totals = self._eval_rows = None
        mean, perplexity = mean_nll_and_perplexity(nll, count, f"the {metric_key_prefix} set")
        output.metrics[f"{metric_key_prefix}_loss"] = mean  # nan, never 0.0, when nothing was scored
        output.metrics[f"{metric_key_prefix}_perplexity"] = perplexity
        output.metrics[f"{metric_key_prefix}_num_target_tokens"] = int(count)
        return output

    # ---- saving ---------------------------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """``Trainer.save_model``; DTensor shards unknown to accelerate are gathered collectively.

        Call it on every rank, as FSDP and DeepSpeed ZeRO-3 require: the full state dict is a
        collective, and the main process writes one safetensors checkpoint ``from_pretrained`` loads.
        """
        if self.is_fsdp_enabled or self.is_deepspeed_enabled or not has_dtensor_parameters(self.model):
            return super().save_model(output_dir, _internal_call)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        state_dict = full_state_dict(self.model)  # every rank takes part
        self._save(output_dir, state_dict=state_dict)  # writes on the main process only
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

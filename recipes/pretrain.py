"""Pre-train a small language model with one of hf_lmobj's objectives.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone.

    accelerate launch recipes/pretrain.py --config recipes/configs/causal/demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/pretrain.py --config recipes/configs/causal/demo.yaml --max_steps 20
    python recipes/pretrain.py --config recipes/configs/causal/demo.yaml --max_steps 3 --output_dir out/quick

Any ``TrainingArguments`` field, and every field of ``DataArguments`` / ``ModelArguments`` /
``AuxiliaryArguments`` / ``FimArguments`` / ``ReportArguments`` / ``RuntimeArguments`` /
``OptimizerArguments`` (``--optimizer muon``: Muon for the blocks' matrices) / ``ResumeArguments``, can
be set in the YAML file or overridden on the command line. A preempted run continues with the same
command plus ``--resume_from_checkpoint last`` (the latest complete checkpoint of ``--output_dir``,
trained to the ``max_steps`` its first start chose; ``recipes/support/resume.py``); the same command
alone over ``checkpoint-*`` folders is refused. The run writes the model (safetensors), the tokenizer,
``metrics.json``, ``loss_curve.png`` and ``README.md`` (the model card) into ``--output_dir``. Every value the
run meets after training (scoring windows, infilling budget, sample, n-gram orders, each length against the
model's positions) is checked before any data (``recipes/support/pretrain_checks.py``); the model, the tokenizer
and ``trainer_state.json`` are saved the moment training ends, and a later failure leaves ``metrics.json`` with
what was computed and says where the model is (``recipes/support/after_training.py``). The printed report ends
with, for clm, bits per byte of the validation text beside a Kneser-Ney n-gram model of the same
training tokens and zlib / bz2 / xz; for mlm and span, eval_loss beside the unigram entropy of the
training tokens and the target accuracy; with ``fim_rate > 0`` (``causal/fim_demo.yaml``:
fill-in-the-middle) also the left-to-right bits per byte and the single-line infilling exact match, edit
similarity and hidden-line bits per byte (PSM, SPM, prefix-only), beside a plain run's ``metrics.json`` when ``fim_baseline_metrics`` names one; then
the time of each phase and the training tokens per second. Torch's CPU threads follow the cores other
processes leave free (``--torch_threads N`` fixes them).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import copy

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from hf_lmobj.corpus import build_tokenizer, load_text_splits
from hf_lmobj.metrics.token_statistics import target_token_accuracy, unigram_entropy
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from hf_lmobj.trainer.teardown import close_distributed

from .support.after_training import nothing_lost, save_trained_model
from .support.auxiliary_pretraining import (
    AuxiliaryArguments,
    build_pretraining_model,
    token_predictor,
)
from .support.config_parsing import cpu_aware_argv, parse_args_with_config
from .support.cpu_threads import AdaptiveThreadsCallback, RuntimeArguments
from .support.fim_pretraining import (
    FimArguments,
    infilling_cases,
    prepare_pretraining_data,
    validation_infilling,
)
from .support.models import ModelArguments
from .support.optimizers import OptimizerArguments, optimizer_cls_and_kwargs
from .support.phase_timer import PhaseTimer
from .support.pipeline_data import bounded_documents, prepare_pipeline_data, uses_pipeline
from .support.pretrain_checks import check_built_model, check_pretrain_arguments
from .support.pretrain_report import (
    PretrainRun,
    ReportArguments,
    baseline_bits_per_byte,
    baseline_key,
    sample_continuation,
    score_validation_texts,
    write_and_report,
)
from .support.pretraining import (
    CAUSAL_OBJECTIVES,
    MASKED_OBJECTIVES,
    DataArguments,
)
from .support.resume import (
    ResumeArguments,
    ResumePlan,
    begin_new_run,
    keep_first_start_steps,
    load_checkpoint_weights,
    plan_resume,
)
from .support.time_budget import StepBudget, fit_max_steps_to_budget

__all__ = ["ReportArguments", "main", "baseline_key"]


#: The argument dataclasses, in the order main unpacks them.
ARGUMENT_CLASSES = (
    DataArguments,
    ModelArguments,
    AuxiliaryArguments,
    FimArguments,
    ReportArguments,
    RuntimeArguments,
    OptimizerArguments,
    ResumeArguments,
    TrainingArguments,
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    (data_args, model_args, aux_args, fim_args, report_args, runtime_args, optimizer_args, resume_args, train_args) = (
        parse_args_with_config(
            ARGUMENT_CLASSES,
            cpu_aware_argv(argv),
            description=__doc__,
        )
    )
    check_pretrain_arguments(data_args, model_args, aux_args, fim_args, report_args, runtime_args, train_args)
    timer = PhaseTimer()
    streamed = uses_pipeline(data_args)  # streaming / token store / mixture: nothing is loaded whole
    resume = plan_resume(train_args, resume_args, needs_data_state=streamed)  # before any data: fails in seconds
    threads = _thread_control(runtime_args)
    set_seed(train_args.seed)
    with timer.phase("corpus"):
        splits = None if streamed else load_text_splits(
            data_args.dataset_name,
            data_args.dataset_config,
            data_args.text_column,
            data_args.validation_fraction,
            data_args.max_documents,
        )  # fmt: skip
    with timer.phase("tokenizer"):
        tokenizer = (
            AutoTokenizer.from_pretrained(data_args.tokenizer_name)
            if data_args.tokenizer_name
            else build_tokenizer(data_args.vocab_size)
        )
    with timer.phase("data"):
        model = build_pretraining_model(data_args.objective, tokenizer, model_args, aux_args, train_args.seed)
        check_built_model(model, tokenizer, data_args, report_args, model_args)  # a checkpoint's positions too
        if resume.weights_from is not None:  # --weights_only_restart: a new run from a checkpoint's weights
            load_checkpoint_weights(model, resume.weights_from)
        with train_args.main_process_first(desc="prepare data"):
            if streamed:
                data, validation = prepare_pipeline_data(
                    data_args.objective, tokenizer, data_args, train_args.per_device_train_batch_size, model,
                    train_args.seed, fim_args,
                )  # fmt: skip
            else:
                data = prepare_pretraining_data(
                    data_args.objective, tokenizer, splits, data_args, fim_args, model, train_args.seed
                )
                validation = splits["validation"]
            validation_texts = list(validation[data_args.text_column])
            cases = infilling_cases(validation, data_args.text_column, fim_args)  # before training: fails fast
        if data.train_documents is not None and data_args.report_sample_tokens:  # the report's n-gram sample
            data.train_documents = bounded_documents(data.train_documents, data_args.report_sample_tokens)
    trainer_class = AuxiliaryObjectiveTrainer if aux_args.auxiliary_objective else ObjectiveTrainer
    trainer = trainer_class(
        model=model,
        args=train_args,
        callbacks=[*data.callbacks, *([threads] if threads else [])],
        data_collator=data.collator,
        train_dataset=data.train_dataset,
        eval_dataset=data.eval_dataset,
        optimizer_cls_and_kwargs=optimizer_cls_and_kwargs(optimizer_args, train_args),
        ignore_data_fingerprint=data_args.ignore_data_fingerprint,
    )
    with timer.phase("training"):
        budget = _fit_to_budget(trainer, runtime_args, threads, resume)
        if not resume.continues and trainer.args.should_save:
            begin_new_run(train_args.output_dir, resume, trainer.args.max_steps, budget)
        train_metrics = trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint).metrics
    with timer.phase("saving"):  # first: nothing after training may cost the model (collective on every rank)
        save_trained_model(trainer, tokenizer, train_args.output_dir)
    metrics: dict[str, float] = {}
    with nothing_lost(
        train_args.output_dir, metrics, trainer.is_world_process_zero(), timer, "the model and tokenizer"
    ):
        with timer.phase("evaluation"):
            metrics.update(trainer.evaluate())
            if data_args.objective not in CAUSAL_OBJECTIVES:  # a fresh collator: epoch 0 noise, comparable across runs
                fresh = copy.copy(data.collator)
                fresh.set_epoch(0)
                name = "eval_masked_accuracy" if data_args.objective in MASKED_OBJECTIVES else "eval_span_accuracy"
                metrics[name] = target_token_accuracy(token_predictor(trainer.model), data.eval_dataset, fresh)
        if data.sample_documents is not None:  # streamed: the first report_sample_tokens training tokens, read now
            data.train_documents = data.sample_documents()
        metrics.update(_train_statistics(train_metrics, trainer, data, data_args.report_sample_tokens))
        metrics.update(trainer.pipeline_token_counts())  # collective: every rank
        sample = None
        if data_args.objective in CAUSAL_OBJECTIVES:
            with timer.phase("scoring"):
                if threads:
                    threads.adapt()
                predictor = token_predictor(trainer.model)  # MTP: the causal LM itself
                progress = not train_args.disable_tqdm and trainer.is_world_process_zero()
                metrics.update(
                    score_validation_texts(predictor, tokenizer, validation_texts, data_args, report_args, progress)
                )
            if fim_args.infill_cases:  # 200 by default when fim_rate > 0, none for a plain run
                with timer.phase("infilling"):
                    metrics.update(validation_infilling(predictor, tokenizer, validation, data_args.text_column,
                                                        fim_args, data_args.max_length, cases))  # fmt: skip
            with timer.phase("sampling"):
                sample = sample_continuation(predictor, tokenizer, report_args)
        # Collective work above runs on every rank (FSDP2 / ZeRO-3 run the sharded model together); files are
        # written and lines printed by the main process only.
        if trainer.is_world_process_zero():
            baselines = {}
            if data_args.objective in CAUSAL_OBJECTIVES:
                baselines = baseline_bits_per_byte(data, tokenizer, validation_texts, report_args, timer)
                metrics.update({baseline_key(name): rate for name, rate in baselines.items()})
            run = PretrainRun(
                trainer, tokenizer, data, data_args, model_args, aux_args, fim_args, report_args, timer, threads, budget
            )
            write_and_report(run, metrics, baselines, sample)
    close_distributed(trainer)  # last: no collective after it
    return metrics


def _thread_control(runtime_args: RuntimeArguments) -> AdaptiveThreadsCallback | None:
    """Fixed torch threads when asked for, else a callback that follows the cores left free."""
    if runtime_args.torch_threads is not None:
        torch.set_num_threads(runtime_args.torch_threads)
        return None
    return AdaptiveThreadsCallback(runtime_args.thread_check_steps)


def _fit_to_budget(trainer, runtime_args: RuntimeArguments, threads, resume: ResumePlan) -> StepBudget | None:
    """``max_train_minutes``: lower ``max_steps`` to the steps that fit, timed at the thread count training starts with.

    A resumed run is not timed again: it keeps the ``max_steps`` its first start chose (the checkpoint's).
    """
    if resume.continues:
        main_process = trainer.is_world_process_zero()
        return keep_first_start_steps(trainer.args, resume, runtime_args.max_train_minutes, main_process)
    if runtime_args.max_train_minutes is None:
        return None
    if threads:
        threads.adapt()
    return fit_max_steps_to_budget(trainer, runtime_args.max_train_minutes)


def _train_statistics(train_metrics: dict, trainer, data, sample_tokens: int | None) -> dict[str, float]:
    """Training throughput (tokens per second of the training phase) and the unigram entropy of the
    first ``sample_tokens`` training tokens (None: all of them)."""
    documents = data.train_documents if data.train_documents is not None else data.train_dataset
    sample = bounded_documents(documents, sample_tokens) if sample_tokens else documents
    stats = {
        "train_runtime": train_metrics["train_runtime"],
        "train_unigram_entropy": unigram_entropy(sample),
    }
    if trainer.state.num_input_tokens_seen:
        stats["train_tokens_seen"] = trainer.state.num_input_tokens_seen
        stats["train_tokens_per_second"] = trainer.state.num_input_tokens_seen / train_metrics["train_runtime"]
    return stats


if __name__ == "__main__":
    main()

"""Pre-train a small language model with one of hf_lmobj's objectives, read as phases: setup, train,
evaluate, report.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone.

    accelerate launch recipes/pretrain.py --config recipes/configs/causal/demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/pretrain.py --config recipes/configs/causal/demo.yaml --max_steps 20
    python recipes/pretrain.py --config recipes/configs/causal/demo.yaml --max_steps 3 --output_dir out/quick

Every field of the argument groups (:data:`ARGUMENT_CLASSES`, one config section each, ``TrainingArguments``
included) can be set in the YAML file or on the command line. A preempted run continues with the same command
plus ``--resume_from_checkpoint last`` (a run that already reached its ``max_steps`` says it is complete and
exits, its model, ``metrics.json`` and card kept); the same command alone over ``checkpoint-*`` folders is
refused. Every value the run meets after training is checked before any data; the model, the tokenizer and
``trainer_state.json`` are saved the moment training ends, and a later failure keeps ``metrics.json`` and says
where the model is. The run writes the model, the tokenizer, ``metrics.json``, ``loss_curve.png`` and
``README.md`` (the model card) into ``--output_dir`` and prints the report: for an objective that scores text
(causal), bits per byte of the validation text beside a Kneser-Ney n-gram model of the same training tokens
and zlib / bz2 / xz (with ``fim_rate > 0``, the infilling results too); for the others, eval_loss beside the
unigram entropy of the training tokens and the target accuracy; then the time of each phase and the training
tokens per second.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import copy
from pathlib import Path

import datasets
from transformers import set_seed

from hf_lmobj.cards import check_provenance
from hf_lmobj.config import cpu_aware_argv, parse_args_with_config
from hf_lmobj.contamination import ContaminationIndex
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.data.run_tokenizer import run_tokenizer
from hf_lmobj.evaluation.baseline_figures import baseline_bits_per_byte, baseline_key
from hf_lmobj.evaluation.run_figures import data_figures, record_realized_tokens, train_statistics
from hf_lmobj.files import read_json
from hf_lmobj.metrics.token_statistics import target_token_accuracy
from hf_lmobj.models.pretraining import build_pretraining_model, token_predictor
from hf_lmobj.objectives import get_objective
from hf_lmobj.optim.arguments import optimizer_cls_and_kwargs
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from hf_lmobj.trainer.checkpoints import load_checkpoint_weights
from hf_lmobj.trainer.cpu_threads import thread_control
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from hf_lmobj.trainer.resume import ResumePlan, begin_new_run, complete_run_line, plan_resume, step_budget
from hf_lmobj.trainer.teardown import close_distributed
from hf_lmobj.trainer.time_estimate import TimeEstimateCallback

from .report.infilling import check_comparable_baseline, infilling_cases, validation_infilling
from .report.pretrain_report import contamination_figures, sample_continuation, score_validation_texts, write_and_report
from .runtime.after_training import nothing_lost, save_trained_model
from .runtime.phase_timer import PhaseTimer
from .runtime.pretrain_checks import check_built_model, check_pretrain_arguments
from .runtime.pretrain_run import ARGUMENT_CLASSES, PretrainArguments, Run


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_arguments(argv)
    resume = plan_resume(args.training, args.resume, needs_data_state=True)  # fails in seconds
    if resume.complete(args.training.max_steps, args.runtime.max_train_minutes):
        return complete_run(args, resume)
    run = setup(args, resume)
    train(run)
    metrics: dict[str, float] = {}
    main_process = run.trainer.is_world_process_zero()
    with nothing_lost(run.args.training.output_dir, metrics, main_process, run.timer, "the model and tokenizer"):
        evaluate(run, metrics)  # collective: every rank (FSDP2 / ZeRO-3 run the sharded model together)
        if run.trainer.is_world_process_zero():  # files and lines: the main process only
            report(run, metrics)
    close_distributed(run.trainer)  # last: no collective after it
    return metrics


def parse_arguments(argv: list[str] | None) -> PretrainArguments:
    """The config file and the command line as argument groups, each value checked before any work."""
    args = PretrainArguments(*parse_args_with_config(ARGUMENT_CLASSES, cpu_aware_argv(argv), description=__doc__))
    check_pretrain_arguments(args.data, args.model, args.auxiliary, args.fim, args.report, args.runtime, args.training)
    return args


def complete_run(args: PretrainArguments, resume: ResumePlan) -> dict[str, float]:
    """A continuation whose checkpoint already reached its ``max_steps``: say so, train and rescore nothing.

    The finished run's files stay as they are; its ``metrics.json`` is returned ({} when it has none).
    """
    output_dir, minutes = args.training.output_dir, args.runtime.max_train_minutes
    if args.training.process_index == 0:
        print(complete_run_line(output_dir, resume, args.training.max_steps, minutes))
    close_distributed()  # TrainingArguments may have joined a process group
    path = Path(output_dir) / "metrics.json"
    if not path.is_file():
        if args.training.process_index == 0:
            print(f"  {path} is missing (the run stopped after training); its model is in {output_dir}")
        return {}
    return read_json(path, "the finished run's metrics", fix="delete it, or pass another --output_dir")


def setup(args: PretrainArguments, resume: ResumePlan) -> Run:
    """Threads, then the sources and the validation text, the tokenizer, the model, the data and the trainer
    (``resume``: plan_resume's); the main process works first, the others read what it cached."""
    data_args, train_args = args.data, args.training
    run = Run(args, PhaseTimer(), resume, thread_control(args.runtime))
    set_seed(train_args.seed)
    if train_args.process_index != 0:
        datasets.disable_progress_bars()  # one process draws progress bars
    with run.timer.phase("corpus"), train_args.main_process_first(desc="read the data"):
        sources = open_sources(data_args)
    check_comparable_baseline(args.fim.fim_baseline_metrics, sources.validation["fingerprint"],
                              validation_documents=sources.validation["documents"],
                              validation_bytes=sources.validation["bytes"])  # fmt: skip
    with run.timer.phase("tokenizer"), train_args.main_process_first(desc="tokenizer"):
        run.tokenizer, tokenizer_record = run_tokenizer(sources, data_args)
    with run.timer.phase("data"):
        model = build_pretraining_model(data_args.objective, run.tokenizer, args.model, args.auxiliary, train_args.seed)
        check_built_model(model, run.tokenizer, data_args, args.report, args.model)  # a checkpoint's positions too
        if resume.weights_from is not None:  # --weights_only_restart: a new run from a checkpoint's weights
            load_checkpoint_weights(model, resume.weights_from)
        with train_args.main_process_first(desc="prepare data"):
            _prepare_data(run, model, sources, tokenizer_record)
    trainer_class = AuxiliaryObjectiveTrainer if args.auxiliary.auxiliary_objective else ObjectiveTrainer
    run.trainer = trainer_class(
        model=model, args=train_args, callbacks=[*run.data.callbacks, *([run.threads] if run.threads else []),
                                                 TimeEstimateCallback()],
        data_collator=run.data.collator, train_dataset=run.data.train_dataset, eval_dataset=run.data.eval_dataset,
        optimizer_cls_and_kwargs=optimizer_cls_and_kwargs(args.optimizer, train_args),
        ignore_data_fingerprint=data_args.ignore_data_fingerprint,
    )  # fmt: skip
    return run


def _prepare_data(run: Run, model, sources, tokenizer_record: dict) -> None:
    """The objective's stream, eval set and collator, the validation text and the infilling cases (they fail fast)."""
    a = run.args
    batch = a.training.per_device_train_batch_size
    spec = get_objective(a.data.objective)  # the objective travels as its spec from here
    exclude = None
    if a.data.drop_contaminated:  # the validation text's 13-token n-grams: a training document holding one is left out
        exclude = ContaminationIndex.build(sources.validation_texts, sources.validation_domains, run.tokenizer)
    run.data = prepare_run_data(sources, spec, run.tokenizer, a.data, batch, model, a.training.seed, a.fim, exclude)
    run.validation_texts = run.data.validation_texts
    run.validation = datasets.Dataset.from_dict({a.data.text_column: run.validation_texts})
    run.cases = infilling_cases(run.validation, a.data.text_column, a.fim)
    run.provenance = {**run.data.provenance, "tokenizer": tokenizer_record}
    check_provenance(run.provenance)  # what the card will say, checked before training


def train(run: Run) -> None:
    """Fit the step budget (or keep the first start's), train, then save the model before anything else."""
    trainer, train_args = run.trainer, run.args.training
    with run.timer.phase("training"):
        run.budget = step_budget(trainer, run.args.runtime, run.threads, run.resume)
        if not run.resume.continues and trainer.args.should_save:
            begin_new_run(train_args.output_dir, run.resume, trainer.args.max_steps, run.budget)
        run.train_metrics = trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint).metrics
    with run.timer.phase("saving"):  # first: nothing after training may cost the model (collective on every rank)
        save_trained_model(trainer, run.tokenizer, train_args.output_dir)


def evaluate(run: Run, metrics: dict[str, float]) -> None:
    """eval_loss, the target accuracy or the text scores, infilling and a sample: collective, on every rank."""
    trainer, data, a = run.trainer, run.data, run.args
    spec = get_objective(a.data.objective)
    with run.timer.phase("evaluation"):
        metrics.update(trainer.evaluate())
        if spec.accuracy_metric:  # a fresh collator: epoch 0 noise, comparable across runs
            fresh = copy.copy(data.collator)
            fresh.set_epoch(0)
            metrics[spec.accuracy_metric] = target_token_accuracy(
                token_predictor(trainer.model), data.eval_dataset, fresh
            )
    data.train_documents = data.sample_documents()  # the report's training sample, read now
    metrics.update(train_statistics(run.train_metrics, data.train_documents, trainer.state.num_input_tokens_seen))
    counts = trainer.pipeline_token_counts()  # collective: every rank
    record_realized_tokens(run.provenance, counts)  # takes the streams' counts of documents passed over
    metrics.update(counts)
    metrics.update(data_figures(run.provenance))
    if not spec.scores_text:
        return
    predictor = token_predictor(trainer.model)  # MTP: the causal LM itself
    with run.timer.phase("scoring"):
        if run.threads:
            run.threads.adapt()
        progress = not a.training.disable_tqdm and trainer.is_world_process_zero()
        texts = run.validation_texts
        metrics.update(score_validation_texts(predictor, run.tokenizer, texts, a.data, a.report, progress,
                                              data.validation_domains))  # fmt: skip
    if a.fim.infill_cases:  # 200 by default when fim_rate > 0, none for a plain run
        with run.timer.phase("infilling"):
            metrics.update(validation_infilling(predictor, run.tokenizer, run.validation, a.data.text_column, a.fim,
                                                a.data.max_length, run.cases))  # fmt: skip
    with run.timer.phase("sampling"):
        run.sample = sample_continuation(predictor, run.tokenizer, a.report)


def report(run: Run, metrics: dict[str, float]) -> None:
    """The baselines, ``metrics.json``, the card and the printed report (main process only)."""
    a, baselines = run.args, {}
    if get_objective(a.data.objective).scores_text:
        baselines = baseline_bits_per_byte(run.data, run.tokenizer, run.validation_texts, a.report, run.timer)
        metrics.update({baseline_key(name): rate for name, rate in baselines.items()})
        metrics.update(contamination_figures(run, a.report, run.timer))
    write_and_report(run, metrics, baselines)


if __name__ == "__main__":
    main()

"""Auxiliary objectives at equal wall time: MTP vs next-token, ELECTRA vs BERT-MLM.

Two claims, each measured against the plain objective with the same data, model size and wall time:

* **MTP** (``recipes/configs/causal/mtp_demo.yaml`` vs ``causal/demo.yaml``): next-token bits per byte of
  the held-out stdlib split (every token scored once, the recipe's strided windows) after training
  the same Llama for the same wall time, with and without one sequential MTP depth (lambda 0.3).
* **ELECTRA** (``masked/electra_tiny.yaml`` vs ``masked/bert_tiny.yaml``): pre-train each for the same
  wall time, then fine-tune the same classifier (``recipes/finetune_classifier.py`` with
  ``masked/finetune_classifier.yaml``: original vs 15%-corrupted stdlib functions, and which package a
  function comes from) on several seeds; held-out accuracy, mean and spread.

Equal wall time: the plain arm trains the config's ``max_steps``; each arm's seconds per step are
measured in short interleaved calibration runs on this machine (same load for both), and the
auxiliary arm gets ``max_steps * plain / auxiliary`` steps (its own cosine schedule ends there).
The real training times (wall and this process's CPU seconds) are printed next to the results. On a machine
other jobs share, wall seconds per step swing with their load; ``--calibration_clock process`` calibrates on
CPU seconds instead (one torch thread), which the other jobs disturb much less.

    python benchmarks/auxiliary_objectives.py                     # both comparisons (hours on 2 busy cores)
    python benchmarks/auxiliary_objectives.py --only mtp --steps_scale 0.25   # a quicker look
    python benchmarks/auxiliary_objectives.py --steps_scale 0.06 --calibration_steps 3 --calibration_rounds 2 \
        --calibration_clock process                               # the reduced budget of auxiliary_objectives.md
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments

from hf_lmobj.config import parse_args_with_config
from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.sums import bits_per_byte_from_sums
from hf_lmobj.models.pretraining import AuxiliaryArguments, build_pretraining_model, token_predictor
from hf_lmobj.models.stock import ModelArguments
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from hf_lmobj.trainer.cpu_threads import RuntimeArguments

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs"


def _recipe_module(name: str):
    """``recipes/<name>.py`` as ``hf_lmobj.recipes.<name>`` (its relative imports resolve in the package)."""
    return importlib.import_module(f"hf_lmobj.recipes.{name}")


def parse_config(config: str, overrides: list[str]):
    """(data, model, aux, report, runtime, train) arguments of a pre-training config, as the wired recipe reads it."""
    report = _recipe_module("report.report_arguments").ReportArguments
    types = (DataArguments, ModelArguments, AuxiliaryArguments, report, RuntimeArguments, TrainingArguments)
    return parse_args_with_config(types, ["--config", str(CONFIGS / config), "--use_cpu", "true", *overrides])


class Arm:
    """One pre-training config: its data (prepared once) and, per call, a fresh model and trainer."""

    def __init__(self, config: str, overrides: list[str], splits, cache: dict) -> None:
        self.config = config
        self.data_args, self.model_args, self.aux_args, self.report_args, _, self.train_args = parse_config(
            config, overrides
        )
        vocab = self.data_args.vocab_size
        if vocab not in cache:
            cache[vocab] = build_tokenizer(vocab)
        self.tokenizer = cache[vocab]
        key = (dataclasses.astuple(self.data_args), self.model_args.attn_implementation, self.train_args.seed)
        if key not in cache:  # two arms of one comparison train on the same prepared data
            cache[key] = prepare_run_data(open_sources(self.data_args, splits), self.data_args.objective, self.tokenizer,
                                          self.data_args, self.train_args.per_device_train_batch_size,
                                          self._model(), self.train_args.seed)  # fmt: skip
        self.data = cache[key]

    def _model(self):
        torch.manual_seed(self.train_args.seed)  # the stock model draws its init from the global RNG, as in the recipe
        return build_pretraining_model(self.data_args.objective, self.tokenizer, self.model_args, self.aux_args,
                                       self.train_args.seed)  # fmt: skip

    def trainer(self, max_steps: int, output_dir: str) -> AuxiliaryObjectiveTrainer:
        """A fresh model and trainer for ``max_steps`` (warm-up scaled down for short runs), no evaluation."""
        args = dataclasses.replace(
            self.train_args, output_dir=output_dir, max_steps=max_steps, report_to=[], eval_strategy="no",
            disable_tqdm=True, logging_steps=max(max_steps // 10, 1), warmup_steps=min(self.train_args.warmup_steps, max_steps // 5),
        )  # fmt: skip
        return AuxiliaryObjectiveTrainer(model=self._model(), args=args, data_collator=self.data.collator,
                                         train_dataset=self.data.train_dataset, callbacks=self.data.callbacks)  # fmt: skip


def check_same_setup(plain: Arm, auxiliary: Arm) -> None:
    """The two arms must differ only in the auxiliary objective (and the model family it needs)."""
    differing = [
        name
        for attr, skip in (("data_args", ()), ("model_args", ("model_type",)),
                           ("train_args", ("output_dir", "logging_dir", "max_steps", "distributed_state")))
        for name, value in vars(getattr(plain, attr)).items()
        if name not in skip and vars(getattr(auxiliary, attr)).get(name) != value
    ]  # fmt: skip
    if differing:
        raise ValueError(f"{plain.config} and {auxiliary.config} differ in {differing}: align the configs")


CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def seconds_per_step(arms: list[Arm], steps: int, rounds: int, clock: str = "wall") -> list[float]:
    """Median seconds per optimizer step of each arm, measured in interleaved short runs (after 2 warm-up steps).

    ``clock="process"`` counts this process's CPU seconds instead of wall seconds: on a machine other
    jobs share, wall time per step swings with their load, CPU time (one torch thread) much less.
    """
    times: list[list[float]] = [[] for _ in arms]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for i, arm in enumerate(arms):
                trainer = arm.trainer(steps + 2, tmp)
                marks: list[float] = []
                trainer.add_callback(_StepClock(marks, CLOCKS[clock]))
                trainer.train()
                times[i].append((marks[-1] - marks[1]) / (len(marks) - 2))
    return [statistics.median(t) for t in times]


class _StepClock(TrainerCallback):
    """Records the wall clock at every step end."""

    def __init__(self, marks: list[float], clock=time.perf_counter) -> None:
        self.marks, self.clock = marks, clock

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(self.clock())


def equal_time_steps(plain_steps: int, plain_sps: float, aux_sps: float) -> int:
    """Steps of the auxiliary arm that take the plain arm's training time.

    >>> equal_time_steps(650, 0.5, 0.65)
    500
    """
    return max(1, round(plain_steps * plain_sps / aux_sps))


def equal_time_arms(configs: tuple[str, str], names: tuple[str, str], splits, cache, scale: float,
                    calibration: tuple) -> tuple[tuple[Arm, Arm], tuple[int, int], tuple[float, float]]:  # fmt: skip
    """The plain and the auxiliary arm of ``configs`` (checked to share their setup), their steps (the plain arm's
    ``max_steps`` x ``scale``, and the auxiliary arm's steps of the same training time) and their seconds per
    step (printed with ``names``)."""
    plain, auxiliary = (Arm(config, [], splits, cache) for config in configs)
    check_same_setup(plain, auxiliary)
    plain_sps, aux_sps = seconds_per_step([plain, auxiliary], *calibration)
    print(
        f"seconds per step ({calibration[2]} clock): {names[0]} {plain_sps:.2f}, {names[1]} {aux_sps:.2f}", flush=True
    )
    plain_steps = max(1, round(plain.train_args.max_steps * scale))
    steps = (plain_steps, equal_time_steps(plain_steps, plain_sps, aux_sps))
    return (plain, auxiliary), steps, (plain_sps, aux_sps)


def timed_training(arm: Arm, steps: int, folder: str):
    """The trainer of ``arm`` after ``steps`` training steps in ``folder``, its train runtime and the CPU seconds."""
    trainer = arm.trainer(steps, folder)
    cpu = time.process_time()
    runtime = trainer.train().metrics["train_runtime"]
    return trainer, runtime, time.process_time() - cpu


# ---- MTP ---------------------------------------------------------------------------------------
def compare_mtp(splits, cache, scale: float, out: Path, calibration: tuple = (6, 3, "wall")) -> dict:
    (plain, mtp), (plain_steps, mtp_steps), (plain_sps, mtp_sps) = equal_time_arms(
        ("causal/demo.yaml", "causal/mtp_demo.yaml"), ("next-token", "MTP"), splits, cache, scale, calibration
    )
    steps = {"next-token": plain_steps, "next-token + MTP (D=1, lambda 0.3)": mtp_steps}
    rows = []
    texts = list(splits["validation"]["text"])
    for (name, n), arm in zip(steps.items(), (plain, mtp)):
        trainer, runtime, cpu = timed_training(arm, n, str(out / name.split()[0]))
        model = token_predictor(trainer.model).eval()
        report = plain.report_args  # both arms scored with the same windows
        window = report.score_max_length or plain.data_args.max_length
        scores = score_texts(model, arm.tokenizer, texts, max_length=window, stride=report.score_stride or window // 2,
                             batch_size=report.score_batch_size, progress=False)  # fmt: skip
        bpb = bits_per_byte_from_sums([s.nll for s in scores], [s.num_bytes for s in scores])
        rows.append({"arm": name, "steps": n, "train_seconds": runtime, "train_cpu_seconds": cpu, "validation_bits_per_byte": bpb,
                     "train_loss_last": _last_loss(trainer)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return {"seconds_per_step": {"next-token": plain_sps, "mtp": mtp_sps}, "rows": rows}


# ---- ELECTRA -----------------------------------------------------------------------------------
def compare_electra(
    splits,
    cache,
    scale: float,
    seeds: list[int],
    tasks: list[str],
    scratch: bool,
    out: Path,
    calibration: tuple = (6, 3, "wall"),
) -> dict:
    (bert, electra), (bert_steps, electra_steps), (bert_sps, electra_sps) = equal_time_arms(
        ("masked/bert_tiny.yaml", "masked/electra_tiny.yaml"), ("BERT", "ELECTRA"), splits, cache, scale, calibration
    )
    arms = {"BERT MLM": (bert, bert_steps), "ELECTRA (generator 1/4, MLM + 50 RTD)": (electra, electra_steps)}
    finetune = _recipe_module("finetune_classifier")
    rows = []
    for name, (arm, n) in arms.items():
        folder = out / name.split()[0].lower()
        trainer, runtime, cpu = timed_training(arm, n, str(folder))
        trainer.save_model(str(folder))
        arm.tokenizer.save_pretrained(folder)
        for task in tasks:
            accuracies, scratch_accuracies = [], []
            for seed in seeds:
                metrics = finetune.main([
                    "--config", str(CONFIGS / "masked/finetune_classifier.yaml"), "--model_name_or_path", str(folder),
                    "--task", task, "--seed", str(seed), "--output_dir", str(folder / f"cls-{task}-{seed}"),
                    "--disable_tqdm", "true", "--compare_with_scratch", str(scratch).lower(),
                ])  # fmt: skip
                accuracies.append(metrics["eval_accuracy"])
                scratch_accuracies.append(metrics.get("scratch_eval_accuracy"))
            rows.append({"arm": name, "steps": n, "train_seconds": runtime, "train_cpu_seconds": cpu, "task": task, "seeds": seeds,
                         "accuracy": accuracies, "scratch_accuracy": scratch_accuracies,
                         "train_loss_last": _last_loss(trainer)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return {"seconds_per_step": {"bert": bert_sps, "electra": electra_sps}, "rows": rows}


def _last_loss(trainer) -> float | None:
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses[-1] if losses else None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["mtp", "electra"], default=None)
    parser.add_argument(
        "--steps_scale", type=float, default=1.0, help="Fraction of the configs' max_steps (plain arms)."
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Fine-tuning seeds (ELECTRA).")
    parser.add_argument(
        "--tasks", nargs="+", default=["replaced_tokens", "package"], help="Classifier tasks (ELECTRA)."
    )
    parser.add_argument("--with_scratch", action="store_true", help="Also fine-tune from scratch per seed (ELECTRA).")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a shared machine).")
    parser.add_argument(
        "--calibration_steps", type=int, default=6, help="Timed steps per calibration run (after 2 warm-up steps)."
    )
    parser.add_argument(
        "--calibration_rounds", type=int, default=3, help="Interleaved calibration runs per arm (median taken)."
    )
    parser.add_argument(
        "--calibration_clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: seconds per step on the clock; process: this process's CPU seconds (steadier on a shared machine).",
    )
    parser.add_argument("--output", default="out/auxiliary_objectives")
    args = parser.parse_args(argv)
    if args.calibration_steps < 1 or args.calibration_rounds < 1:
        raise ValueError("calibration_steps and calibration_rounds must be >= 1")
    calibration = (args.calibration_steps, args.calibration_rounds, args.calibration_clock)
    torch.set_num_threads(args.threads)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    splits = load_stdlib_corpus()
    cache: dict = {}
    results = {}
    if args.only in (None, "mtp"):
        results["mtp"] = compare_mtp(splits, cache, args.steps_scale, out, calibration)
    if args.only in (None, "electra"):
        results["electra"] = compare_electra(
            splits, cache, args.steps_scale, args.seeds, args.tasks, args.with_scratch, out, calibration
        )
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    _print_tables(results)
    return results


def _print_tables(results: dict) -> None:
    if "mtp" in results:
        print(
            "\n| arm | steps | train s (wall) | train CPU s | next-token bits per byte (held-out stdlib) |\n| --- | --- | --- | --- | --- |"
        )
        for r in results["mtp"]["rows"]:
            print(
                f"| {r['arm']} | {r['steps']} | {r['train_seconds']:.0f} | {_cpu(r)} | {r['validation_bits_per_byte']:.4f} |"
            )
    if "electra" in results:
        print(
            "\n| arm | steps | train s (wall) | train CPU s | task | accuracy (mean ± sd over seeds) | from scratch |\n"
            "| --- | --- | --- | --- | --- | --- | --- |"
        )
        for r in results["electra"]["rows"]:
            acc, scr = r["accuracy"], [x for x in r["scratch_accuracy"] if x is not None]
            sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
            scratch = f"{statistics.mean(scr):.3f}" if scr else "-"
            print(
                f"| {r['arm']} | {r['steps']} | {r['train_seconds']:.0f} | {_cpu(r)} | {r['task']} | "
                f"{statistics.mean(acc):.3f} ± {sd:.3f} | {scratch} |"
            )


def _cpu(row: dict) -> str:
    return f"{row['train_cpu_seconds']:.0f}" if row.get("train_cpu_seconds") is not None else "-"


if __name__ == "__main__":
    main()

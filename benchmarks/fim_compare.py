"""Fill-in-the-middle for free? A FIM model beside plain CLM models trained with the same budget.

Every run trains the clm demo's model as it was until session 3 retuned the demo for its time
budget (a 1.4M-parameter Llama, width 128, 4096-token BPE, rows of 256, 32 rows per step, AdamW
lr 5e-3, cosine) for the same number of steps (650: the demo's count then) on the stdlib's training
files, then reports on the held-out files:

* left-to-right bits per byte (strided windows of 256 advancing by 128, as the demo's report);
* single-line infilling exact match (200 seeded cases, :mod:`hf_lmobj.metrics.infilling`): PSM and
  SPM prompts for the FIM model, prefix-only (all a plain model can do) for every model.

Runs: ``clm`` = the demo's own data (whole files packed by ``pack_dataset``); ``clm_pieces`` = the
FIM pipeline with ``fim_rate=0`` (the same pieces of ``max_length - 10`` tokens, no transform: it
isolates the data layout from FIM itself); ``fim`` = the FIM pipeline at ``--fim_rate``.

    python benchmarks/fim_compare.py                                  # all three, 650 steps each
    python benchmarks/fim_compare.py --runs clm fim --max_steps 100   # a quick look

Each run writes ``<output_dir>/<run>/metrics.json``; the table is printed at the end and rebuilt
from those files by ``--report_only``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import TrainingArguments, set_seed

from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.metrics.scoring import bits_per_byte_from_sums, score_texts
from hf_lmobj.recipes.support.fim_pretraining import FimArguments, infilling_metrics, prepare_fim_data
from hf_lmobj.recipes.support.models import ModelArguments, build_model
from hf_lmobj.recipes.support.pretraining import DataArguments, prepare_objective_data
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

RUNS = ("clm", "clm_pieces", "fim")
MODES = ("psm", "spm", "prefix_only")


def train_and_report(run: str, args: argparse.Namespace, tokenizer, splits) -> dict:
    set_seed(0)
    data_args = DataArguments(objective="clm", vocab_size=4096, max_length=256, max_eval_rows=128)
    fim_rate = args.fim_rate if run == "fim" else 0.0
    fim_args = FimArguments(fim_rate=fim_rate, fim_spm_rate=0.5, infill_cases=args.infill_cases)
    model = build_model("clm", tokenizer, ModelArguments(
        model_type="llama", hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
        max_position_embeddings=256,
    ))  # fmt: skip
    started = time.time()
    if run == "clm":
        data = prepare_objective_data("clm", tokenizer, splits, data_args, model, seed=0)
    else:
        data = prepare_fim_data(tokenizer, splits, data_args, fim_args, model, seed=0)
    prepared = time.time() - started
    out = Path(args.output_dir) / run
    train_args = TrainingArguments(
        output_dir=str(out), max_steps=args.max_steps, per_device_train_batch_size=32, learning_rate=5e-3,
        lr_scheduler_type="cosine", warmup_steps=30, weight_decay=0.1, adam_beta2=0.95, max_grad_norm=1.0,
        logging_steps=50, eval_strategy="no", save_strategy="no", report_to="none", remove_unused_columns=False,
        seed=0, use_cpu=True, include_num_input_tokens_seen=True,
    )  # fmt: skip
    trainer = ObjectiveTrainer(
        model=model, args=train_args, data_collator=data.collator, train_dataset=data.train_dataset
    )
    train_metrics = trainer.train().metrics
    texts = list(splits["validation"]["text"])
    scores = score_texts(trainer.model, tokenizer, texts, max_length=256, stride=128, batch_size=16, progress=False)
    metrics = {
        "run": run,
        "fim_rate": fim_rate,
        "max_steps": args.max_steps,
        "prepare_seconds": prepared,
        "train_runtime": train_metrics["train_runtime"],
        "train_loss": train_metrics["train_loss"],
        "train_tokens_seen": trainer.state.num_input_tokens_seen,
        "train_rows": data.train_dataset.num_rows,
        "packing_efficiency": data.hyperparameters["packing_efficiency"],
        "validation_bits_per_byte": bits_per_byte_from_sums([s.nll for s in scores], [s.num_bytes for s in scores]),
    }
    infill_args = FimArguments(fim_rate=fim_rate or 0.0, infill_cases=args.infill_cases)
    metrics.update(infilling_metrics(trainer.model, tokenizer, texts, infill_args, 256, splits["validation"]["path"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2), flush=True)
    return metrics


def table(results: dict[str, dict]) -> str:
    """The markdown table of every run's figures."""
    head = ["run", "fim_rate", "steps", "tokens seen", "packing", "LTR bits/byte",
            "EM psm", "EM spm", "EM prefix-only", "middle bits/byte (psm / prefix-only)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, m in results.items():
        em = [m.get(f"validation_infill_{mode}_exact_match") for mode in MODES]
        bpb = [m.get(f"validation_infill_{mode}_middle_bits_per_byte") for mode in ("psm", "prefix_only")]
        cells = [run, f"{m['fim_rate']}", f"{m['max_steps']}", f"{m['train_tokens_seen']:,}",
                 f"{m['packing_efficiency']:.3f}", f"{m['validation_bits_per_byte']:.4f}",
                 *("-" if v is None else f"{v:.3f}" for v in em),
                 " / ".join("-" if v is None else f"{v:.3f}" for v in bpb)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    parser.add_argument("--max_steps", type=int, default=650)
    parser.add_argument("--fim_rate", type=float, default=0.5)
    parser.add_argument("--infill_cases", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output_dir", default="out/fim-compare")
    parser.add_argument("--report_only", action="store_true", help="print the table from the runs' metrics.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    if not args.report_only:
        tokenizer = build_tokenizer(4096)
        splits = load_stdlib_corpus()
        for run in args.runs:
            results[run] = train_and_report(run, args, tokenizer, splits)
    else:
        for run in args.runs:
            path = Path(args.output_dir) / run / "metrics.json"
            if path.is_file():
                results[run] = json.loads(path.read_text())
    print(table(results))
    if "fim" in results and "clm" in results:
        fim, clm = results["fim"], results["clm"]
        ratio = fim["validation_bits_per_byte"] / clm["validation_bits_per_byte"]
        print(f"\nFIM / plain left-to-right bits per byte: {ratio:.4f}")


if __name__ == "__main__":
    main()

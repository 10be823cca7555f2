"""Perplexity and bits per byte of any causal LM on any text dataset, through the metric modules.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, chosen by the
accelerate config alone; each process scores its share of the texts and the main process gathers
the per-text sums and computes the metrics.

    accelerate launch recipes/score.py --config recipes/configs/eval/default.yaml \\
        --model_name_or_path out/causal-demo
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/score.py --config recipes/configs/eval/default.yaml --model_name_or_path out/causal-demo
    python recipes/score.py --model_name_or_path gpt2 --dataset_name wikitext \\
        --dataset_config wikitext-2-raw-v1 --split test --max_length 1024 --stride 512

Every field of ``EvalArguments`` can be set in the YAML file or overridden on the command line.
The run prints the metrics and writes ``metrics.json`` and ``README.md`` (a model card carrying
the results in its ``model-index``) into ``--output_dir``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.checks import check_flag, check_length, check_name, check_number
from hf_lmobj.config import parse_args_with_config
from hf_lmobj.corpus import load_stdlib_corpus
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.metrics import load as load_metric
from hf_lmobj.metrics.scoring import score_texts

from .runtime.after_training import write_metrics


@dataclass
class EvalArguments:
    """Which model, which text, how it is scored and where the results go."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Causal LM: Hub id or local folder (required)."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer; None = the model's own."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub/local dataset; None = embedded stdlib corpus."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    text_column: str = field(default="text", metadata={"help": "Column holding the raw text."})
    split: str = field(default="validation", metadata={"help": "Split to score (train | validation | test ...)."})
    validation_fraction: float = field(
        default=0.02, metadata={"help": "Held-out share when there is no validation split."}
    )
    max_documents: int | None = field(
        default=None, metadata={"help": "Load only the first N training documents (quick runs)."}
    )
    max_texts: int | None = field(default=None, metadata={"help": "Score only the first N texts of the split."})
    max_length: int | None = field(
        default=None, metadata={"help": "Tokens per window; None = the model's context size."}
    )
    stride: int | None = field(default=None, metadata={"help": "Scored positions per later window; None = max_length."})
    add_start_token: bool = field(default=True, metadata={"help": "Prepend BOS so each text's first token is scored."})
    batch_size: int = field(default=8, metadata={"help": "Windows per forward pass."})
    output_dir: str = field(default="out/eval", metadata={"help": "Where metrics.json and README.md go."})
    use_cpu: bool = field(default=False, metadata={"help": "Score on the CPU even when a GPU is visible."})

    def __post_init__(self) -> None:
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is required: pass --model_name_or_path <folder or Hub id>")
        self.model_name_or_path = check_name(self.model_name_or_path, "model_name_or_path")
        for name in ("tokenizer_name", "dataset_name", "dataset_config"):
            setattr(self, name, check_name(getattr(self, name), name, optional=True))
        for name in ("text_column", "split", "output_dir"):
            setattr(self, name, check_name(getattr(self, name), name))
        for name in ("max_texts", "max_length", "stride", "max_documents"):
            setattr(self, name, check_length(getattr(self, name), name, 1, "or null", optional=True))
        if self.stride is not None and self.max_length is not None and self.stride > self.max_length:
            raise ValueError(
                f"stride {self.stride} must be <= max_length {self.max_length} (positions scored per window)"
            )
        self.batch_size = check_length(self.batch_size, "batch_size", 1, "windows per forward pass")
        self.validation_fraction = check_number(self.validation_fraction, "validation_fraction", 0.0, 1.0,
                                                low_open=True, high_open=True, hint="the held-out share")  # fmt: skip
        for name in ("add_start_token", "use_cpu"):
            setattr(self, name, check_flag(getattr(self, name), name))


def load_texts(args: EvalArguments) -> list[str]:
    """The split's non-empty texts (empty ones have nothing to predict), first ``max_texts`` of them.

    ``validation`` is the text ``recipes/pretrain.py`` validates on with the same data arguments (the dataset's
    validation split, else its documents held out by content hash); another split is read as the dataset has it.
    """
    if args.split == "validation":
        data_args = DataArguments(dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                                  text_column=args.text_column, validation_fraction=args.validation_fraction,
                                  max_documents=args.max_documents, max_validation_documents=args.max_texts or 2**62)  # fmt: skip
        return open_sources(data_args).validation_texts
    if args.dataset_name is None:
        splits = load_stdlib_corpus(args.validation_fraction, args.max_documents)
    else:
        splits = datasets.load_dataset(args.dataset_name, args.dataset_config)
    if args.split not in splits:
        raise ValueError(f"split {args.split!r} not found; the dataset has {sorted(splits)}")
    texts = [text for text in splits[args.split][args.text_column] if text and text.strip()]
    texts = texts[: args.max_texts] if args.max_texts is not None else texts
    if not texts:
        raise ValueError(f"split {args.split!r} has no non-empty text in column {args.text_column!r}")
    return texts


def score_shard(args: EvalArguments, texts: list[str], state: PartialState) -> list[tuple[int, float, int, int]]:
    """``(index, nll, tokens, bytes)`` of this process's texts (every ``num_processes``-th one)."""
    indices = list(range(state.process_index, len(texts), state.num_processes))
    if not indices:
        return []
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path).to(state.device)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    scores = score_texts(
        model,
        tokenizer,
        [texts[i] for i in indices],
        max_length=args.max_length,
        stride=args.stride,
        add_start_token=args.add_start_token,
        batch_size=args.batch_size,
        progress=state.is_main_process,
    )
    return [(i, s.nll, s.num_tokens, s.num_bytes) for i, s in zip(indices, scores)]


def compute_metrics(rows: list[tuple[int, float, int, int]], split: str) -> dict[str, float]:
    """Perplexity and bits per byte from the gathered per-text sums, via the ``evaluate`` modules."""
    rows = sorted(rows)
    nll, tokens, num_bytes = [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]
    perplexity = load_metric("perplexity").compute(nll=nll, num_tokens=tokens)
    bits = load_metric("bits_per_byte").compute(nll=nll, num_bytes=num_bytes)
    return {
        f"{split}_perplexity": perplexity["perplexity"],
        f"{split}_bits_per_byte": bits["bits_per_byte"],
        "nll_nats": perplexity["nll"],
        f"{split}_tokens": perplexity["num_tokens"],
        f"{split}_bytes": bits["num_bytes"],
        "texts_scored": len(rows),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    (args,) = parse_args_with_config((EvalArguments,), argv, description=__doc__)
    state = PartialState(cpu=args.use_cpu or not torch.cuda.is_available())
    texts = load_texts(args)
    rows = gather_object(score_shard(args, texts, state))  # every rank's list, concatenated
    metrics = compute_metrics(rows, args.split)
    if state.is_main_process:
        _report(args, metrics, state.num_processes)
    state.wait_for_everyone()
    return metrics


def _report(args: EvalArguments, metrics: dict[str, float], num_processes: int) -> None:
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    write_metrics(output, metrics)
    model_path = args.model_name_or_path
    settings = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "use_cpu") and v is not None}
    write_model_card(
        output,
        objective="causal",
        metrics=metrics,
        hyperparameters={**settings, "num_processes": num_processes},
        model_name=Path(model_path).name if os.path.isdir(model_path) else model_path,
        dataset_name=args.dataset_name or "python-stdlib",
        base_model=model_path,
        extra={"evaluated model": model_path, "split": args.split},
    )
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()

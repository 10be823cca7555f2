"""Print samples from a trained causal LM with temperature / top-k / top-p / min-p sampling.

Loads the model and tokenizer that ``recipes/pretrain.py`` saved in its ``--output_dir`` (any
``save_pretrained`` folder or Hub id of a causal LM works) and samples through ``model.generate``
with :class:`hf_lmobj.SamplingLogitsProcessor` and nothing else (no hidden ``top_k=50``):

    python recipes/generate.py --model_dir out/causal-demo --prompts "def " "import os" \
        --max_new_tokens 64 --temperature 0.8 --top_p 0.9 --num_samples 2 --seed 0

``--temperature 0`` is greedy decoding. Sampling is seeded without touching the global RNG state
of the caller (``torch.random.fork_rng``), so the same command prints the same samples.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser

from hf_lmobj.generation.sampling import SamplingLogitsProcessor, encode_prompts


@dataclass
class GenerateArguments:
    """What to load, what to prompt with, and the sampler settings."""

    model_dir: str = field(metadata={"help": "folder written by save_pretrained (the pretrain output_dir)"})
    prompts: list[str] = field(default_factory=lambda: ["def ", "import "], metadata={"help": "one or more prompts"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per sample"})
    num_samples: int = field(default=1, metadata={"help": "samples per prompt"})
    temperature: float = field(default=1.0, metadata={"help": ">= 0; 0 = greedy"})
    top_k: int = field(default=0, metadata={"help": "keep the k best tokens; 0 = off"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus mass in (0, 1]; 1 = off"})
    min_p: float = field(default=0.0, metadata={"help": "drop tokens below min_p x top probability; 0 = off"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    add_bos: bool = field(
        default=True,
        metadata={"help": "prepend the tokenizer's BOS token (the pretrain recipe trains with it)"},
    )
    device: str = field(default="cpu", metadata={"help": "torch device for the model, e.g. cpu, cuda"})

    def __post_init__(self) -> None:
        if not self.prompts or any(not isinstance(p, str) or not p for p in self.prompts):
            raise ValueError("prompts must be one or more non-empty strings: --prompts 'def ' 'import '")
        for name in ("max_new_tokens", "num_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        SamplingLogitsProcessor(self.temperature, self.top_k, self.top_p, self.min_p)  # validates them


def generate(args: GenerateArguments) -> list[list[str]]:
    """Samples per prompt: ``result[i][j]`` is sample j of prompt i (continuation only)."""
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).to(args.device).eval()
    sampler = SamplingLogitsProcessor(args.temperature, args.top_k, args.top_p, args.min_p)
    batch = encode_prompts(tokenizer, args.prompts, args.add_bos).to(args.device)
    cuda = [torch.device(args.device)] if torch.device(args.device).type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.no_grad():
        torch.manual_seed(args.seed)
        output = model.generate(
            **batch,
            **sampler.generate_kwargs(),
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=args.num_samples,
            pad_token_id=tokenizer.pad_token_id,
        )  # (P * S, T)
    texts = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return [texts[i * args.num_samples : (i + 1) * args.num_samples] for i in range(len(args.prompts))]


def main(argv: list[str] | None = None) -> list[list[str]]:
    (args,) = HfArgumentParser(GenerateArguments).parse_args_into_dataclasses(args=argv)
    samples = generate(args)
    print(
        f"# {args.model_dir}: temperature={args.temperature} top_k={args.top_k} "
        f"top_p={args.top_p} min_p={args.min_p} seed={args.seed}"
    )
    for prompt, texts in zip(args.prompts, samples, strict=True):
        for j, text in enumerate(texts):
            print(f"=== prompt {prompt!r}, sample {j} ===\n{prompt}{text}")
    return samples


if __name__ == "__main__":
    main(sys.argv[1:])

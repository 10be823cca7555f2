"""Our lm-eval figures vs lm-evaluation-harness's own: word perplexity, byte perplexity, bits per byte.

The claim: ``score_texts(..., windows="lm_eval")`` with lm-eval's unit counts gives the numbers
lm-evaluation-harness reports for a rolling-loglikelihood task (wikitext-style), to <= 1e-4 relative.
Both score the same tiny GPT-2 (trained here for a few dozen steps on the stdlib train split, so
that context matters) on held-out stdlib files, with the same ``max_length``: ours through
:func:`hf_lmobj.metrics.scoring.score_texts`; lm-eval's through its Python API, ``HFLM`` (the ``hf``
model) ``.loglikelihood_rolling`` on ``Instance`` requests, its task's ``count_words`` /
``count_bytes`` and its aggregations ``weighted_perplexity`` and ``bits_per_byte``, exactly what
``process_results`` and ``aggregation`` run for ``output_type: loglikelihood_rolling``.

lm-eval is not a dependency: install it beside this environment without touching torch or
transformers (check first with ``pip install --dry-run lm-eval==0.4.13``), e.g. into a folder::

    pip install --no-deps --target /tmp/lmeval_site lm-eval==0.4.13 <its missing dependencies>
    PYTHONPATH=/tmp/lmeval_site python benchmarks/lm_eval_parity.py
    python benchmarks/lm_eval_parity.py --max_length 32 --documents 8
"""

from __future__ import annotations

import argparse
import math
import tempfile

import torch
from _tiny import tiny_gpt2
from transformers import GPT2LMHeadModel

from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.metrics.scoring import score_texts


def train_tiny_model(tokenizer, texts: list[str], steps: int, seed: int) -> GPT2LMHeadModel:
    """A 2-layer GPT-2 trained for ``steps`` on 64-token chunks: enough for context to matter."""
    model = tiny_gpt2(tokenizer, 64, 2, heads=2, positions=256, seed=seed)
    ids = [t for text in texts for t in tokenizer(text, add_special_tokens=False)["input_ids"]]
    chunks = torch.tensor(ids[: len(ids) // 64 * 64]).view(-1, 64)  # (N, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = chunks[torch.randint(len(chunks), (16,))]  # (16, 64)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def lm_eval_figures(model_dir: str, texts: list[str], max_length: int) -> dict[str, float]:
    """lm-evaluation-harness's word_perplexity, byte_perplexity and bits_per_byte for ``texts``."""
    from lm_eval.api.instance import Instance
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model_dir, max_length=max_length, batch_size=4, device="cpu", dtype="float32")
    requests = [Instance(request_type="loglikelihood_rolling", doc={"text": t}, arguments=(t,), idx=0) for t in texts]
    loglikelihoods = lm.loglikelihood_rolling(requests, disable_tqdm=True)
    words = [(ll, ConfigurableTask.count_words(t)) for ll, t in zip(loglikelihoods, texts)]
    num_bytes = [(ll, ConfigurableTask.count_bytes(t)) for ll, t in zip(loglikelihoods, texts)]
    return {
        "word_perplexity": weighted_perplexity(words),
        "byte_perplexity": weighted_perplexity(num_bytes),
        "bits_per_byte": bits_per_byte(num_bytes),
    }


def our_figures(model, tokenizer, texts: list[str], max_length: int) -> dict[str, float]:
    scores = score_texts(model, tokenizer, texts, max_length=max_length, windows="lm_eval", progress=False)
    nll = math.fsum(s.nll for s in scores)
    words, num_bytes = sum(s.num_words for s in scores), sum(s.num_bytes for s in scores)
    return {
        "word_perplexity": math.exp(nll / words),
        "byte_perplexity": math.exp(nll / num_bytes),
        "bits_per_byte": nll / num_bytes / math.log(2),
    }


def parity_setup(description: str, max_length_help: str):
    """A parity benchmark's parsed command line, then what it scores: the tiny GPT-2 trained on 200 stdlib files,
    its tokenizer, and the held-out texts (on 2 torch threads)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--max_length", type=int, default=64, help=max_length_help)
    parser.add_argument("--documents", type=int, default=6, help="Held-out stdlib files scored.")
    parser.add_argument("--max_chars", type=int, default=3000, help="Characters kept of each held-out file.")
    parser.add_argument("--train_steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)

    corpus = load_stdlib_corpus(max_documents=400)
    tokenizer = build_tokenizer(vocab_size=1024, max_documents=400)
    model = train_tiny_model(tokenizer, corpus["train"]["text"][:200], args.train_steps, args.seed)
    texts = [t[: args.max_chars] for t in corpus["validation"]["text"] if t.strip()][: args.documents]
    return args, model, tokenizer, texts


def main() -> None:
    args, model, tokenizer, texts = parity_setup(__doc__.splitlines()[0], "Tokens per window (lm-eval's max_length).")
    with tempfile.TemporaryDirectory() as model_dir:
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        theirs = lm_eval_figures(model_dir, texts, args.max_length)
    ours = our_figures(model, tokenizer, texts, args.max_length)

    import lm_eval

    print(f"{len(texts)} held-out stdlib files, {sum(len(t) for t in texts)} characters, max_length {args.max_length}")
    print(f"{'figure':<16} {'lm-eval ' + lm_eval.__version__:>18} {'hf_lmobj':>18} {'ratio':>12} {'rel. diff':>10}")
    worst = 0.0
    for key in ours:
        rel = abs(ours[key] - theirs[key]) / abs(theirs[key])
        worst = max(worst, rel)
        print(f"{key:<16} {theirs[key]:>18.8f} {ours[key]:>18.8f} {ours[key] / theirs[key]:>12.8f} {rel:>10.2e}")
    print(f"worst relative difference {worst:.2e} (target <= 1e-4): {'OK' if worst <= 1e-4 else 'FAIL'}")


if __name__ == "__main__":
    main()

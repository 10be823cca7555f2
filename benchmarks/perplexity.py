"""Perplexity from a model: hf_lmobj's metric vs the Hub metric ``evaluate-metric/perplexity``'s method.

Claim: same numbers, at least 2x the texts per second. Run: ``python benchmarks/perplexity.py``.

The competitor is a faithful local re-implementation of the Hub metric's ``_compute`` (no network):
load the model and tokenizer on every call, tokenize and pad the whole input list to its longest
text at once, run batches in input order, per-text perplexity from the padded batch, and the mean
of per-text perplexities. Ours runs with ``stride = max_length`` on texts that fit in one window,
so both score exactly the same tokens with the same context and the per-text numbers must agree.
Both load the same saved tiny GPT-2 (from config, untrained) by path, with the same batch size.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch
from _tiny import tiny_gpt2
from torch.nn import CrossEntropyLoss
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging

from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.metrics import load


def hub_method_compute(predictions, model_id, batch_size=16, add_start_token=True, device="cpu", max_length=None):
    """The Hub metric's ``_compute`` (evaluate-metric/perplexity), kept as it is, with its defaults."""
    model = AutoModelForCausalLM.from_pretrained(model_id).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    if tokenizer.pad_token is None and batch_size > 1:
        tokenizer.add_special_tokens({"pad_token": list(tokenizer.special_tokens_map_extended.values())[0]})
    max_tokenized_len = max_length - 1 if add_start_token and max_length else max_length
    encodings = tokenizer(
        predictions,
        add_special_tokens=False,
        padding=True,
        truncation=bool(max_tokenized_len),
        max_length=max_tokenized_len,
        return_tensors="pt",
        return_attention_mask=True,
    ).to(device)
    encoded_texts, attn_masks = encodings["input_ids"], encodings["attention_mask"]
    ppls = []
    loss_fct = CrossEntropyLoss(reduction="none")
    for start_index in range(0, len(encoded_texts), batch_size):
        encoded_batch = encoded_texts[start_index : start_index + batch_size]
        attn_mask = attn_masks[start_index : start_index + batch_size]
        if add_start_token:
            bos = torch.tensor([[tokenizer.bos_token_id]] * encoded_batch.size(dim=0)).to(device)
            encoded_batch = torch.cat([bos, encoded_batch], dim=1)
            attn_mask = torch.cat([torch.ones(bos.size(), dtype=torch.int64).to(device), attn_mask], dim=1)
        labels = encoded_batch
        with torch.no_grad():
            out_logits = model(encoded_batch, attention_mask=attn_mask).logits
        shift_logits = out_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        shift_mask = attn_mask[..., 1:].contiguous()
        ppls += torch.exp(
            (loss_fct(shift_logits.transpose(1, 2), shift_labels) * shift_mask).sum(1) / shift_mask.sum(1)
        ).tolist()
    return {"perplexities": ppls, "mean_perplexity": np.mean(ppls)}


def make_texts(tokenizer, count: int, max_tokens: int) -> list[str]:
    """Blocks of the embedded corpus (split at blank lines), each fitting in one window, varied lengths."""
    texts = []
    for doc in load_stdlib_corpus(max_documents=400)["train"]["text"]:
        for block in doc.split("\n\n"):
            n = len(tokenizer(block, add_special_tokens=False)["input_ids"])
            if 4 <= n < max_tokens:
                texts.append(block)
            if len(texts) == count:
                return texts
    return texts


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="runs of ours (best kept); the Hub method runs once")
    args = parser.parse_args()
    logging.set_verbosity_error()
    logging.disable_progress_bar()

    tokenizer = build_tokenizer(vocab_size=1024, max_documents=300)
    # weights from the default init (no seed); untrained is fine for timing
    model = tiny_gpt2(tokenizer, 128, 4, heads=4, positions=args.max_length, seed=None).eval()
    config = model.config
    texts = make_texts(tokenizer, args.texts, args.max_length)
    lengths = sorted((len(tokenizer(t)["input_ids"]) + 1 for t in texts), reverse=True)  # + BOS
    hub_cells = len(texts) * lengths[0]  # the Hub method pads every text to the longest one
    our_cells = sum(
        len(c) * c[0] for c in (lengths[i : i + args.batch_size] for i in range(0, len(texts), args.batch_size))
    )
    metric = load("perplexity")
    with tempfile.TemporaryDirectory() as model_dir:
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        common = dict(max_length=args.max_length, stride=args.max_length, batch_size=args.batch_size, progress=False)
        hub_s, hub = timed(
            lambda: hub_method_compute(texts, model_dir, batch_size=args.batch_size, max_length=args.max_length),
            args.repeats,
        )
        ours_s, ours = timed(lambda: metric.compute(predictions=texts, model_id=model_dir, **common), args.repeats)
        mem_s, _ = timed(
            lambda: metric.compute(predictions=texts, model=model, tokenizer=tokenizer, **common), args.repeats
        )

    per_text = np.array(ours["perplexities"])
    rel = np.max(np.abs(per_text - np.array(hub["perplexities"])) / np.array(hub["perplexities"]))
    print(
        f"{len(texts)} texts, {min(lengths)}-{max(lengths)} tokens (mean {np.mean(lengths):.0f}); "
        f"GPT-2 {config.n_layer}x{config.n_embd}, max_length={args.max_length}, batch_size={args.batch_size}, "
        f"torch threads={torch.get_num_threads()}"
    )
    print(
        f"token positions run through the model: Hub method {hub_cells}, ours {our_cells} "
        f"({hub_cells / our_cells:.1f}x fewer: windows sorted by length and batched across texts)"
    )
    print(f"{'':32s}{'seconds':>10s}{'texts/s':>10s}{'speed-up':>10s}")
    print(f"{'Hub metric method (model_id)':32s}{hub_s:10.2f}{len(texts) / hub_s:10.1f}{1.0:10.2f}")
    print(f"{'hf_lmobj perplexity (model_id)':32s}{ours_s:10.2f}{len(texts) / ours_s:10.1f}{hub_s / ours_s:10.2f}")
    print(f"{'hf_lmobj perplexity (in memory)':32s}{mem_s:10.2f}{len(texts) / mem_s:10.1f}{hub_s / mem_s:10.2f}")
    print(
        f"mean of per-text perplexities: Hub method {hub['mean_perplexity']:.6f}, ours {per_text.mean():.6f}; "
        f"max per-text relative difference {rel:.1e}"
    )
    print(f"corpus perplexity (token-weighted, ours only): {ours['perplexity']:.6f}")


if __name__ == "__main__":
    main()

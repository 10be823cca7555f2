"""Bits per byte as an ``evaluate`` metric: total NLL / ln 2 / total UTF-8 bytes of the original texts.

This folder is a Hub Space: ``bits_per_byte.py`` (this script), ``README.md`` (the card, whose front matter
pins the gradio evaluate's widget runs with), ``app.py`` (the widget), ``requirements.txt`` (evaluate,
datasets, torch, transformers), ``sums.py`` and ``scoring.py``: copies of :mod:`hf_lmobj.metrics.sums`
and :mod:`hf_lmobj.metrics.scoring` that :func:`hf_lmobj.metrics.export_space` writes (never edited by
hand; a test holds them equal to the package's). No file links elsewhere, so a plain copy of the
folder loads with ``evaluate.load(<folder>)`` without hf_lmobj installed.
"""

from __future__ import annotations

import math

import datasets
import evaluate

# Sibling files, both imported here because evaluate copies along only the files this script imports:
# the Space needs no hf_lmobj. TextScoringMetric (from .scoring) scores texts with score_texts.
# No comment on an import line: evaluate would read it as a URL to download.
from .scoring import TextScoringMetric
from .sums import bits_per_byte_from_sums, byte_perplexity_from_sums, check_sums, total_nll

__all__ = ["BitsPerByte"]

_CITATION = """\
@article{gao2020pile,
  title={The {P}ile: An 800{GB} Dataset of Diverse Text for Language Modeling},
  author={Gao, Leo and Biderman, Stella and Black, Sid and Golding, Laurence and Hoppe, Travis and Foster, Charles
          and Phang, Jason and He, Horace and Thite, Anish and Nabeshima, Noa and Presser, Shawn and Leahy, Connor},
  journal={arXiv preprint arXiv:2101.00027},
  year={2020}
}
"""

_DESCRIPTION = """\
Bits per byte (BPB) is the total negative log-likelihood of a corpus in bits divided by the number
of UTF-8 bytes of the original text: sum nll / ln 2 / sum num_bytes. Unlike perplexity it does not
depend on the tokenizer, so models with different vocabularies can be compared. The byte count is
len(text.encode("utf-8")) of the original text, never a count rebuilt from decoded tokens. It can
be computed from per-text sums or from a causal language model and texts with strided sliding
windows (every token scored exactly once, with up to max_length tokens of context).
"""

_KWARGS_DESCRIPTION = """
Two ways in.

From sums (works with add / add_batch and several processes):
    nll (list of float): summed negative log-likelihood in nats, one entry per text.
    num_bytes (list of int): the UTF-8 byte count of each original text.

From a model (a list of texts as predictions):
    predictions (list of str): the texts, scored whole (never truncated).
    model_id (str): a local path or Hub id of a causal LM, loaded once for the call;
        or model= and tokenizer= (in-memory objects, reused across calls).
    max_length (int): tokens per forward pass. Defaults to the model's context size.
    stride (int): new tokens scored per window after the first. Defaults to max_length
        (disjoint windows); a smaller stride gives every token more context.
    add_start_token (bool): prepend BOS so the first token is scored too. Defaults to True.
    batch_size (int): windows per forward pass, across texts. Defaults to 8.
    device (str): where to run. Defaults to the model's device, else CUDA when available.
    progress (bool): show a progress bar. Defaults to True.
    windows (str): "strided" (default) or "lm_eval": lm-evaluation-harness's disjoint rolling
        windows of max_length targets (one token of context; BOS, else EOS, as the start token).

Returns:
    bits_per_byte (float): sum nll / ln 2 / sum num_bytes.
    nll (float): total negative log-likelihood in nats.
    num_bytes (int): total UTF-8 bytes.
    bits_per_byte_per_text (list of float): nll / ln 2 / num_bytes of each entry.
    byte_perplexity (float): lm-eval's exp(sum nll / sum num_bytes), 2 ** bits_per_byte.

Examples:
    >>> import evaluate
    >>> bits_per_byte = evaluate.load("hf_lmobj/metrics/bits_per_byte")  # a local folder or "<namespace>/bits_per_byte"
    >>> text = "你好"  # 2 characters, 6 UTF-8 bytes
    >>> results = bits_per_byte.compute(nll=[6 * 0.6931471805599453], num_bytes=[len(text.encode("utf-8"))])
    >>> round(results["bits_per_byte"], 6), results["num_bytes"]
    (1.0, 6)

    >>> results = bits_per_byte.compute(predictions=["def f(x):"], model_id="gpt2")  # doctest: +SKIP
    >>> sorted(results)  # doctest: +SKIP
    ['bits_per_byte', 'bits_per_byte_per_text', 'byte_perplexity', 'nll', 'num_bytes']
"""


class BitsPerByte(TextScoringMetric, evaluate.Metric):
    """Corpus bits per byte, ``total NLL / ln 2 / total bytes``; inputs and outputs in ``_KWARGS_DESCRIPTION``.

    Example:
        >>> BitsPerByte().compute(nll=[2 * math.log(2)], num_bytes=[2])["bits_per_byte"]
        1.0
    """

    count_name = "num_bytes"

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"nll": datasets.Value("float64"), "num_bytes": datasets.Value("int64")}),
            reference_urls=["https://arxiv.org/abs/2101.00027"],
        )

    def _compute(self, nll, num_bytes) -> dict:
        nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
        return {
            "bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
            "byte_perplexity": byte_perplexity_from_sums(nll, num_bytes),
            "nll": total_nll(nll),
            "num_bytes": sum(num_bytes),
            "bits_per_byte_per_text": [value / math.log(2) / count for value, count in zip(nll, num_bytes)],
        }

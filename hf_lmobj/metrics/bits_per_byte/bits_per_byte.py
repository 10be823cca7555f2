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

# Sibling files, each imported here because evaluate copies along only the files this script imports:
# the Space needs no hf_lmobj. TextScoringMetric (from .scoring) scores texts with score_texts; DomainMetric
# (from .domain_metric) takes domains= and the bootstrap options. domain_tags and sums_metric are imported for
# the other cores alone (noqa: F401, on the name's line: evaluate reads only the `from` line).
# No comment on an import line: evaluate would read it as a URL to download.
from .domain_metric import DomainMetric, check_bootstrap_options, domain_results, domain_table
from .domain_tags import (
    RESERVED_TAGS,  # noqa: F401
)
from .scoring import TextScoringMetric
from .slices import domain_figures
from .sums import bits_per_byte_from_sums, byte_perplexity_from_sums, check_sums, total_nll
from .sums_metric import (
    SumsMetric,  # noqa: F401
)
from .uncertainty import bootstrap_intervals

__all__ = ["BitsPerByte"]

#: The figures of this metric, per domain too.
FIGURES = ("bits_per_byte", "byte_perplexity")

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

Either way in:
    domains (list of str, optional): each entry's domain, a tag path such as "code/python" whose "/"
        separates levels (with add / add_batch too: every entry or none).
    bootstrap_samples (int, compute only): document-bootstrap resamples for the intervals; 0 (the
        default) gives none. confidence (float, default 0.95) and seed (int, default 0) set them.

Returns:
    bits_per_byte (float): sum nll / ln 2 / sum num_bytes.
    nll (float): total negative log-likelihood in nats.
    num_bytes (int): total UTF-8 bytes.
    bits_per_byte_per_text (list of float): nll / ln 2 / num_bytes of each entry.
    byte_perplexity (float): lm-eval's exp(sum nll / sum num_bytes), 2 ** bits_per_byte.
    bits_per_byte/<domain> (float), with domains: the domain's sum nll / ln 2 / sum num_bytes, for
        every domain and tag level ("code" and "code/python"); bits_per_byte/<parent>/macro, the mean
        over its sub-domains; bits_per_byte/micro (all entries) and bits_per_byte/macro (the mean over
        the top-level domains). The same keys for byte_perplexity (2 ** the bits per byte).
    <key>_ci_low, <key>_ci_high (float), with bootstrap_samples > 0: the interval of each key above,
        and bits_per_byte_ci_low / bits_per_byte_ci_high for the whole set (stratified document
        bootstrap, percentile method).

Examples:
    >>> import evaluate
    >>> bits_per_byte = evaluate.load("hf_lmobj/metrics/bits_per_byte")  # a local folder or "<namespace>/bits_per_byte"
    >>> text = "你好"  # 2 characters, 6 UTF-8 bytes
    >>> results = bits_per_byte.compute(nll=[6 * 0.6931471805599453], num_bytes=[len(text.encode("utf-8"))])
    >>> round(results["bits_per_byte"], 6), results["num_bytes"]
    (1.0, 6)

    >>> results = bits_per_byte.compute(nll=[6 * 0.6931471805599453, 1.0], num_bytes=[6, 2], domains=["zh", "en"])
    >>> round(results["bits_per_byte/zh"], 6), round(results["bits_per_byte/macro"], 6)
    (1.0, 0.860674)

    >>> results = bits_per_byte.compute(predictions=["def f(x):"], model_id="gpt2")  # doctest: +SKIP
    >>> sorted(results)  # doctest: +SKIP
    ['bits_per_byte', 'bits_per_byte_per_text', 'byte_perplexity', 'nll', 'num_bytes']
"""


class BitsPerByte(DomainMetric, TextScoringMetric, evaluate.Metric):
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
            features=datasets.Features(
                {
                    "nll": datasets.Value("float64"),
                    "num_bytes": datasets.Value("int64"),
                    "domains": datasets.Value("string"),  # "" where not given
                }
            ),
            reference_urls=["https://arxiv.org/abs/2101.00027"],
        )

    def _compute(self, nll, num_bytes, domains, **options) -> dict:
        nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
        return {
            "bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
            "byte_perplexity": byte_perplexity_from_sums(nll, num_bytes),
            "nll": total_nll(nll),
            "num_bytes": sum(num_bytes),
            "bits_per_byte_per_text": [value / math.log(2) / count for value, count in zip(nll, num_bytes)],
            **self._sliced(nll, num_bytes, domains, **options),
        }

    def _sliced(self, nll, num_bytes, domains, **options) -> dict:
        """The per-domain figures and the intervals asked for (none: ``{}``)."""
        samples, confidence, seed = check_bootstrap_options(**options)
        table = domain_table(nll, domains, samples, nbytes=num_bytes)
        if table is None:
            return {}
        intervals = bootstrap_intervals(table, samples, confidence, seed) if samples else {}
        return domain_results(domain_figures(table), intervals, FIGURES, sliced=any(domains))

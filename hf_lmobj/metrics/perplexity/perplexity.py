"""Perplexity as an ``evaluate`` metric: corpus-level and token-weighted, from sums or from a causal LM.

This folder is a Hub Space: ``perplexity.py`` (this script), ``README.md`` (the card, whose front matter
pins the gradio evaluate's widget runs with), ``app.py`` (the widget), ``requirements.txt`` (evaluate,
datasets, torch, transformers), ``sums.py`` and ``scoring.py``: copies of :mod:`hf_lmobj.metrics.sums`
and :mod:`hf_lmobj.metrics.scoring` that :func:`hf_lmobj.metrics.export_space` writes (never edited by
hand; a test holds them equal to the package's). No file links elsewhere, so a plain copy of the
folder loads with ``evaluate.load(<folder>)`` without hf_lmobj installed.
"""

from __future__ import annotations

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
from .sums import check_sums, exp_or_inf, perplexity_from_sums, total_nll, word_perplexity_from_sums
from .sums_metric import (
    SumsMetric,  # noqa: F401
)
from .uncertainty import bootstrap_intervals

__all__ = ["Perplexity"]

#: The figures of this metric, per domain too.
FIGURES = ("perplexity", "word_perplexity")

_CITATION = """\
@article{jelinek1977perplexity,
  title={Perplexity -- a measure of the difficulty of speech recognition tasks},
  author={Jelinek, Fred and Mercer, Robert L. and Bahl, Lalit R. and Baker, James K.},
  journal={The Journal of the Acoustical Society of America},
  volume={62},
  number={S1},
  pages={S63--S63},
  year={1977}
}
"""

_DESCRIPTION = """\
Perplexity is the exponentiated average negative log-likelihood per predicted token,
exp(total NLL / total predicted tokens), over the whole corpus (token-weighted, not the mean of
per-text perplexities). It can be computed from per-text sums (nll in nats, num_tokens) collected
anywhere, or from a causal language model and texts with strided sliding windows: every token is
scored exactly once, conditioned on up to max_length tokens of context.
"""

_KWARGS_DESCRIPTION = """
Two ways in.

From sums (works with add / add_batch and several processes):
    nll (list of float): summed negative log-likelihood in nats, one entry per text.
    num_tokens (list of int): the number of predicted tokens behind each nll.
    num_words (list of int, optional): lm-eval's word count of each text, len(re.split(r"\\s+", text));
        given (always, when scoring texts), the result has word_perplexity too.

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
    perplexity (float): exp(sum nll / sum num_tokens).
    nll (float): total negative log-likelihood in nats.
    num_tokens (int): total predicted tokens.
    perplexities (list of float): exp(nll / num_tokens) of each entry.
    word_perplexity (float): lm-eval's exp(sum nll / sum num_words), when every entry has num_words.
    num_words (int): total words, with word_perplexity.
    perplexity/<domain> (float), with domains: the domain's exp(sum nll / sum num_tokens), for every
        domain and tag level ("code" and "code/python"); perplexity/<parent>/macro, the mean over its
        sub-domains; perplexity/micro (all entries) and perplexity/macro (the mean over the top-level
        domains); means are of nats per token, then exp. The same keys for word_perplexity.
    <key>_ci_low, <key>_ci_high (float), with bootstrap_samples > 0: the interval of each key above,
        and perplexity_ci_low / perplexity_ci_high for the whole set (stratified document bootstrap,
        percentile method).

Examples:
    >>> import evaluate
    >>> perplexity = evaluate.load("hf_lmobj/metrics/perplexity")  # a local folder or "<namespace>/perplexity"
    >>> results = perplexity.compute(nll=[2.0, 4.0], num_tokens=[1, 3])
    >>> round(results["perplexity"], 4), results["num_tokens"]
    (4.4817, 4)

    >>> results = perplexity.compute(nll=[2.0, 4.0], num_tokens=[1, 3], domains=["wiki", "code"])
    >>> round(results["perplexity/wiki"], 4), round(results["perplexity/macro"], 4)
    (7.3891, 5.2945)

    >>> results = perplexity.compute(predictions=["def f(x):", "return x"], model_id="gpt2")  # doctest: +SKIP
    >>> sorted(results)  # doctest: +SKIP
    ['nll', 'num_tokens', 'num_words', 'perplexities', 'perplexity', 'word_perplexity']
"""


class Perplexity(DomainMetric, TextScoringMetric, evaluate.Metric):
    """Corpus perplexity, ``exp(total NLL / total tokens)``; inputs and outputs in ``_KWARGS_DESCRIPTION``.

    Example:
        >>> Perplexity().compute(nll=[9.210], num_tokens=[3])["perplexity"] > 21.5
        True
    """

    count_name = "num_tokens"
    optional_counts = ("num_words",)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "nll": datasets.Value("float64"),
                    "num_tokens": datasets.Value("int64"),
                    "num_words": datasets.Value("int64"),  # 0 where not counted
                    "domains": datasets.Value("string"),  # "" where not given
                }
            ),
            reference_urls=["https://huggingface.co/docs/transformers/perplexity"],
        )

    def _compute(self, nll, num_tokens, num_words, domains, **options) -> dict:
        nll, num_tokens = check_sums(nll, num_tokens, "num_tokens")
        words = {}
        if all(count > 0 for count in num_words):  # every entry counted its words
            words = {"word_perplexity": word_perplexity_from_sums(nll, num_words), "num_words": sum(num_words)}
        return {
            **words,
            "perplexity": perplexity_from_sums(nll, num_tokens),
            "nll": total_nll(nll),
            "num_tokens": sum(num_tokens),
            "perplexities": [exp_or_inf(value / count) for value, count in zip(nll, num_tokens)],
            **self._sliced(nll, num_tokens, num_words, domains, **options),
        }

    def _sliced(self, nll, num_tokens, num_words, domains, **options) -> dict:
        """The per-domain figures and the intervals asked for (none: ``{}``)."""
        samples, confidence, seed = check_bootstrap_options(**options)
        table = domain_table(nll, domains, samples, tokens=num_tokens, words=num_words)
        if table is None:
            return {}
        intervals = bootstrap_intervals(table, samples, confidence, seed) if samples else {}
        return domain_results(domain_figures(table), intervals, FIGURES, sliced=any(domains))

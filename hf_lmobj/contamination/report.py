"""What a contamination scan found: per evaluation document the share of its n-grams seen in training.

A :class:`ContaminationReport` holds, for each evaluation document, the fraction of its n-gram positions
whose n-gram occurs in the scanned training data (NaN for a document *shorter than n units*: it has no
n-gram, so it is **excluded from every rate and counted apart**, as ``short_documents``), the threshold
that judges a document contaminated (``fraction >= threshold``), the documents' domains and what was
scanned of each source. Built by :meth:`hf_lmobj.contamination.index.ContaminationIndex.scan`.

Example:
    >>> report = ContaminationReport(
    ...     n=13, unit="tokens", threshold=0.5, fractions=np.array([1.0, 0.25, np.nan, 0.5]),
    ...     domains=("code", "code", "web", "web"), sources=(SourceScan("store", "token_store", 10, 900, 2),))
    >>> report.contaminated, report.rate, report.short_documents, report.domain_rates
    ([0, 3], 0.6666666666666666, 1, {'code': 0.5, 'web': 1.0})
    >>> report.as_metrics()["contamination/web/rate"], report.as_metrics()["contamination/web/short_documents"]
    (1.0, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.checks import check_count, check_name, check_number


@dataclass(frozen=True)
class SourceScan:
    """What a scan read of one training source: its ``documents`` and ``units`` (ids or words), and
    ``documents_hit``, the documents holding at least one evaluation n-gram (what a drop-on-any-hit filter
    would remove)."""

    name: str
    kind: str  # token_store, token_ids, stream, text
    documents: int
    units: int
    documents_hit: int

    def __post_init__(self) -> None:
        check_name(self.name, "SourceScan.name")
        for field in ("documents", "units", "documents_hit"):
            check_count(getattr(self, field), f"SourceScan.{field}")
        if self.documents_hit > self.documents:
            raise ValueError(f"SourceScan {self.name!r}: documents_hit {self.documents_hit} > {self.documents}")


@dataclass(frozen=True, eq=False)
class ContaminationReport:
    """Per evaluation document, the share of its n-grams seen in training (see the module docstring).

    Attributes:
        n, unit: the n-gram length and its unit (``"tokens"`` or ``"words"``).
        threshold: a document is contaminated when ``fraction >= threshold`` (in ``(0, 1]``).
        fractions: ``(D,) float64`` in ``[0, 1]``, NaN for a document shorter than ``n`` units.
        domains: one domain per document, or None (no per-domain figures).
        sources: what was scanned of each training source, in order.
    """

    n: int
    unit: str
    threshold: float
    fractions: np.ndarray
    domains: tuple[str, ...] | None
    sources: tuple[SourceScan, ...]

    def __post_init__(self) -> None:
        check_count(self.n, "n", 1)
        check_number(self.threshold, "threshold", 0.0, 1.0, low_open=True)
        fractions = np.asarray(self.fractions, dtype=np.float64)
        if fractions.ndim != 1:
            raise ValueError(f"fractions must be 1-D (one per evaluation document), got shape {fractions.shape}")
        counted = fractions[~np.isnan(fractions)]
        if counted.size and (counted.min() < 0 or counted.max() > 1):
            raise ValueError("fractions must lie in [0, 1] (NaN for a document shorter than n)")
        if self.domains is not None and len(self.domains) != fractions.size:
            raise ValueError(f"domains has {len(self.domains)} entries for {fractions.size} documents")
        object.__setattr__(self, "fractions", fractions)

    @property
    def counted(self) -> np.ndarray:
        """``(D,) bool``: the documents with at least one n-gram (those the rates count)."""
        return ~np.isnan(self.fractions)

    @property
    def short_documents(self) -> int:
        """Documents shorter than ``n`` units: no n-gram, left out of every rate."""
        return int((~self.counted).sum())

    @property
    def contaminated(self) -> list[int]:
        """Indices of the documents judged contaminated (``fraction >= threshold``), increasing."""
        return np.flatnonzero(self.counted & (np.nan_to_num(self.fractions) >= self.threshold)).tolist()

    @property
    def rate(self) -> float:
        """The share of the counted evaluation documents judged contaminated (NaN when none is counted)."""
        counted = int(self.counted.sum())
        return len(self.contaminated) / counted if counted else float("nan")

    @property
    def domain_rates(self) -> dict[str, float]:
        """The rate of each domain with a counted document, by domain name (sorted); ``{}`` without domains."""
        if self.domains is None:
            return {}
        domains = np.asarray(self.domains, dtype=object)
        judged = np.zeros(self.fractions.size, bool)
        judged[self.contaminated] = True
        rates = {}
        for domain in sorted(set(self.domains)):
            counted = (domains == domain) & self.counted
            if counted.any():
                rates[domain] = float(judged[counted].sum() / counted.sum())
        return rates

    def as_metrics(self) -> dict[str, Any]:
        """The figures for ``metrics.json``: ``contamination/rate``, ``contamination/<domain>/rate`` (a domain
        whose documents are all short has no rate), ``contamination/<domain>/short_documents``, the counts, and
        ``n``, ``unit``, ``threshold``."""
        metrics: dict[str, Any] = {
            "contamination/rate": self.rate,
            "contamination/n": self.n,
            "contamination/unit": self.unit,
            "contamination/threshold": self.threshold,
            "contamination/documents": int(self.counted.sum()),
            "contamination/contaminated_documents": len(self.contaminated),
            "contamination/short_documents": self.short_documents,
            "contamination/training_documents": sum(source.documents for source in self.sources),
            "contamination/training_documents_hit": sum(source.documents_hit for source in self.sources),
        }
        for domain, rate in self.domain_rates.items():
            metrics[f"contamination/{domain}/rate"] = rate
        if self.domains is not None:
            short = ~self.counted
            for domain in sorted(set(self.domains)):
                in_domain = np.fromiter((d == domain for d in self.domains), bool, len(self.domains))
                metrics[f"contamination/{domain}/short_documents"] = int((short & in_domain).sum())
        return metrics

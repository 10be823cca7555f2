"""The printed report's lines on the held-out text: bits per byte beside the baselines, figures per domain.

Both read ``metrics.json``'s keys (and the baselines' rates) and compute nothing of their own, so the report and
the file always agree.

Example:
    >>> baseline_lines({"validation_bytes": 1200, "validation_bits_per_byte": 1.25}, {"xz -9e": 2.5}, {})[1:]
    ['  this model           1.250', '  xz -9e               2.500']
"""

from __future__ import annotations

from collections.abc import Mapping


def baseline_lines(metrics: Mapping[str, float], baselines: Mapping[str, float],
                   not_run: Mapping[str, str]) -> list[str]:  # fmt: skip
    """This model's bits per byte, then the best Kneser-Ney n-gram (every order tried), the other baselines
    (``baselines``: display name -> bits per byte) and those not run (``not_run``: display name -> why)."""
    lines = [f"bits per byte on the same validation text ({metrics['validation_bytes']:,} bytes):"]
    lines.append(f"  {'this model':20s} {metrics['validation_bits_per_byte']:.3f}")
    ngrams = {name: rate for name, rate in baselines.items() if name.startswith("Kneser-Ney")}
    if ngrams:
        best = min(ngrams, key=ngrams.get)
        tried = ", ".join(f"{name.split()[1].split('-')[0]}: {rate:.3f}" for name, rate in ngrams.items())
        lines.append(f"  {best:20s} {ngrams[best]:.3f}   (n chosen on this text; {tried})")
    for name, rate in baselines.items():
        if name not in ngrams:
            lines.append(f"  {name:20s} {rate:.3f}")
    for name, why in not_run.items():
        lines.append(f"  {name:20s} {why}")
    return lines


def domain_lines(metrics: Mapping[str, float]) -> list[str]:
    """The validation figures per domain (bits per byte with its interval, perplexity, contamination rate), micro and
    macro last, then the loss by position.

    Example:
        >>> domain_lines({"bits_per_byte/json": 1.5, "perplexity/json": 9.0, "bits_per_byte/micro": 1.5,
        ...               "perplexity/micro": 9.0, "contamination/json/rate": 0.0})[1].split()
        ['json', '1.500', '9.00', '0.000']
    """
    domains = [key.split("/", 1)[1] for key in metrics if key.startswith("bits_per_byte/") and "_ci_" not in key]
    if not domains:
        return []
    lines = [f"{'domain':24s} {'bits/byte':>9s} {'95% interval':>17s} {'perplexity':>10s} {'contaminated':>12s}"]
    for domain in sorted(domains, key=lambda d: (d in ("micro", "macro"), d)):
        low, high = metrics.get(f"bits_per_byte/{domain}_ci_low"), metrics.get(f"bits_per_byte/{domain}_ci_high")
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None else ""
        rate = metrics.get("contamination/rate" if domain in ("micro", "macro") else f"contamination/{domain}/rate")
        rate_text = f"{rate:.3f}" if rate is not None and domain != "macro" else ""
        lines.append(f"{domain:24s} {metrics[f'bits_per_byte/{domain}']:9.3f} {interval:>17s} "
                     f"{metrics.get(f'perplexity/{domain}', float('nan')):10.2f} {rate_text:>12s}".rstrip())  # fmt: skip
    positions = {
        k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("loss_by_position/") and "_targets" not in k
    }
    if positions:
        lines.append("loss by position (nats per token): " + ", ".join(f"{k} {v:.2f}" for k, v in positions.items()))
    return lines

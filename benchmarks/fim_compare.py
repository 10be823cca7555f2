"""Fill-in-the-middle for free? The FIM demo beside the plain clm demo, trained for the same steps.

Each arm is the pre-training recipe on a shipped config, with the time budget off so that both
train exactly ``--max_steps`` steps (2,000 by default: what the demo's 7-minute budget gives on the
2-core project machine) of the same model, optimizer and schedule:

* ``clm``: ``causal/demo.yaml --infill_cases 200``: whole files packed; prefix-only infilling (all a
  plain model can do);
* ``fim``: ``causal/fim_demo.yaml`` (files cut into pieces, ``fim_rate`` of them FIM'd), plus
  ``--fim_flags`` (e.g. ``"--fim_level char --fim_rate 0.5"``): PSM, SPM and prefix-only infilling.

Both report left-to-right bits per byte of the held-out stdlib files (strided windows of 256
advancing by 128) and the single-line infilling figures of :mod:`hf_lmobj.fim.evaluation` (200
seeded cases: exact match and edit similarity of the first generated line, bits per byte of the hidden
line).

    python benchmarks/fim_compare.py                                          # both arms, 2,000 steps
    python benchmarks/fim_compare.py --runs fim --fim_flags "--fim_level char" --output_dir out/fim-char
    python benchmarks/fim_compare.py --report_only                            # the table again

Each arm writes ``<output_dir>/<run>/metrics.json`` (and the rest of a recipe run); the table is
printed at the end and rebuilt from those files by ``--report_only``.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from hf_lmobj.recipes.pretrain import main as pretrain

RUNS = {"clm": ["--config", "causal/demo", "--infill_cases", "200"], "fim": ["--config", "causal/fim_demo"]}
MODES = ("psm", "spm", "prefix_only")


def run_arm(run: str, args: argparse.Namespace) -> dict:
    """Train and report one arm through the recipe; its metrics.json."""
    out = Path(args.output_dir) / run
    flags = [*RUNS[run], *(shlex.split(args.fim_flags) if run == "fim" else [])]
    pretrain([*flags, "--max_train_minutes", "null", "--max_steps", str(args.max_steps),
              "--torch_threads", str(args.threads), "--disable_tqdm", "true", "--output_dir", str(out)])  # fmt: skip
    return json.loads((out / "metrics.json").read_text())


def table(results: dict[str, dict]) -> str:
    """The markdown table of every arm's figures (``-`` for a mode the arm was not evaluated in)."""
    figures = {"exact match": "exact_match", "edit similarity": "edit_similarity",
               "hidden-line bits/byte": "middle_bits_per_byte"}  # fmt: skip
    head = ["run", "tokens seen", "LTR bits/byte", *(f"{name} (psm / spm / prefix-only)" for name in figures)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, m in results.items():
        cells = [run, f"{m['train_tokens_seen']:,}", f"{m['validation_bits_per_byte']:.4f}"]
        for key in figures.values():
            values = [m.get(f"validation_infill_{mode}_{key}") for mode in MODES]
            cells.append(" / ".join("-" if v is None else f"{v:.3f}" for v in values))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--max_steps", type=int, default=2000)
    parser.add_argument("--fim_flags", default="", help="extra recipe flags for the fim arm, one string")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output_dir", default="out/fim-compare")
    parser.add_argument("--report_only", action="store_true", help="print the table from the arms' metrics.json")
    args = parser.parse_args()
    results = {}
    for run in args.runs:
        path = Path(args.output_dir) / run / "metrics.json"
        if not args.report_only:
            results[run] = run_arm(run, args)
        elif path.is_file():
            results[run] = json.loads(path.read_text())
    print(table(results))
    if "fim" in results and "clm" in results:
        ratio = results["fim"]["validation_bits_per_byte"] / results["clm"]["validation_bits_per_byte"]
        print(f"\nFIM / plain left-to-right bits per byte: {ratio:.4f}")


if __name__ == "__main__":
    main()

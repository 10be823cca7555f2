"""Our bits per byte, byte and word perplexity vs LightEval's, on the custom task ``hf_lmobj_text``.

The claim: LightEval running :mod:`hf_lmobj.metrics.lighteval_tasks` (its task, metrics and model
backend) reports the figures the package computes, to <= 1e-4 relative. A tiny GPT-2 (trained here for
a few dozen steps, as in ``lm_eval_parity.py``) and its tokenizer are saved to a temporary folder;
held-out stdlib files are written as a local dataset (``test.jsonl``). Columns:

- ``hf_lmobj``: :func:`hf_lmobj.metrics.scoring.score_texts` with ``windows="lm_eval"`` on the texts,
  aggregated with the package's ``*_from_sums`` (``lm_eval_parity.py`` checks these windows against
  lm-evaluation-harness's own numbers);
- ``task metrics``: LightEval's ``Pipeline`` on ``hf_lmobj_text|0``, the model given as ``lighteval
  custom`` gives it (a ``CustomModelConfig`` naming the saved folder and this package's file), so
  LightEval loads the folder with ``datasets``, builds its docs, runs the backend and aggregates;
- ``built-in metrics``: the same task and backend with LightEval's own ``Metrics.bits_per_byte``,
  ``byte_perplexity`` and ``word_perplexity`` (its unit counts and its corpus aggregation).

The NLL in every column comes from ``score_texts`` (LightEval 0.13.0's own transformers backend cannot
score a perplexity task: the last line prints the error it raises on this task). Windows: lm-eval's
disjoint rolling windows of ``max_length`` tokens in all columns. Offline: LightEval's registry imports
every built-in task file, and ``tasks/tiny_benchmarks.py`` downloads a file at import, so this script
lets the registry load the custom task module only.

LightEval is not a dependency: install it beside this environment without touching torch or
transformers (``pip install --dry-run --report r.json lighteval==0.13.0`` lists what it adds; install
exactly those, less any package the venv already has, with ``--no-deps --target``), and ``xxhash<4``
there too (LightEval 0.13.0 hashes ``str``, which xxhash 4 refuses: lighteval#1330)::

    pip install --no-deps --target /tmp/lighteval_site <the packages of that report> "xxhash<4"
    HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/lighteval_site python benchmarks/lighteval_parity.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import types
from importlib.metadata import version as package_version
from pathlib import Path

from lm_eval_parity import parity_setup  # the sibling benchmark's command line and tiny GPT-2

import hf_lmobj.metrics.lighteval_tasks as lighteval_tasks
from hf_lmobj.metrics.lighteval_data import FIGURES, write_text_dataset
from hf_lmobj.metrics.lighteval_tasks import TASK_NAME, build_tasks_table
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.sums import bits_per_byte_from_sums, byte_perplexity_from_sums, word_perplexity_from_sums

BUILTIN_TASK = f"{TASK_NAME}_builtin"


@contextlib.contextmanager
def only_custom_tasks():
    """LightEval's registry with the custom tasks module alone (its built-in task files need network)."""
    from lighteval.tasks.registry import Registry

    original = Registry.__dict__["load_all_task_configs"]

    def load_custom(custom_tasks=None, load_multilingual=False):
        return Registry._extract_configs(Registry.create_custom_tasks_module(custom_tasks))

    Registry.load_all_task_configs = staticmethod(load_custom)
    try:
        yield
    finally:
        Registry.load_all_task_configs = original


def tasks_module(data_dir: Path) -> types.ModuleType:
    """A custom tasks module: our task, and a copy of it with LightEval's built-in perplexity metrics."""
    from lighteval.metrics.metrics import Metrics

    (ours,) = build_tasks_table(data_dir)
    builtin = [Metrics.bits_per_byte, Metrics.byte_perplexity, Metrics.word_perplexity]
    module = types.ModuleType("hf_lmobj_lighteval_parity_tasks")
    module.TASKS_TABLE = [ours, dataclasses.replace(ours, name=BUILTIN_TASK, metrics=builtin)]
    return module


def run_pipeline(tasks: str, module: types.ModuleType, model_config, launcher, output_dir: str) -> dict[str, dict]:
    """LightEval's ``Pipeline`` on ``tasks`` (``launcher``: a ``ParallelismManager``); results per ``"<task>:0"``."""
    from lighteval.logging.evaluation_tracker import EvaluationTracker
    from lighteval.pipeline import Pipeline, PipelineParameters

    params = PipelineParameters(launcher_type=launcher, custom_tasks_directory=module, bootstrap_iters=0)
    tracker = EvaluationTracker(output_dir=output_dir, save_details=False)
    with only_custom_tasks():
        pipeline = Pipeline(
            tasks=tasks, pipeline_parameters=params, evaluation_tracker=tracker, model_config=model_config
        )
        pipeline.evaluate()
    results = pipeline.get_results()["results"]
    return {task: {key: float(value) for key, value in figures.items()} for task, figures in results.items()}


def lighteval_figures(model_dir: str, data_dir: Path, max_length: int, tmp: str) -> tuple[dict, dict]:
    """LightEval's figures for our task metrics and for its built-in ones, through our backend."""
    from lighteval.models.custom.custom_model import CustomModelConfig
    from lighteval.pipeline import ParallelismManager

    config = CustomModelConfig(
        model_name=f"{model_dir},max_length={max_length},batch_size=4,device=cpu",
        model_definition_file_path=lighteval_tasks.__file__,
    )
    tasks = f"{TASK_NAME}|0,{BUILTIN_TASK}|0"
    results = run_pipeline(tasks, tasks_module(data_dir), config, ParallelismManager.CUSTOM, tmp)
    return results[f"{TASK_NAME}:0"], results[f"{BUILTIN_TASK}:0"]


def stock_backend_error(model_dir: str, data_dir: Path, max_length: int, tmp: str) -> str:
    """What LightEval's own transformers backend does with the same task: the error it raises."""
    from lighteval.models.transformers.transformers_model import TransformersModelConfig
    from lighteval.pipeline import ParallelismManager

    config = TransformersModelConfig(
        model_name=model_dir, device="cpu", dtype="float32", max_length=max_length, batch_size=4, cache_dir=tmp
    )
    try:
        results = run_pipeline(f"{TASK_NAME}|0", tasks_module(data_dir), config, ParallelismManager.NONE, tmp)
    except Exception as error:  # reported, not handled: this is the figure of this row
        return f"{type(error).__name__}: {error}"
    return f"no error; it reported {results[f'{TASK_NAME}:0']}"


def our_figures(model_dir: str, texts: list[str], max_length: int) -> dict[str, float]:
    scores = score_texts(model_dir, None, texts, max_length=max_length, device="cpu", windows="lm_eval", progress=False)
    nll = [s.nll for s in scores]
    return {
        "bits_per_byte": bits_per_byte_from_sums(nll, [s.num_bytes for s in scores]),
        "byte_perplexity": byte_perplexity_from_sums(nll, [s.num_bytes for s in scores]),
        "word_perplexity": word_perplexity_from_sums(nll, [s.num_words for s in scores]),
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args, model, tokenizer, texts = parity_setup(__doc__.splitlines()[0], "Tokens per window.")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, data_dir = str(Path(tmp) / "model"), Path(tmp) / "data"
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        write_text_dataset(texts, data_dir)
        ours = our_figures(model_dir, texts, args.max_length)
        task, builtin = lighteval_figures(model_dir, data_dir, args.max_length, tmp)
        stock = stock_backend_error(model_dir, data_dir, args.max_length, tmp)

    version = f"lighteval {package_version('lighteval')}"
    print(f"{len(texts)} held-out stdlib files, {sum(len(t) for t in texts)} characters, max_length {args.max_length}")
    print(f"{version}, lm-eval rolling windows in every column")
    print(
        f"{'figure':<16} {'hf_lmobj':>16} {'task metrics':>16} {'rel. diff':>10} {'built-in metrics':>17} {'rel. diff':>10}"
    )
    worst = 0.0
    for key in FIGURES:
        rel_task = abs(task[key] - ours[key]) / abs(ours[key])
        rel_builtin = abs(builtin[key] - ours[key]) / abs(ours[key])
        worst = max(worst, rel_task, rel_builtin)
        print(
            f"{key:<16} {ours[key]:>16.10g} {task[key]:>16.10g} {rel_task:>10.2e} {builtin[key]:>17.10g} {rel_builtin:>10.2e}"
        )
    print(f"worst relative difference {worst:.2e} (target <= 1e-4): {'OK' if worst <= 1e-4 else 'FAIL'}")
    print(f"{version}'s own transformers backend on {TASK_NAME}|0: {stock}")


if __name__ == "__main__":
    main()

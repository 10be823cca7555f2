"""A LightEval custom task, metrics and model backend: bits per byte of a causal LM on local text.

LightEval (``pip install lighteval``, 0.13.0 checked) scores a model on this package's definitions:
``bits_per_byte = sum nll / ln 2 / sum UTF-8 bytes``, ``byte_perplexity = exp(sum nll / sum bytes)``
and ``word_perplexity = exp(sum nll / sum words)`` (lm-eval's words, :func:`~hf_lmobj.metrics.sums.count_words`),
with the NLL (nats) of each whole document summed over lm-evaluation-harness's disjoint rolling windows
(:func:`hf_lmobj.metrics.scoring.score_texts` with ``windows="lm_eval"``). This file is three things at once:

- a custom tasks file (``--custom-tasks``): its ``TASKS_TABLE`` holds the task :data:`TASK_NAME` over the
  folder named by the environment variable :data:`DATA_ENV`, or is empty while that is unset;
- the metrics: ``bits_per_byte``, ``byte_perplexity`` and ``word_perplexity``, aggregated by the package's
  own ``*_from_sums`` functions (:func:`corpus_figure`), so the figures are the package's to the last bit;
- a model definition file (``lighteval custom <model> <this file>``): :class:`HfLmobjRollingModel`, which
  scores each document with ``score_texts``. Why a backend of its own: LightEval 0.13.0's transformers
  backend cannot score perplexity tasks (it fails on their ``Doc(choices=None)``).

The data: a folder holding ``<split>.jsonl`` (``split`` in :data:`~hf_lmobj.metrics.lighteval_data.SPLITS`), one JSON
object per line with a non-empty ``"text"``: a document, scored whole (never truncated).
:func:`~hf_lmobj.metrics.lighteval_data.write_text_dataset` writes one.
LightEval reads it with ``datasets.load_dataset(<folder>)``, nothing is downloaded::

    export HF_LMOBJ_LIGHTEVAL_DATA=/path/to/folder       # HF_LMOBJ_LIGHTEVAL_SPLIT=test by default
    TASKS=$(python -c "import hf_lmobj.metrics.lighteval_tasks as m; print(m.__file__)")
    lighteval custom "<model path or Hub id>,max_length=1024,batch_size=8" "$TASKS" "hf_lmobj_text|0" \\
        --custom-tasks "$TASKS" --output-dir results

The model argument is :func:`parse_model_spec`'s: the model, then optional ``max_length`` (tokens per
window, default the model's context size), ``batch_size`` (windows per forward pass, default 8) and
``device`` (default CUDA when available). LightEval 0.13.0 imports all its built-in task files first, one
of which downloads a file at import, so offline the CLI fails before reaching this task; in process,
LightEval's ``Pipeline`` with a registry that loads only this custom task module works offline.

Without lighteval installed this module still imports (``TASKS_TABLE == []``, no model class); its pure
functions need only the package.

Example:
    >>> parse_model_spec("out/causal-demo,max_length=256").max_length  # the data side: lighteval_data
    256
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hf_lmobj.checks import check_length, check_name
from hf_lmobj.metrics.lighteval_data import (
    FIGURES,
    TextSums,
    check_choice,
    check_text_dataset,
    corpus_figure,
    document_text,
    text_sums,
)
from hf_lmobj.metrics.scoring import (
    default_max_length,
    load_model_and_tokenizer,
    score_texts,
)

logger = logging.getLogger(__name__)

TASK_NAME = "hf_lmobj_text"
DATA_ENV = "HF_LMOBJ_LIGHTEVAL_DATA"  # the data folder of TASKS_TABLE's task
SPLIT_ENV = "HF_LMOBJ_LIGHTEVAL_SPLIT"  # its split (default "test")
_SPEC_KEYS = ("max_length", "batch_size", "device")
_INSTALL = "pip install lighteval (0.13.0 checked)"


def lighteval_available() -> bool:
    """Whether ``lighteval`` can be imported here (checked without importing it)."""
    return importlib.util.find_spec("lighteval") is not None


# ------------------------------------------------------------------------------------------- data
def doc_fields(line: Mapping[str, Any], task_name: str | None = None, text_column: str = "text") -> dict[str, Any]:
    """The fields of the lighteval ``Doc`` for one data row: the document is the query, scored whole.

    Example:
        >>> doc_fields({"text": "x = 1"}, "hf_lmobj_text|0")
        {'task_name': 'hf_lmobj_text|0', 'query': 'x = 1', 'choices': None, 'gold_index': None}
    """
    return {"task_name": task_name, "query": document_text(line, text_column), "choices": None, "gold_index": None}


def scored_text(doc: Any) -> str:
    """The text :class:`HfLmobjRollingModel` scores for a lighteval ``Doc``: its query, alone.

    A doc with few-shot examples (``"hf_lmobj_text|5"``) or an instruction is refused: a perplexity
    figure is of the document, not of a prompt around it.
    """
    if getattr(doc, "fewshot_samples", None):
        raise ValueError(f"doc {doc.id!r} has few-shot examples; run the task as '{TASK_NAME}|0' (no few-shot)")
    if getattr(doc, "instruction", None):
        raise ValueError(f"doc {doc.id!r} has an instruction; a perplexity task scores the document alone")
    if not isinstance(doc.query, str) or not doc.query:
        raise ValueError(f"doc {doc.id!r}: query must be a non-empty string (the document), got {doc.query!r}")
    return doc.query


# ---------------------------------------------------------------------------------------- metrics
class ModelSpec(NamedTuple):
    """What ``lighteval custom``'s model argument names: the model and the scoring settings."""

    model: str
    max_length: int | None = None  # None: the model's context size
    batch_size: int = 8
    device: str | None = None  # None: CUDA when available


def parse_model_spec(spec: str) -> ModelSpec:
    """``"<model>[,max_length=N][,batch_size=B][,device=D]"`` as a :class:`ModelSpec`.

    Example:
        >>> parse_model_spec("gpt2,max_length=64,device=cpu")
        ModelSpec(model='gpt2', max_length=64, batch_size=8, device='cpu')
        >>> parse_model_spec("gpt2,stride=2")
        Traceback (most recent call last):
        ...
        ValueError: model option 'stride' is unknown; the options are ('max_length', 'batch_size', 'device')
    """
    model, *options = check_name(spec, "model").split(",")
    settings: dict[str, Any] = {}
    for option in options:
        key, sep, value = (part.strip() for part in option.partition("="))
        if key not in _SPEC_KEYS:
            raise ValueError(f"model option {key!r} is unknown; the options are {_SPEC_KEYS}")
        if not sep or not value or key in settings:
            raise ValueError(f"model option {option!r} must appear once, as {key}=<value>")
        if key == "device":
            settings[key] = value
            continue
        if not value.isdigit():
            raise ValueError(f"model option {key} must be an int >= 1, got {value!r}")
        settings[key] = check_length(int(value), key, 1)
    return ModelSpec(check_name(model.strip(), "model"), **settings)


class _NoSampleCache:
    """lighteval's pipeline calls ``model._cache._init_registry``; this backend keeps no sample cache."""

    def _init_registry(self, registry: Any) -> None:
        return None


# ------------------------------------------------------------------------------------------ tasks
def build_tasks_table(
    data_path: str | os.PathLike, split: str = "test", text_column: str = "text", name: str = TASK_NAME
) -> list:
    """A ``TASKS_TABLE``: one ``LightevalTaskConfig`` ``name`` scoring ``data_path/<split>.jsonl``.

    The folder is checked first (:func:`check_text_dataset`); then lighteval is imported (an
    ``ImportError`` says how to install it). The task's metrics are :data:`FIGURES`, by :func:`corpus_figure`.
    """
    name = check_name(name, "name")
    check_text_dataset(data_path, split, text_column)
    _require_lighteval()
    from lighteval.tasks.lighteval_task import LightevalTaskConfig

    return [
        LightevalTaskConfig(
            name=name,
            prompt_function=functools.partial(_prompt, text_column=text_column),
            hf_repo=str(Path(data_path).resolve()),
            hf_subset="default",
            hf_avail_splits=[split],
            evaluation_splits=[split],
            few_shots_split=split,
            generation_size=-1,
            metrics=[_corpus_metric(figure) for figure in FIGURES],
            version=0,
        )
    ]


def tasks_table_from_env(warn: bool = False) -> list:
    """The table of :data:`DATA_ENV`'s folder (split :data:`SPLIT_ENV`, default test); ``[]`` while unset.

    ``warn`` logs a warning when the variable is unset (this file loaded as ``--custom-tasks``).
    """
    if not lighteval_available():
        return []
    data_path = os.environ.get(DATA_ENV)
    if not data_path:
        if warn:
            logger.warning(
                "%s is unset, so %s registers no task; set it to a folder holding test.jsonl", DATA_ENV, __name__
            )
        return []
    return build_tasks_table(data_path, split=os.environ.get(SPLIT_ENV) or "test")


def _require_lighteval() -> None:
    if not lighteval_available():
        raise ImportError(f"this needs lighteval: {_INSTALL}")


def _prompt(line: dict, task_name: str | None = None, *, text_column: str = "text"):
    from lighteval.tasks.requests import Doc

    return Doc(**doc_fields(line, task_name, text_column))


def _corpus_metric(figure: str):
    from lighteval.metrics.utils.metric_utils import CorpusLevelMetric
    from lighteval.tasks.requests import SamplingMethod

    # the package module's classes, also when lighteval runs this file by path: its bootstrap pickles them
    from hf_lmobj.metrics import lighteval_tasks as package

    return CorpusLevelMetric(
        metric_name=figure,
        higher_is_better=False,
        category=SamplingMethod.PERPLEXITY,
        sample_level_fn=package.TextSumsPreparator(),
        corpus_level_fn=package.FigureAggregation(figure),
    )


if lighteval_available():  # the metric functions and the backend (lighteval custom <model> <this file>)
    from lighteval.metrics.metrics_corpus import CorpusLevelComputation
    from lighteval.metrics.sample_preparator import Preparator
    from lighteval.models.abstract_model import LightevalModel
    from lighteval.models.model_output import ModelResponse

    class TextSumsPreparator(Preparator):
        """A document's :class:`TextSums` from its doc and the backend's summed log-probability."""

        def prepare(self, doc, model_response, **kwargs) -> TextSums:
            return text_sums(doc.query, model_response.logprobs)

    class FigureAggregation(CorpusLevelComputation):
        """Corpus figure ``figure`` of the documents' :class:`TextSums` (:func:`corpus_figure`)."""

        def __init__(self, figure: str):
            self.figure = check_choice(figure, "figure", FIGURES)

        def compute_corpus(self, items: Sequence[TextSums]) -> float:
            return corpus_figure(self.figure, items)

    class HfLmobjRollingModel(LightevalModel):
        """A lighteval model that scores perplexity tasks with :func:`~hf_lmobj.metrics.scoring.score_texts`.

        ``loglikelihood_rolling`` returns each document's summed log-probability over lm-eval's
        disjoint rolling windows of ``max_length`` tokens (a BOS, else EOS, start token); generation
        and multiple-choice requests are refused. Built by lighteval from a ``CustomModelConfig``
        (``model_name`` read by :func:`parse_model_spec`), or from an in-memory model by :meth:`from_model`.
        """

        def __init__(self, config, model=None, tokenizer=None, spec: ModelSpec | None = None):
            if getattr(config, "system_prompt", None):
                raise ValueError("a system_prompt would not be scored: a perplexity task scores documents alone")
            spec = parse_model_spec(config.model_name) if spec is None else spec
            self.config = config
            self._model, self._tokenizer = load_model_and_tokenizer(
                spec.model if model is None else model, tokenizer, spec.device
            )
            self._max_length = spec.max_length or default_max_length(self._model)
            self._batch_size = spec.batch_size
            self._cache = _NoSampleCache()

        @classmethod
        def from_model(cls, model, tokenizer, max_length: int | None = None, batch_size: int = 8, name: str = "model"):
            """Wrap an in-memory causal LM (``Pipeline(model=...)``); ``name`` is what lighteval reports."""
            from lighteval.models.custom.custom_model import CustomModelConfig

            spec = ModelSpec(
                check_name(name, "name"),
                check_length(max_length, "max_length", 1, "tokens per window", optional=True),
                check_length(batch_size, "batch_size", 1, "windows per forward pass"),
            )
            config = CustomModelConfig(model_name=spec.model, model_definition_file_path=__file__)
            return cls(config, model, tokenizer, spec)

        @property
        def tokenizer(self):
            return self._tokenizer

        @property
        def add_special_tokens(self) -> bool:
            return False  # score_texts adds the start token itself

        @property
        def max_length(self) -> int:
            return self._max_length

        def loglikelihood_rolling(self, docs: list) -> list:
            texts = [scored_text(doc) for doc in docs]
            scores = score_texts(
                self._model,
                self._tokenizer,
                texts,
                max_length=self._max_length,
                batch_size=self._batch_size,
                progress=not self.disable_tqdm,
                windows="lm_eval",
            )
            return [ModelResponse(logprobs=[-score.nll]) for score in scores]

        def loglikelihood(self, docs: list) -> list:
            raise NotImplementedError(f"{type(self).__name__} scores perplexity tasks only; use `lighteval accelerate`")

        def greedy_until(self, docs: list) -> list:
            raise NotImplementedError(f"{type(self).__name__} scores perplexity tasks only; use `lighteval accelerate`")


# lighteval 0.13.0 runs this file as "lighteval_tasks" for --custom-tasks <path> (warn if no data is named),
# and as "custom_model_module" for the model definition file (no task table read there)
TASKS_TABLE = [] if __name__ == "custom_model_module" else tasks_table_from_env(warn=__name__ == "lighteval_tasks")

"""The Space's entry point (``app_file`` in README.md): evaluate's Gradio widget for this metric.

The metric is loaded from the script beside this file, so the Space runs the code it ships (no
Hub download, whatever the Space is called). Run by the Space as ``python app.py``.
"""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget

__all__ = ["SCRIPT"]

SCRIPT = Path(__file__).resolve().with_name("perplexity.py")

if __name__ == "__main__":
    launch_gradio_widget(evaluate.load(str(SCRIPT)))

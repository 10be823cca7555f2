"""The demo's time prediction (issue 38): printed once, from the timed window, by the main process only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hf_lmobj.trainer import time_estimate
from hf_lmobj.trainer.time_estimate import TimeEstimateCallback, estimate_line, minutes_and_seconds


def run_steps(callback: TimeEstimateCallback, steps: int, max_steps: int, monkeypatch, main: bool = True) -> None:
    clock = iter(float(step) * 0.25 for step in range(10_000))  # 0.25 s per call: one call per step at most
    monkeypatch.setattr(time_estimate.time, "perf_counter", lambda: next(clock))
    for step in range(1, steps + 1):
        state = SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=main)
        callback.on_step_end(None, state, None)


def test_the_prediction_is_printed_once_after_the_window(monkeypatch, capsys):
    callback = TimeEstimateCallback(skip=2, window=4)
    run_steps(callback, 40, 1000, monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert callback.seconds_per_step == pytest.approx(0.25 / 4)  # two clock reads, four steps apart
    assert out == [estimate_line(1000, 6, 0.0625, (2, 6))]
    assert out[0].startswith("training: 1,000 steps, about 1 min 02 s on this machine (0.062 s/step over steps 2-6")


@pytest.mark.parametrize(("steps", "main"), [(5, True), (40, False)])
def test_a_short_run_or_another_process_prints_nothing(monkeypatch, capsys, steps, main):
    run_steps(TimeEstimateCallback(skip=2, window=4), steps, 1000, monkeypatch, main=main)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("seconds", "text"), [(0.04, "0.0 s"), (59.94, "59.9 s"), (60.0, "1 min 00 s"),
                                               (3599.6, "60 min 00 s")])  # fmt: skip
def test_minutes_and_seconds(seconds, text):
    assert minutes_and_seconds(seconds) == text


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"skip": -1}, ValueError, "skip must be an int >= 0"),
    ({"window": 0}, ValueError, "window must be an int >= 1"),
    ({"window": 2.5}, TypeError, "window must be an int"),
])  # fmt: skip
def test_bad_windows_are_refused(kwargs, error, words):
    with pytest.raises(error, match=words):
        TimeEstimateCallback(**kwargs)

"""Adaptive torch threads: the cores other processes leave free, from CPU-time samples."""

import pytest
import torch

from hf_lmobj.trainer.cpu_threads import (
    AdaptiveThreadsCallback,
    CpuSample,
    RuntimeArguments,
    free_threads,
    other_load,
    read_sample,
)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_other_load_subtracts_this_process():
    before, after = CpuSample(0.0, 100.0, 5.0), CpuSample(2.0, 103.0, 7.0)  # 3 busy s, 2 of them ours
    assert other_load(before, after) == pytest.approx(0.5)
    assert other_load(after, after) == 0.0
    assert other_load(before, CpuSample(2.0, 101.0, 7.0)) == 0.0  # never negative (tick rounding)


@pytest.mark.parametrize("load,threads", [(0.0, 4), (0.4, 4), (0.6, 3), (2.5, 1), (9.0, 1)])
def test_free_threads(load, threads):
    assert free_threads(load, cpus=4) == threads


def test_callback_follows_the_load_of_other_processes(restore_threads, tmp_path):
    # others busy with one core of two over the first check, idle over the second
    samples = iter([CpuSample(0, 0, 0), CpuSample(10, 20, 10), CpuSample(20, 30, 20)])
    callback = AdaptiveThreadsCallback(check_steps=2, cpus=2, sampler=lambda: next(samples))
    torch.set_num_threads(2)
    state = type("State", (), {"global_step": 0})()
    callback.on_train_begin(None, state, None)
    seen = []
    for step in range(1, 5):
        state.global_step = step
        callback.on_step_end(None, state, None)
        seen.append(torch.get_num_threads())
    assert seen == [2, 1, 1, 2]
    assert callback.summary() == "adaptive: 2 for 2 steps, 1 for 2 steps"


def test_read_sample_on_linux():
    sample = read_sample()
    if sample is None:
        pytest.skip("no /proc/stat here")
    assert sample.busy > 0 and sample.own > 0 and sample.wall > 0


def test_missing_proc_stat_leaves_threads_alone(restore_threads, tmp_path):
    assert read_sample(tmp_path / "no-such-file") is None
    torch.set_num_threads(1)
    callback = AdaptiveThreadsCallback(check_steps=1, cpus=2, sampler=lambda: None)
    callback.on_train_begin(None, None, None)
    assert callback.adapt() == 1


def test_runtime_arguments_are_checked():
    with pytest.raises(ValueError, match="torch_threads"):
        RuntimeArguments(torch_threads=0)
    with pytest.raises(ValueError, match="thread_check_steps"):
        RuntimeArguments(thread_check_steps=0)

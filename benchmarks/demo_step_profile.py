"""Where a step of the demo's training goes: ms per step and share of each phase, in CPU and wall time.

The demo's trainer is built exactly as ``recipes/pretrain.py`` builds it (its ``parse_arguments`` and ``setup``,
with the overrides below), then ``--warmup`` steps run untimed and the next ``--steps`` are split into phases by
wrapping the Trainer's own methods on the instance (nothing in the package changes):

* data: the loader and the collator (``get_batch_samples`` less the target count);
* forward: the model's forward less the loss head; loss: the chunked head (``linear_cross_entropy``: its
  forward *and* its gradients, computed in the forward pass); backward: ``accelerator.backward``;
* optimizer: ``optimizer.step`` (Muon + AdamW), the scheduler and ``zero_grad``;
* the Trainer's own: grad clipping, counting targets, ``num_input_tokens_seen``, FLOPs, callbacks, logging,
  the step's bookkeeping; ``other`` is the step's time outside every named phase.

CPU time is the process's (``time.process_time``: it moves far less than wall time when other jobs share the cores,
though cache contention still shows); wall time is what the run waits. Then the arithmetic floor: the same model (its weights before training) and the first batch in a
plain loop: forward with the chunked head, backward, Muon + AdamW step, ``zero_grad``, no Trainer; the ratio
"Trainer step / bare step" is the overhead left to remove.

    python benchmarks/demo_step_profile.py                                  # 10 + 200 steps, 1 thread
    python benchmarks/demo_step_profile.py --steps 100 --torch-profile 25   # plus torch.profiler's top 25 ops
    python benchmarks/demo_step_profile.py -- --logging_steps 1             # any recipe flag after --
"""

from __future__ import annotations

import argparse
import copy
import resource
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import TrainerCallback

from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy
from hf_lmobj.losses.targets import count_targets, objective_targets
from hf_lmobj.models.head import capture_head, linear_head
from hf_lmobj.optim.arguments import optimizer_cls_and_kwargs
from hf_lmobj.recipes.pretrain import parse_arguments, setup
from hf_lmobj.trainer.compute_loss import model_inputs
from hf_lmobj.trainer.resume import plan_resume

CONFIG = "recipes/configs/causal/demo.yaml"
#: The recipe flags of a training-only run: a fixed step count, no evaluation, no baselines.
OVERRIDES = ("--max_train_minutes", "null", "--disable_tqdm", "true", "--eval_strategy", "no",
             "--ngram_orders", "none", "--report_to", "none")  # fmt: skip
#: Table rows in step order: (phase, what it is).
PHASES = (
    ("data", "loader + collator"),
    ("forward", "model forward, head excluded"),
    ("loss", "chunked head: loss and its grads"),
    ("backward", "accelerator.backward"),
    ("optimizer", "Muon + AdamW step"),
    ("scheduler+zero_grad", "lr_scheduler.step, zero_grad"),
    ("grad clip", "clip_grad_norm_ (+ its .item)"),
    ("count targets", "_get_num_items_in_batch"),
    ("tokens seen", "_track_num_input_tokens"),
    ("flos", "floating_point_ops"),
    ("callbacks", "callback_handler events"),
    ("logging", "_maybe_log_save_evaluate"),
    ("step bookkeeping", "training_step less loss/backward"),
    ("other", "outside every named phase"),
)


class PhaseClock:
    """Exclusive wall and CPU seconds per phase: a phase inside another is taken out of its parent's time."""

    def __init__(self) -> None:
        self.active = False
        self.totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self._stack: list[list[float]] = []
        self.window: list[float] = [0.0, 0.0]
        self.faults = 0  # minor page faults in the window (fresh memory touched: a sign of allocations not reused)

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.active:
            yield
            return
        wall0, cpu0 = self.now()
        self._stack.append([0.0, 0.0])
        try:
            yield
        finally:
            self._close(name, wall0, cpu0)

    def _close(self, name: str, wall0: float, cpu0: float) -> None:
        wall1, cpu1 = self.now()
        inner = self._stack.pop()
        wall, cpu = wall1 - wall0, cpu1 - cpu0
        if not self.active:  # the window closed inside this call: its end lies outside the window
            return
        total = self.totals[name]
        total[0] += wall - inner[0]
        total[1] += cpu - inner[1]
        if self._stack:
            self._stack[-1][0] += wall
            self._stack[-1][1] += cpu

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time every call of ``owner.attribute`` (set on the instance) as ``name``."""
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


class WindowCallback(TrainerCallback):
    """Starts the clock (and ``profiler``) after step ``warmup``, stops them ``steps`` steps later (``on_step_end``)."""

    def __init__(self, clock: PhaseClock, warmup: int, steps: int, trainer, profiler=None) -> None:
        self.clock, self.warmup, self.steps, self.trainer, self.profiler = clock, warmup, steps, trainer, profiler

    def on_train_begin(self, args, state, control, **kwargs):
        trainer, clock = self.trainer, self.clock
        clock.wrap(trainer.optimizer, "step", "optimizer")
        clock.wrap(trainer.lr_scheduler, "step", "scheduler+zero_grad")
        clock.wrap(trainer.model, "zero_grad", "scheduler+zero_grad")
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.clock.faults = -resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            self.clock.window = [-t for t in self.clock.now()]
            self.clock.active = True
            if self.profiler is not None:
                self.profiler.start()
        elif state.global_step == self.warmup + self.steps and self.clock.active:
            self.clock.window = [a + b for a, b in zip(self.clock.window, self.clock.now())]
            self.clock.faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            self.clock.active = False
            if self.profiler is not None:
                self.profiler.stop()
        return control


def instrument(trainer, clock: PhaseClock, first_batch: list) -> None:
    """Wrap the Trainer's per-step methods on the instance (see the module docstring)."""
    get_batch_samples = trainer.get_batch_samples

    def batches(epoch_iterator, num_batches, device):
        with clock.phase("data"):
            out = get_batch_samples(epoch_iterator, num_batches, device)
        if not first_batch and out[0]:
            first_batch.append(copy.deepcopy(out[0][0]))
        return out

    trainer.get_batch_samples = batches
    clock.wrap(trainer, "_get_num_items_in_batch", "count targets")
    clock.wrap(trainer, "training_step", "step bookkeeping")
    clock.wrap(trainer, "compute_loss", "forward")
    clock.wrap(trainer.accelerator, "backward", "backward")
    clock.wrap(trainer, "_track_num_input_tokens", "tokens seen")
    clock.wrap(trainer, "floating_point_ops", "flos")
    clock.wrap(trainer, "_clip_grad_norm", "grad clip")
    clock.wrap(trainer, "_get_grad_norm", "grad clip")
    clock.wrap(trainer.callback_handler, "call_event", "callbacks")
    clock.wrap(trainer, "_maybe_log_save_evaluate", "logging")
    head_loss_fn = trainer._head_loss_fn

    def timed_head_loss_fn(*args: Any, **kwargs: Any):
        fn = head_loss_fn(*args, **kwargs)

        def loss(hidden: torch.Tensor) -> torch.Tensor:
            with clock.phase("loss"):
                return fn(hidden)

        return loss

    trainer._head_loss_fn = timed_head_loss_fn


def bare_step_seconds(model, batch: dict, optimizer_factory, steps: int, warmup: int = 3) -> tuple[float, float]:
    """(wall, CPU) seconds per step of forward + chunked loss + backward + optimizer + zero_grad, no Trainer."""
    factory, kwargs = optimizer_factory
    optimizer = factory()(model, **kwargs)
    model.train()
    targets = objective_targets("causal", batch)
    count = count_targets("causal", batch)
    feed = model_inputs("causal", batch, model)
    head = linear_head(model)

    def step() -> None:
        loss_fn = lambda hidden: linear_cross_entropy(hidden, head.weight, targets, num_items_in_batch=count)  # noqa: E731
        with capture_head(head, loss_fn) as got:
            model(**feed)
        got[0].backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    wall0, cpu0 = PhaseClock.now()
    for _ in range(steps):
        step()
    wall1, cpu1 = PhaseClock.now()
    return (wall1 - wall0) / steps, (cpu1 - cpu0) / steps


def table(clock: PhaseClock, steps: int, bare: tuple[float, float] | None) -> str:
    wall_total, cpu_total = clock.window
    named_wall = sum(v[0] for v in clock.totals.values())
    named_cpu = sum(v[1] for v in clock.totals.values())
    rows = {name: tuple(v) for name, v in clock.totals.items()}
    rows["other"] = (wall_total - named_wall, cpu_total - named_cpu)
    lines = [f"{'phase':<22}{'what':<36}{'CPU ms':>9}{'share':>8}{'wall ms':>10}{'share':>8}"]
    for name, what in PHASES:
        wall, cpu = rows.pop(name, (0.0, 0.0))
        lines.append(f"{name:<22}{what:<36}{1e3 * cpu / steps:9.2f}{cpu / cpu_total:8.1%}"
                     f"{1e3 * wall / steps:10.2f}{wall / wall_total:8.1%}")  # fmt: skip
    for name, (wall, cpu) in rows.items():  # a phase PHASES does not name (none expected)
        lines.append(f"{name:<58}{1e3 * cpu / steps:9.2f}{cpu / cpu_total:8.1%}{1e3 * wall / steps:10.2f}")
    lines.append(f"{'step (Trainer)':<58}{1e3 * cpu_total / steps:9.2f}{'':8}{1e3 * wall_total / steps:10.2f}")
    lines.append(f"{'minor page faults per step':<58}{clock.faults / steps:9.0f}")
    if bare is not None:
        lines.append(f"{'bare step (no Trainer)':<58}{1e3 * bare[1]:9.2f}{'':8}{1e3 * bare[0]:10.2f}")
        lines.append(f"{'Trainer step / bare step':<58}{cpu_total / steps / bare[1]:9.2f}{'':8}"
                     f"{wall_total / steps / bare[0]:10.2f}")  # fmt: skip
    return "\n".join(lines)


def parse_cli(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=CONFIG, help="the recipe config (default the demo's)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (--torch_threads of the recipe)")
    parser.add_argument("--bare-steps", type=int, default=50, help="steps of the bare loop (0: skip it)")
    parser.add_argument("--torch-profile", type=int, default=0, metavar="K",
                        help="also run the window under torch.profiler and print its top K ops by self CPU time")  # fmt: skip
    parser.add_argument("--shapes", action="store_true", help="with --torch-profile: one row per op and input shapes")
    parser.add_argument("recipe_flags", nargs="*", help="more recipe flags, after --")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> None:
    cli, extra = parse_cli(argv)
    torch.set_num_threads(cli.threads)
    warnings.filterwarnings("ignore", message="Seems like `optimizer.step\\(\\)` has been overridden")  # our timer
    with tempfile.TemporaryDirectory(prefix="demo_step_profile_") as output_dir:
        profile(cli, extra, output_dir)


def profile(cli: argparse.Namespace, extra: list[str], output_dir: str) -> None:
    """Build the demo's trainer, train ``warmup + steps`` steps, print the table (and the bare step, the ops)."""
    flags = ["--config", cli.config, *OVERRIDES, "--torch_threads", str(cli.threads),
             "--max_steps", str(cli.warmup + cli.steps), "--output_dir", output_dir, *cli.recipe_flags, *extra]  # fmt: skip
    args = parse_arguments(flags)
    run = setup(args, plan_resume(args.training, args.resume, needs_data_state=True))
    trainer = run.trainer
    initial_model = copy.deepcopy(trainer.model)
    clock, first_batch = PhaseClock(), []
    instrument(trainer, clock, first_batch)
    profiler = None
    if cli.torch_profile:
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=cli.shapes)
    trainer.add_callback(WindowCallback(clock, cli.warmup, cli.steps, trainer, profiler))
    trainer.train()
    bare = None
    if cli.bare_steps:
        bare = bare_step_seconds(initial_model, first_batch[0], optimizer_cls_and_kwargs(args.optimizer, args.training),
                                 cli.bare_steps)  # fmt: skip
    print(f"\n{cli.config}: {cli.steps} steps after {cli.warmup}, {torch.get_num_threads()} torch thread(s), "
          f"{args.training.per_device_train_batch_size} rows x {args.data.max_length} tokens"
          f"{' (under torch.profiler: slower)' if profiler else ''}")  # fmt: skip
    print(table(clock, cli.steps, bare))
    if profiler is not None:
        averages = profiler.key_averages(group_by_input_shape=cli.shapes)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=cli.torch_profile, max_name_column_width=40))


if __name__ == "__main__":
    main()

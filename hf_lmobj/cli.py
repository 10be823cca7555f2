"""The ``hf-lmobj`` command line: one subcommand per recipe, the rest of the command line handed to it unchanged.

    hf-lmobj pretrain --config causal/demo --max_steps 3 --output_dir out/quick

``hf-lmobj --help`` lists the subcommands, each described by the first paragraph of its recipe's docstring;
``hf-lmobj <command> --help`` shows that recipe's own flags. Config names resolve as in the recipes
(``causal/demo`` is a shipped config, found from any directory). On several processes:
``accelerate launch -m hf_lmobj.cli pretrain --config causal/demo``; the recipes themselves still launch as
before (``accelerate launch -m hf_lmobj.recipes.pretrain ...``). A recipe is imported only when its command runs:
the core never imports the recipes, and ``hf-lmobj --help`` needs none of their extras.

Example:
    >>> COMMANDS["finetune"], summary("generate")
    ('finetune_lora', 'Print samples from a trained causal LM with temperature / top-k / top-p / min-p sampling.')
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

#: Subcommand -> the recipe module it runs (``hf_lmobj.recipes.<module>``, ``recipes/<module>.py`` in a clone).
COMMANDS: dict[str, str] = {
    "pretrain": "pretrain",
    "tokenize": "tokenize_corpus",
    "score": "score",
    "generate": "generate",
    "finetune": "finetune_lora",
    "classify": "finetune_classifier",
}
PROG = "hf-lmobj"


def summary(command: str) -> str:
    """The first paragraph of the docstring of ``command``'s recipe, on one line; read from its source, not imported.

    Raises:
        ValueError: the recipe has no docstring (every shipped recipe has one).
    """
    module = f"hf_lmobj.recipes.{COMMANDS[command]}"
    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    doc = ast.get_docstring(ast.parse(source)) if source else None
    if not doc:
        raise ValueError(f"{module} has no docstring: its first paragraph is the '{PROG} {command}' description")
    return " ".join(doc.split("\n\n")[0].split())


def parser() -> argparse.ArgumentParser:
    """The parser of the subcommand alone (the first argument); what follows it is the recipe's."""
    found = argparse.ArgumentParser(
        prog=PROG,
        description="Language-modeling objectives for the Hugging Face stack: the recipes as commands.",
        epilog=f"'{PROG} <command> --help' shows the recipe's own flags. Several processes: "
        f"accelerate launch -m hf_lmobj.cli <command> ...",
    )
    commands = found.add_subparsers(dest="command", metavar="<command>", required=True, title="commands")
    for command in COMMANDS:
        commands.add_parser(command, help=summary(command), add_help=False)
    return found


def run(command: str, argv: Sequence[str]) -> object:
    """Run ``command``'s recipe on ``argv`` (its ``main(argv)``) and return what the recipe returns.

    While it runs, ``sys.argv[0]`` is ``hf-lmobj <command>``, so that the recipe's usage line names the command.

    Raises:
        ModuleNotFoundError: a module the recipe needs is not installed; the message gives the install command.
    """
    try:
        recipe = importlib.import_module(f"hf_lmobj.recipes.{COMMANDS[command]}")
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] == "hf_lmobj":
            raise
        raise ModuleNotFoundError(
            f"'{PROG} {command}' needs {error.name!r}, which is not installed; the recipes' extras install with "
            "pip install 'hf_lmobj[recipes]' (pip install '.[recipes]' in a clone)",
            name=error.name,
        ) from error
    program, sys.argv[0] = sys.argv[0], f"{PROG} {command}"
    try:
        return recipe.main(list(argv))
    finally:
        sys.argv[0] = program


def refusal(first: str | None) -> str:
    """Why ``first`` (the first argument, None when there is none) is no command, with the valid ones."""
    choices = f"choose from {', '.join(COMMANDS)} ('{PROG} --help' describes each)"
    if first is None:
        return f"no command given; {choices}"
    if first.startswith("-"):
        return f"{first} comes before the command; give the command first ({PROG} pretrain {first} ...); {choices}"
    close = difflib.get_close_matches(first, COMMANDS, n=1)
    return f"unknown command {first!r}" + (f" (did you mean {close[0]}?)" if close else "") + f"; {choices}"


def main(argv: Sequence[str] | None = None) -> int:
    """``hf-lmobj <command> [recipe arguments]`` (default: ``sys.argv[1:]``); returns the exit status, 0.

    An unknown or missing command, or an option before the command, exits with status 2 and an argparse message
    naming the valid commands.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    found = parser()
    if not args or args[0] not in (*COMMANDS, "-h", "--help"):
        found.error(refusal(args[0] if args else None))
    run(found.parse_args(args[:1]).command, args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())

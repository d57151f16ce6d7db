"""`healtrl inspect`: per-token entropy views of sampled completions (`healtrl.views.inspection`), from the command line."""

from __future__ import annotations

import argparse
import sys

from healtrl.views.entropy import DEFAULT_MAX_ENTROPY, write_outputs
from healtrl.views.inspection import InspectError, inspect
from healtrl.views.inspection import __doc__ as INSPECT_DOC

from .common import RaisingParser, add_version_option


class _Parser(RaisingParser):
    error_class = InspectError  # reported like the inspection's own errors, exit code 2


def _build_parser(prog: str) -> _Parser:
    p = _Parser(
        prog=prog, description=INSPECT_DOC.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True, help="Hub id, local folder/checkpoint, or healtrl-toy/... or "
                   "healtrl-offline/... name (e.g. healtrl-offline/SmolLM2-135M-Instruct, no Hub needed).")  # fmt: skip
    p.add_argument("--model2", default=None, help="A second model, sampled on the same prompts and seed.")
    p.add_argument("--prompts", required=True, help="task:NAME, a dataset file/folder with a `prompt` column, or a "
                   ".txt file with one prompt per line.")  # fmt: skip
    p.add_argument(
        "--raw_prompt", action="store_true", help="Use each line of a .txt file as it is (no chat template)."
    )
    p.add_argument("--num_prompts", type=int, default=8, help="First N prompts (default 8).")
    p.add_argument("--k", type=int, default=4, help="Completions per prompt (default 4).")
    p.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature, > 0 (default 1.0).")
    p.add_argument("--max_new_tokens", type=int, default=256, help="Most tokens per completion (default 256).")
    p.add_argument("--seed", type=int, default=0, help="Sampling seed (default 0).")
    p.add_argument("--max_entropy", type=float, default=DEFAULT_MAX_ENTROPY, help="Top of the colour scale in nats.")
    p.add_argument("--high_entropy", type=float, default=None, help="Threshold of the PNG's high-entropy token panel "
                   "in nats (default: the 80th percentile of the page's token entropies, i.e. the top 20%% tokens).")  # fmt: skip
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:1, ...")
    p.add_argument("--trust_remote_code", action="store_true")
    p.add_argument("--no_progress", action="store_true", help="No progress bars.")
    p.add_argument("--output_dir", required=True, help="Folder for inspect.html, inspect_summary.png, inspect.json.")
    add_version_option(p)
    return p


def inspect_main(argv: list[str] | None = None, prog: str = "healtrl inspect") -> int:
    """`healtrl inspect ...`; exit code 0 on success, 2 on a bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        _build_parser(prog).print_help()
        return 0
    if "--version" in argv:  # before the required options are checked
        from .common import version_text

        print(version_text())
        return 0
    try:
        args = _build_parser(prog).parse_args(argv)
        from .common import configure_threads

        configure_threads()
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        if args.no_progress:
            hf_logging.disable_progress_bar()
        try:
            runs = inspect(args, progress=not args.no_progress)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        paths = write_outputs(runs, args.output_dir, args.max_entropy, args.high_entropy)
    except InspectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        flat = [h for g in run.groups for c in g.completions for h in c.entropies]
        rewards = [c.reward for g in run.groups for c in g.completions if c.reward is not None]
        line = f"{run.model}: {len(flat)} tokens, mean entropy {sum(flat) / max(len(flat), 1):.4f} nats"
        if rewards:
            line += f", mean reward {sum(rewards) / len(rewards):.3f}"
        print(line)
    print("Wrote " + ", ".join(paths))
    return 0

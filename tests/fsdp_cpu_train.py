"""train.py under accelerate's FSDP path on CPU tensors (tests/fsdp_cpu.py explains the one patch).

    accelerate launch --config_file configs/accelerate/fsdp2_cpu2.yaml tests/fsdp_cpu_train.py \
        --config configs/toy_grpo.yaml --use_cpu false --bf16 false --max_steps 2

With HEALTRL_TEST_FSDP_RECORD=DIR set, each rank writes DIR/rank{r}.json: the distributed type and the type of the
LM head's weight after accelerate wrapped the model (a DTensor when FSDP2 sharded it).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fsdp_cpu import accelerator_paths_on_cpu  # noqa: E402


def record_fsdp2(folder: str) -> None:
    import accelerate.accelerator as acc

    original = acc.fsdp2_prepare_model

    def prepare(accelerator, model):
        model = original(accelerator, model)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank{accelerator.process_index}.json"), "w") as f:
            json.dump({"distributed_type": str(accelerator.distributed_type),
                       "num_processes": accelerator.num_processes,
                       "head_type": type(model.get_output_embeddings().weight).__name__}, f)  # fmt: skip
        return model

    acc.fsdp2_prepare_model = prepare


if __name__ == "__main__":
    accelerator_paths_on_cpu()
    if os.environ.get("HEALTRL_TEST_FSDP_RECORD"):
        record_fsdp2(os.environ["HEALTRL_TEST_FSDP_RECORD"])
    from healtrl.cli import train_main
    from train import shut_down_process_group

    try:
        code = train_main(sys.argv[1:])
    finally:
        shut_down_process_group()
    sys.exit(code)

"""train.py under accelerate's FSDP or DeepSpeed path on CPU tensors (tests/fsdp_cpu.py explains the one patch).

    accelerate launch --config_file configs/accelerate/fsdp2_cpu2.yaml tests/fsdp_cpu_train.py \
        --config configs/toy_grpo.yaml --use_cpu false --bf16 false --max_steps 2
    DS_ACCELERATOR=cpu accelerate launch --config_file configs/accelerate/deepspeed_zero3_cpu2.yaml \
        tests/fsdp_cpu_train.py --config configs/toy_grpo.yaml --use_cpu false --bf16 false --max_steps 2

With HEALTRL_TEST_FSDP_RECORD=DIR set, each rank writes DIR/rank{r}.json once accelerate prepared the policy: the
distributed type, the number of processes, the type of the LM head's weight (a DTensor when FSDP2 sharded it) and
whether ZeRO-3 partitioned it.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fsdp_cpu import accelerator_paths_on_cpu  # noqa: E402


def record_prepared_model(folder: str) -> None:
    """After accelerate prepared the policy, write what it became (see the module docstring)."""
    import accelerate

    original = accelerate.Accelerator.prepare

    def prepare(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if self._models:
            weight = self.unwrap_model(self._models[0]).get_output_embeddings().weight
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"rank{self.process_index}.json"), "w") as f:
                json.dump({"distributed_type": str(self.distributed_type), "num_processes": self.num_processes,
                           "head_type": type(weight).__name__,
                           "head_partitioned": hasattr(weight, "ds_id")}, f)  # fmt: skip
        return result

    accelerate.Accelerator.prepare = prepare


if __name__ == "__main__":
    accelerator_paths_on_cpu()
    if os.environ.get("HEALTRL_TEST_FSDP_RECORD"):
        record_prepared_model(os.environ["HEALTRL_TEST_FSDP_RECORD"])
    from healtrl.cli import train_main
    from train import shut_down_process_group

    try:
        code = train_main(sys.argv[1:])
    finally:
        shut_down_process_group()
    sys.exit(code)

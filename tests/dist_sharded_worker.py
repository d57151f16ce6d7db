"""Worker of the sharded-training tests: FSDP2 (TRL's accelerate path, CPU tensors, gloo), DDP as its reference, and
DeepSpeed ZeRO-3 (DeepSpeed's CPU accelerator).

Run: torchrun --nproc_per_node 2 tests/dist_sharded_worker.py {fsdp2,ddp,fsdp2_resume,zero3} OUTPUT_DIR
(zero3 needs `pip install deepspeed` and DS_ACCELERATOR=cpu.)
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import set_seed

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODE = sys.argv[1]
if MODE in ("fsdp2", "fsdp2_resume", "zero3"):
    from healtrl.utils.distributed import accelerator_paths_on_cpu  # noqa: E402

    accelerator_paths_on_cpu()

from healtrl import (  # noqa: E402
    AERConfig,
    AERTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    HEALConfig,
    HEALTrainer,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.toy.tasks import toy_reward  # noqa: E402
from healtrl.toy.tokenizer import build_tokenizer  # noqa: E402
from healtrl.trainers._trl import lm_head as bridge  # noqa: E402
from tests.helpers import (  # noqa: E402
    build_trainer,
    digit_reward,
    grpo_kwargs,
    shut_down_process_group,
    tiny_dataset,
    tiny_model,
)

# FSDP2 vs DDP: one method whose loss needs the kernel's power sums, one that does not.
SHARDED_RUNS = {
    "opefo_exact": (OPEFOTrainer, OPEFOConfig, dict(entropy_change_estimator="exact")),
    "aer": (AERTrainer, AERConfig, dict(alpha_init=0.01, tau=1.0)),
}
# ZeRO-3: every trainer, with a checkpoint at step 2 and a resume from it to step 3.
ZERO3_RUNS = {
    "opefo": (OPEFOTrainer, OPEFOConfig, dict()),
    "aer": (AERTrainer, AERConfig, dict(alpha_init=0.01, tau=1.0)),
    "posadv": (PosAdvTrainer, PosAdvConfig, dict(entropy_threshold=4.6)),
    "clip_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, dict(entropy_method="clip_cov", clip_cov_ratio=0.05)),
    "heal": (HEALTrainer, HEALConfig, dict(mixing="fixed_share", general_share=0.5)),
}
FSDP = dict(
    use_cpu=False,
    fsdp=True,
    fsdp_config={"fsdp_version": 2, "reshard_after_forward": True, "state_dict_type": "FULL_STATE_DICT",
                 "transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"]},
)  # fmt: skip
ZERO3 = dict(
    use_cpu=False,
    deepspeed={
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
        # Explicit: transformers fills "auto" with its own world size, computed before DeepSpeed's process group.
        "train_micro_batch_size_per_gpu": 8, "train_batch_size": 16,
        "gradient_accumulation_steps": 1, "gradient_clipping": "auto",
    },
)  # fmt: skip
EXTRA = {"fsdp2": FSDP, "zero3": ZERO3, "ddp": {}}


def count_kernel_calls() -> list:
    """Record each call of healtrl's kernel through the bridge (True when it computed power sums)."""
    calls = []
    kernel = bridge.fused_logprob_entropy

    def counted(*args, **kwargs):
        calls.append(bool(kwargs.get("power_sums", False)))
        return kernel(*args, **kwargs)

    bridge.fused_logprob_entropy = counted
    return calls


def make(name, spec, out, mode, **cfg):
    tcls, ccls, kw = spec
    if tcls is HEALTrainer:
        set_seed(0)
        return HEALTrainer(
            model=tiny_model(), reward_funcs=[toy_reward, digit_reward],
            args=HEALConfig(**grpo_kwargs(out, **EXTRA[mode], **kw, **cfg)),
            train_dataset=tiny_dataset(16), general_dataset=tiny_dataset(16, family="compare", seed=1),
            processing_class=build_tokenizer(),
        )  # fmt: skip
    return build_trainer(tcls, ccls, out, **EXTRA[mode], **kw, **cfg)


def sharded(mode: str, output_dir: str) -> dict:
    calls = count_kernel_calls()
    report = {}
    for name, spec in SHARDED_RUNS.items():
        out = os.path.join(output_dir, name)
        calls.clear()
        trainer = make(name, spec, out, mode, per_device_train_batch_size=8, max_steps=2, ddp_backend="gloo")
        trainer.train()
        head = trainer.model.get_output_embeddings().weight
        trainer.save_model(out)
        report[name] = {
            "distributed_type": str(trainer.accelerator.distributed_type),
            "head_type": type(head).__name__,
            "kernel_calls": len(calls),
            "power_sum_calls": sum(calls),
            "history": trainer.state.log_history,
        }
    return report


def fsdp2_resume(output_dir: str) -> dict:
    """AER under FSDP2: checkpoint at step 2 (sharded model and optimizer), resume from it to step 3."""
    spec, out = SHARDED_RUNS["aer"], os.path.join(output_dir, "aer_resume")
    common = dict(per_device_train_batch_size=8, ddp_backend="gloo", save_strategy="steps", save_steps=2)
    trainer = make("aer", spec, out, "fsdp2", max_steps=3, **common)
    trainer.train()
    resumed = make("aer", spec, out + "-resumed", "fsdp2", max_steps=3, **common)
    resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
    return {
        "history": trainer.state.log_history,
        "resumed_history": resumed.state.log_history,
        "method_state": trainer.method_state(),
        "resumed_method_state": resumed.method_state(),
        "checkpoint_files": sorted(os.listdir(os.path.join(out, "checkpoint-2"))),
    }


def zero3(output_dir: str) -> dict:
    report = {}
    common = dict(per_device_train_batch_size=8, ddp_backend="gloo", save_strategy="steps", save_steps=2)
    for name, spec in ZERO3_RUNS.items():
        out = os.path.join(output_dir, name)
        trainer = make(name, spec, out, "zero3", max_steps=3, **common)
        trainer.train()
        full = trainer.state.log_history
        trainer.save_model(out)
        resumed = make(name, spec, out + "-resumed", "zero3", max_steps=3, **common)
        resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
        report[name] = {
            "distributed_type": str(trainer.accelerator.distributed_type),
            "history": full,
            "resumed_history": resumed.state.log_history,
            "method_state": trainer.method_state(),
            "resumed_method_state": resumed.method_state(),
        }
    # The exact estimator needs the kernel's power sums, which ZeRO-3's partitioned head cannot give: refused.
    trainer = make("opefo_exact", SHARDED_RUNS["opefo_exact"], os.path.join(output_dir, "exact"), "zero3",
                   max_steps=1, per_device_train_batch_size=8, ddp_backend="gloo")  # fmt: skip
    try:
        trainer.train()
        report["exact_refused"] = None
    except NotImplementedError as err:
        report["exact_refused"] = str(err)
    return report


def main(mode: str, output_dir: str) -> None:
    torch.set_num_threads(1)
    output_dir = os.path.join(output_dir, mode)
    if mode == "zero3":
        report = zero3(output_dir)
    elif mode == "fsdp2_resume":
        report = fsdp2_resume(output_dir)
    else:
        report = sharded(mode, output_dir)
    import torch.distributed as dist

    with open(os.path.join(output_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    shut_down_process_group()

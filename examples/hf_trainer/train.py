"""A Hugging Face Trainer job, tunable by autotune: a GPT-2-shaped causal LM built from a config
(random weights, nothing downloaded) learns the bytes of the Python standard library.

Standalone:            python train.py
With a tuned recipe:   AUTOTUNE_RECIPE=recipe.yaml python train.py
Tuned:                 autotune study --space space.yaml
"""

import sysconfig
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer

import autotune
from autotune.integrations import hf

BLOCK = 48


def read_stdlib(limit: int = 1_000_000) -> torch.Tensor:
    """The first `limit` bytes of the standard library's .py files, in sorted order."""
    out, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        out.append(path.read_bytes())
        size += len(out[-1])
        if size >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(out)[:limit]), dtype=torch.uint8).long()


class Windows(torch.utils.data.Dataset):
    """Windows of BLOCK bytes; GPT-2 shifts the labels itself."""

    def __init__(self, text: torch.Tensor) -> None:
        self.text = text

    def __len__(self) -> int:
        return len(self.text) // BLOCK - 1

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        w = self.text[i * BLOCK : (i + 1) * BLOCK]
        return {"input_ids": w, "labels": w}


trial = autotune.trial(steps=200, micro_batch=16, lr=3e-3)  # before the model and the data
config = GPT2Config(
    vocab_size=256,
    n_positions=BLOCK,
    n_embd=48,
    n_layer=2,
    n_head=2,
    bos_token_id=0,
    eos_token_id=0,
)
model = GPT2LMHeadModel(config)
args = hf.training_args(
    trial,
    output_dir="hf-out",
    report_to="none",
    save_strategy="no",
    disable_tqdm=True,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=Windows(read_stdlib()))
hf.attach(trainer, trial)
trainer.train()

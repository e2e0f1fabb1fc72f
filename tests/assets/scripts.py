"""Small training scripts that several test modules run as a user's job: the same job written
once. Each is the text of a script file (write it, then point `ProbeConfig.script` at it)."""

from __future__ import annotations


def hf_trainer_job(rows: int = 256, label_scale: str = "", after: str = "") -> str:
    """A Hugging Face Trainer job: a linear model regressing the sum of 4 features (times
    `label_scale`, e.g. " * 5": larger gradients) over `rows` samples, attached to the trial;
    `after`: lines run once it has trained."""
    data = (
        f'rows = [{{"x": v, "labels": v.sum(0, keepdim=True){label_scale}}} '
        f"for v in torch.randn({rows}, 4, generator=g)]"
    )
    return f"""
import torch
from transformers import Trainer
import autotune
from autotune.integrations import hf

trial = autotune.trial(steps=99, micro_batch=4)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x, labels):
        return {{"loss": torch.nn.functional.mse_loss(self.lin(x), labels)}}

g = torch.Generator().manual_seed(0)
{data}
trainer = Trainer(model=Net(), args=hf.training_args(trial), train_dataset=rows)
hf.attach(trainer, trial)
trainer.train()
{after}"""


#: A Lightning module `M` (a small MLP regressing a sum) whose optimizer and schedule are the
#: trial's (`lt.configure_optimizers`); the script defines `trial` and imports `lightning`,
#: `torch`, `F` (torch.nn.functional) and `lt` before it.
LIGHTNING_MODULE = """
class M(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    def training_step(self, batch, i):
        x, y = batch
        return F.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        return lt.configure_optimizers(trial, self.parameters())
"""

#: Its data (`data`: 1024 samples of 8 features) and the model (`model`).
LIGHTNING_DATA = """
g = torch.Generator().manual_seed(0)
x = torch.randn(1024, 8, generator=g)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
model = M()
"""

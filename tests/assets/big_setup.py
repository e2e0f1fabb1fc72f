"""Workload files (their source, to write into a test's folder) that need 800 MB: past a 600 MB
`AUTOTUNE_PROBE_MEMORY_MB`, far below a test machine's memory. `BIG_STEP` needs it in each
step's activations, `BIG_SETUP` in its model, before the first step."""

_TEMPLATE = """
import torch

class Big:
    name, size, default_lr, unstable_lr = "big", "tiny", 1e-3, 1e-1

    def build_model(self):
{build}
        return torch.nn.Linear(4, 1)

    def batches(self, micro_batch, seed):
        while True:
            yield (torch.ones(micro_batch, 4),)

    def eval_batches(self, micro_batch):
        return [(torch.ones(micro_batch, 4),)]

    def loss(self, model, batch):
{loss}

    def samples(self, batch):
        return int(batch[0].shape[0])

    def tokens(self, batch):
        return 0

def make(size="tiny"):
    return Big()
"""

BIG_STEP = _TEMPLATE.format(
    build="",
    loss="        n = batch[0].shape[0]\n"
    "        wide = model(batch[0]).expand(n, 200_000_000 // n)  # 800 MB of activations\n"
    "        return (wide * 1.0).pow(2).mean()",
)
BIG_SETUP = _TEMPLATE.format(
    build="        self.table = torch.ones(200_000_000)  # 800 MB before the first step",
    loss="        return model(batch[0]).pow(2).mean()",
)

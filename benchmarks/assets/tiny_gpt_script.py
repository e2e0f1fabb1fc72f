"""The built-in `tiny_gpt` workload trained by a user-style loop through `autotune.trial()`:
the same model, data stream, seed and step as the probe's loop (benchmarks/script_overhead.py)."""

import sys

import autotune
from autotune.probe.workload import resolve

size = sys.argv[1] if len(sys.argv) > 1 else "tiny"
workload = resolve("tiny_gpt", size)
trial = autotune.trial(steps=100, micro_batch=16, lr=3e-3)  # seeds, as the probe before its model
r, dev = trial.recipe, trial.device
model = workload.build_model().to(dev)
model.train()
opt, scaler = r.optimizer(p for p in model.parameters() if p.requires_grad), r.scaler(dev.type)
sched = r.scheduler(opt, trial.steps)
data = workload.batches(trial.micro_batch, trial.seed)
for step in range(trial.steps):
    total = 0.0
    for _ in range(r.accum_steps):
        batch = tuple(t.to(dev) for t in next(data))
        with r.autocast(dev.type):
            loss = workload.loss(model, batch) / r.accum_steps
        scaler.scale(loss).backward()
        total += loss.detach().float()
    grad_norm = r.clip_and_step(opt, scaler)
    sched.step()
    trial.report(step, loss=total, grad_norm=grad_norm)
    if trial.should_stop:
        break

"""The first-report rule of a training script run as a probe, and what a silent script forgot.

A script in a study must make its first `trial.report` within `ProbeConfig.first_report_s` of
its start (`budget.first_report_s` for the baseline; the study tightens it for the trials after,
`autotune.study.failures.first_report_s`). `FirstReport.watch` starts a thread that waits for the
first report; when the time runs out it notes why and sends SIGINT to the script's thread (which
wakes a sleep or a blocked wait), and `autotune.probe.script` turns the interrupt into a
`no_reports` failure. The message names the API the script forgot: `hf.attach` when it used
`hf.training_args` without it, the integration of the framework it imported, else
`trial.report`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

GUIDE = "see README: Your own training job"
HF = "autotune.integrations.hf"
GRACE_S = 30.0  # after the interrupt, how long the script may take to end before `on_stuck`


class FirstReport:
    """One script run's first-report watch, and which integration reports for it."""

    def __init__(self, rule: str | None = None) -> None:
        # why the limit is what it is and what lifts it, where the study's baseline rule set it
        # (`autotune.study.failures.first_report_rule`); None: budget.first_report_s did
        self.rule = rule
        self.trial_at_s: float | None = None  # when it called autotune.trial(), from its start
        self.integration: str | None = None  # "hf", "lightning": set by the integration
        self.attached = False  # the integration's reporting is attached
        self.reported = threading.Event()  # set by the first report
        self.stalled: str | None = None  # why the watch stopped the script
        self._lock = threading.Lock()  # held while the watch stops the script, or it ends
        self._over = False
        self._ended = threading.Event()

    def uses(self, integration: str, *, attached: bool = False) -> None:
        self.integration = integration
        self.attached = self.attached or attached

    def forgotten(self) -> str:
        """What the script must call to report, for a script that did not (the integration it
        began to use, else the framework it imported, else the trial API itself)."""
        if self.integration == "hf" and not self.attached:
            return (
                f"{HF}.training_args was used but {HF}.attach(trainer, trial) was never called: "
                "call it after Trainer(...), before trainer.train()"
            )
        if self.attached:
            return f"its {self.integration} integration is attached, but no optimizer step ended"
        lightning = "lightning" in sys.modules or "pytorch_lightning" in sys.modules
        # `import lightning` imports transformers too: its Trainer module says which one is used
        if "transformers" in sys.modules and not (lightning and hf_trainer_unused()):
            return (
                f"with a transformers Trainer, call {HF}.attach(trainer, trial) before "
                f"trainer.train() (and build its arguments with {HF}.training_args(trial, ...))"
            )
        if lightning:
            return (
                "with Lightning, build the Trainer as lightning.Trainer(**autotune.integrations."
                "lightning.trainer_kwargs(trial, ...)): its callback reports each step"
            )
        return "call trial.report(step, loss=...) after each optimizer step"

    def message(self, limit: float) -> str:
        raise_it = self.rule or "if the job needs longer to start, raise budget.first_report_s"
        if self.trial_at_s is None:
            return (
                f"the script did not call autotune.trial() within {limit:g} s of its start "
                f"({GUIDE}); {raise_it}"
            )
        return (
            f"no trial.report within {limit:g} s of the script's start (autotune.trial() at "
            f"{self.trial_at_s:.0f} s): {self.forgotten()}; {raise_it}"
        )

    def watch(
        self, limit: float, thread_id: int, on_stuck: Callable[[str], None] | None = None
    ) -> None:
        """Unless the first report comes within `limit` seconds (or the run ends), note why
        and interrupt the thread `thread_id` (the script's, the main thread) with SIGINT; if
        the run has still not ended GRACE_S later (a script that ignores the interrupt, or is
        stuck in native code), call `on_stuck(why)` (a probe process reports and leaves)."""

        def watchdog() -> None:
            if self.reported.wait(limit):
                return
            with self._lock:
                if self._over:
                    return
                self.stalled = self.message(limit)
                signal.pthread_kill(thread_id, signal.SIGINT)
            if on_stuck is not None and not self._ended.wait(GRACE_S):
                on_stuck(self.stalled)

        threading.Thread(target=watchdog, name="autotune-first-report", daemon=True).start()

    def end(self) -> None:
        """The run is over: the watch interrupts nothing from now on."""
        with self._lock:
            self._over = True
        self._ended.set()


def hf_trainer_unused() -> bool:
    """No Hugging Face Trainer was imported (its module `transformers.trainer` is loaded only
    when one is used), though transformers itself may be (Lightning imports it)."""
    return "transformers.trainer" not in sys.modules

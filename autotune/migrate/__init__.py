"""`autotune migrate RECIPE`: does a recipe tuned on one machine hold on this one?

Four parts, each a module: `differences` (the two fingerprints side by side, each difference
classed by what it can change), `ops` (this machine's op audit against the one the recipe
recorded), `holds` (the recipe and the baseline re-run here over seeds at the decided length,
judged with the paired verdict; the loss curve against the recorded one) and `knob_classes`
(hardware-bound against portable knobs: what a re-tune searches); `report` writes the Markdown
report and `run` ties them together.
"""

from __future__ import annotations

from autotune.migrate.run import migrate

__all__ = ["migrate"]

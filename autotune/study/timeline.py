"""Where a study's wall time goes: a timestamp at each of the driver's phases (the services
checked, MLflow's store and run made, Ray started, each trial asked for and recorded, the
phases after the screen, Ray stopped, the summary logged), appended as one JSON line each to the
file `AUTOTUNE_TIMELINE` names; nothing when it names none. `benchmarks/study_overhead.py` sets
it and splits the study's fixed cost with it.
"""

from __future__ import annotations

import json
import os
import time

#: The variable naming the file the marks are appended to (unset: no marks).
ENV = "AUTOTUNE_TIMELINE"


def mark(what: str) -> None:
    """Append `{"at": what, "t": the wall clock}` to the timeline file, if one is named."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"at": what, "t": time.time()}) + "\n")

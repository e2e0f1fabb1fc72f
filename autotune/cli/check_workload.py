"""`autotune check`: a workload that cannot be built (a size it does not have, a name no
factory answers to) is named with its key and line, as the space file's other errors are; the
study's check (`study.check_workload`) names only the section."""

from __future__ import annotations

from collections.abc import Sequence

from autotune import space as sp
from autotune.errors import WorkloadError


def check_workload_at_line(s: sp.Space, overrides: Sequence[str]) -> None:
    """`check_workload`, its error naming `workload.size` or `workload.name` (`script`) and the
    line it is on (or `from --set`)."""
    from autotune.study import check_workload

    try:
        check_workload(s)
    except WorkloadError as e:
        text = str(e).removeprefix(f"{s.source}: workload: ")
        field = "script" if s.workload.script else "name"
        if " has no size " in text:
            field = "size"
        key = f"workload.{field}"
        if any(o.split("=", 1)[0].strip() in ("workload", key) for o in overrides):
            where = " (from --set)"
        else:
            line = sp.key_line(s.source, ("workload", field))
            where = f" (line {line})" if line else ""
        raise WorkloadError(f"{s.source}: {key}{where}: {text}") from e

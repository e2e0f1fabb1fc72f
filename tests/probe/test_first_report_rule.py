"""The first-report failure names the rule that set its limit (black-box review bb5, B9): where
the study's "5x the baseline's time to its first report, at least 60 s" set it under
`budget.first_report_s`, raising that setting cannot help, and the message says so and what
lifts it; where `budget.first_report_s` set it, raising it is the advice."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.probe.config import ProbeConfig
from autotune.probe.script import ScriptFailure
from autotune.probe.script_run import run_script
from autotune.study import failures

HEAD = "import autotune, time\ntrial = autotune.trial(steps=99, micro_batch=3)\n"


def test_the_rule_is_named_only_where_the_baseline_set_the_limit() -> None:
    rule = failures.first_report_rule(150, 3.0)  # 5 x 3 s = 15 s, under the 60 s floor
    assert rule is not None
    assert "5x the baseline's 3 s to its first report, at least 60 s" in rule
    assert "budget.first_report_s, 150 s, only caps it" in rule
    assert "budget.first_report_s: null lifts" in rule
    assert "(budget.first_report_s, 300 s" in (failures.first_report_rule(300, 20.0) or "")
    assert failures.first_report_rule(300, 100.0) is None  # budget.first_report_s set it
    assert failures.first_report_rule(300, None) is None  # the baseline has not reported
    assert failures.first_report_rule(None, 3.0) is None  # no limit


@pytest.mark.parametrize("rule", [None, "the limit is 5x the baseline's ..."])
def test_the_failure_gives_the_rule_or_the_setting(tmp_path: Path, rule: str | None) -> None:
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent("time.sleep(60)\n"))
    cfg = ProbeConfig(
        workload="script:train.py",
        steps=4,
        script=str(script),
        first_report_s=1,
        first_report_rule=rule,
    )
    with pytest.raises(ScriptFailure) as e:
        run_script(cfg, lambda _m: None)
    text = str(e.value)
    assert text.startswith("no trial.report within 1 s of the script's start")
    if rule is None:
        assert text.endswith("if the job needs longer to start, raise budget.first_report_s")
    else:
        assert text.endswith(rule) and "raise budget.first_report_s" not in text

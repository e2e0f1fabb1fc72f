"""A study resumed with another `verify.seeds` says that its finished verification is kept as
it ran (a black-box review: `--set verify.seeds=5` on a finished study printed "verified with
seeds [1, 2, 3]" again without a word, while `verify.top_k` was honoured)."""

from __future__ import annotations

import optuna

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study.verification import seeds_kept


def test_a_verification_on_other_seeds_than_asked_is_said_once() -> None:
    space = sp.load("gradclip", ["verify.seeds=5"])
    study = optuna.create_study()
    assert seeds_kept(study, space) is None  # nothing verified yet
    study.set_user_attr(ua.verified_key(3), {"seeds": [1, 2, 3], "n": 3})
    study.set_user_attr(ua.verified_key(0), {"seeds": [1, 2, 3], "n": 3})
    said = seeds_kept(study, space)
    assert said is not None
    assert said.startswith(
        "verify.seeds is 5, but the configurations verified earlier ran on 3 seed(s) ([1, 2, 3])"
    ), said
    assert "--seeds 5" in said
    assert seeds_kept(study, sp.load("gradclip", ["verify.seeds=3"])) is None  # as asked

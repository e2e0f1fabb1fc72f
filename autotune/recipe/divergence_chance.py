"""Whether a difference in how many seeds diverged is beyond chance.

A seed diverges or not, and over three seeds one unlucky (or lucky) seed is a third of them: a
count compared exactly lets that one seed decide a verdict. Two tests judge the difference
against chance instead, at `LEVEL` (95% two-sided: one comparison, as a verdict's single metric
is judged, `paired.family_level`):

- Paired (the paired verdict: both sides ran the same seeds). Only the discordant seeds, those
  where exactly one side diverged, tell the two apart; with no difference each is as likely to
  be either side's, so the count on one side is binomial(discordant, 1/2): the sign test
  (`scipy.stats.binomtest`, two-sided). At 95% it needs `min_discordant()` (6) discordant seeds
  before any split is beyond chance: over 3 or 5 seeds no divergence difference is.
- Independent (a promise: the share the study's verification seeds diverged on against the
  share measured here, different seeds): Fisher's exact test on the 2x2 table
  (`scipy.stats.fisher_exact`, two-sided).

A side that diverged on every seed, where the other did not, keeps its own rule whatever the
test says: such a configuration does not train, which is no matter of chance.

scipy.stats is imported where a test runs, not with the module: it takes ~0.7 s, and this module
is imported by every process that reads a recipe (the CLI, the study's driver and its Ray
workers), most of which never compare divergence counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

LEVEL = 0.95
"""The confidence a divergence difference is judged at: two-sided, p < 1 - LEVEL."""


def beyond(p: float, level: float = LEVEL) -> bool:
    """Whether a two-sided p-value is beyond chance at `level`."""
    return p < 1.0 - level


def sign_test(mine_only: int, base_only: int) -> float:
    """The two-sided p of the sign test over the discordant seeds: `mine_only` diverged on this
    side alone, `base_only` on the other's alone. 1.0 with no discordant seed."""
    n = mine_only + base_only
    if n == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(mine_only, n, 0.5).pvalue)


def min_discordant(level: float = LEVEL) -> int:
    """The fewest discordant seeds whose most lopsided split (all on one side) is beyond chance
    at `level`: 6 at 95% (p = 2 / 2^6 = 0.031; 5 give 0.0625)."""
    n = 1
    while not beyond(sign_test(n, 0), level):
        n += 1
    return n


def share_test(k_a: int, n_a: int, k_b: int, n_b: int) -> float:
    """The two-sided p of Fisher's exact test: `k_a` of `n_a` seeds diverged on one side,
    `k_b` of `n_b` on the other (independent seeds). 1.0 when either side has no seed."""
    if n_a <= 0 or n_b <= 0:
        return 1.0
    table = [[k_a, n_a - k_a], [k_b, n_b - k_b]]
    from scipy.stats import fisher_exact

    return float(fisher_exact(table, alternative="two-sided").pvalue)


def paired_divergence(
    mine: Sequence[bool], base: Sequence[bool], level: float = LEVEL
) -> dict[str, Any]:
    """The paired verdict's `diverged`: per seed both ran, whether each side diverged (`mine`,
    `base`, in the same order). `pick_only`/`baseline_only`: the discordant seeds; `p`: the sign
    test's; `beyond_chance`; `every_seed`: `pick` or `baseline` when that side diverged on every
    seed and the other did not; `decides`: whether the difference decides the verdict (beyond
    chance, or the every-seed rule)."""
    n = len(mine)
    k, b = sum(mine), sum(base)
    mine_only = sum(1 for x, y in zip(mine, base, strict=True) if x and not y)
    base_only = sum(1 for x, y in zip(mine, base, strict=True) if y and not x)
    p = sign_test(mine_only, base_only)
    every = "pick" if n and k == n > b else "baseline" if n and b == n > k else None
    return {
        "n": n,
        "pick": k / n if n else None,
        "baseline": b / n if n else None,
        "pick_seeds": k,
        "baseline_seeds": b,
        "pick_only": mine_only,
        "baseline_only": base_only,
        "p": p,
        "level": level,
        "beyond_chance": beyond(p, level),
        "every_seed": every,
        "decides": k != b and (beyond(p, level) or every is not None),
    }


def decides(div: Mapping[str, Any]) -> bool:
    """Whether a paired verdict's `diverged` decides it. One recorded before the sign test (no
    `decides`: a recipe's study verdict from an older autotune) is judged from its counts alone,
    its seeds' split unknown: as if the baseline diverged only where this side did too (the
    fewest discordant seeds, the split most likely to be beyond chance)."""
    k, b, n = int(div["pick_seeds"]), int(div["baseline_seeds"]), int(div["n"])
    if k == b:
        return False
    if "decides" in div:
        return bool(div["decides"])
    return k == n or b == n or beyond(sign_test(max(k - b, 0), max(b - k, 0)))


def counts_text(div: Mapping[str, Any]) -> str:
    """`diverged on 1 of 3 seeds, the baseline on 0`."""
    return f"diverged on {div['pick_seeds']} of {div['n']} seeds, the baseline on " + str(
        div["baseline_seeds"]
    )


def chance_text(div: Mapping[str, Any]) -> str:
    """Why a divergence difference decides or not, in one clause: `beyond chance: p = 0.031`,
    `the baseline diverged on every seed`, `not beyond chance over 3 seeds (p = 1)`."""
    p = div.get("p")
    at = f"p = {p:.2g}" if p is not None else "by its counts"
    if div.get("beyond_chance") or (p is None and decides(div)):
        return f"beyond chance: {at}"
    every = div.get("every_seed")
    if every is not None:
        side = "it" if every == "pick" else "the baseline"
        return f"{side} diverged on every seed"
    least = min_discordant(float(div.get("level") or LEVEL))
    few = (
        f"; it takes {least} seeds that diverged on one side alone"
        if int(div.get("pick_only", 0)) + int(div.get("baseline_only", 0)) < least
        else ""
    )
    return f"not beyond chance over {div['n']} seeds ({at}{few})"


def promised_seeds(verified: Mapping[str, Any]) -> int | None:
    """How many seeds a promise's diverged share is over: its verification's seeds; without
    them, when none diverged, the seeds its interval is over (`n`: at least that many ran, none
    diverged; fewer seeds only make the test more cautious). None when not recorded."""
    seeds = verified.get("seeds")
    if seeds:
        return len(seeds)
    if verified.get("diverged_share") == 0.0 and verified.get("n"):
        return int(verified["n"])
    return None

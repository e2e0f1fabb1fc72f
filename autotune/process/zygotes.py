"""This process's zygotes (`autotune.process.zygote`): which one forks a probe of an environment,
how many it keeps, and when they end.

A study's Ray worker keeps one zygote, for the environment of its last trial: a trial of
another environment retires it (it leaves at once when idle) and starts its own. That is the
default, and what a worker needs: its trials mostly share one environment, and each zygote
holds a copy of torch's imports in memory.

A command that runs its probes on this machine one after another (`autotune verify`,
`autotune migrate`) opens `serving(environments)`: inside it `serving_now()` is true (its probes
ask for a forked process, `run_trial_process(spare=True)`), up to `environments` zygotes are
kept at once (the arms of an interleaved verification may differ in their environment knobs,
and alternating between them must not start a zygote per probe), and when the outermost
`serving` ends (the command done, failed or interrupted) every zygote is killed with the probes
it runs. Outside one, a library caller's probes are fresh processes, as before.

A zygote started by a thread dies when that thread ends (PR_SET_PDEATHSIG); the next probe of
its environment then finds it dead and starts another.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from autotune.process.channel import Channel
from autotune.process.zygote import NO_DEVICE_RC, ForkedProbe, Zygote

_Key = frozenset[tuple[str, str]]

_ZYGOTES: dict[_Key, Zygote] = {}  # this process's zygotes, the least recently used first
_LOCK = threading.RLock()
_REFUSED: set[_Key] = set()  # environments whose zygote would not serve
# How many zygotes are kept at once: 1, then one entry per open `serving` block (its number)
_KEEP = [1]


def _zygote_for(env: Mapping[str, str]) -> tuple[Zygote | None, bool]:
    """With `_LOCK` held: this process's zygote for `env` and whether it was there already.
    Otherwise one is started (None if that failed), after the least recently used are retired
    (alive: it leaves at once when idle) or reaped (dead) down to room for it."""
    key: _Key = frozenset(env.items())
    zygote = _ZYGOTES.pop(key, None)
    if zygote is not None and zygote.alive():
        _ZYGOTES[key] = zygote  # now the most recently used
        return zygote, True
    if zygote is not None:
        _discard(zygote)
    while _ZYGOTES and len(_ZYGOTES) >= _KEEP[-1]:
        oldest = _ZYGOTES.pop(next(iter(_ZYGOTES)))
        if oldest.alive():
            oldest.retire()
        else:
            _discard(oldest)
    if key in _REFUSED:  # it would refuse again: fresh processes only
        return None, False
    with contextlib.suppress(OSError):
        _ZYGOTES[key] = Zygote(env)
    return _ZYGOTES.get(key), False


def _discard(zygote: Zygote) -> None:
    """Kill `zygote`; remember its environment if it refused to serve (CUDA initialised)."""
    zygote.kill()
    if zygote.proc.returncode == NO_DEVICE_RC:
        _REFUSED.add(frozenset(zygote.env.items()))


def fork_from_zygote(
    env: Mapping[str, str], cfg_path: str, channel: Channel
) -> tuple[ForkedProbe | None, bool]:
    """(this trial's probe forked by this process's zygote for `env`, whether that zygote was
    there before this trial); (None, _) if the fork failed (the zygote is then discarded)."""
    with _LOCK:
        zygote, there = _zygote_for(env)
        child = zygote.fork(cfg_path, channel) if zygote is not None else None
        if child is None and zygote is not None:
            _discard(zygote)
            _ZYGOTES.pop(frozenset(env.items()), None)
        return child, there


def start_zygote(env: Mapping[str, str]) -> None:
    """Start a zygote for `env` unless one is there."""
    with _LOCK:
        _zygote_for(env)


def zygote_of(env: Mapping[str, str]) -> Zygote | None:
    """This process's zygote for `env`, if it keeps one (alive or not)."""
    with _LOCK:
        return _ZYGOTES.get(frozenset(env.items()))


def discard_zygote() -> None:
    """Kill every zygote of this process (and the probes they run)."""
    with _LOCK:
        zygotes = list(_ZYGOTES.values())
        _ZYGOTES.clear()
    for zygote in zygotes:
        zygote.kill()


def serving_now() -> bool:
    """Whether a `serving` block is open: probes run on this machine are forked by a zygote."""
    return len(_KEEP) > 1


@contextlib.contextmanager
def serving(environments: int = 1) -> Iterator[None]:
    """Probes forked by zygotes, up to `environments` of them kept at once, inside this block;
    every zygote killed when the outermost block ends (see the module's doc)."""
    with _LOCK:
        _KEEP.append(max(environments, _KEEP[-1]))  # an inner block keeps what its outer keeps
    try:
        yield
    finally:
        with _LOCK:
            _KEEP.pop()
            last = len(_KEEP) == 1
        if last:
            discard_zygote()

"""The probe's processes: a trial's process and its report channel, the zygote that forks it,
the DDP ranks and their supervisor.

`channel` (the private report channel and its one parser), `entry` (a probe process's entry,
and `run`, which chooses one process or DDP ranks), `env` (a probe process's environment),
`spawn` (how processes are started and killed), `launcher` (a trial's process, watched),
`zygote`, `ranks` and `supervisor` (DDP ranks, on one node).
"""

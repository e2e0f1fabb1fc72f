"""The built-in workloads, shipped as ``autotune.workloads``. Name them by their module:

    mlp        a small MLP learns a fixed random teacher; seconds-fast, for tests
    resnet     a small residual CNN classifies synthetic oriented gratings
    tiny_gpt   a small causal transformer models the bytes of the Python standard library

Each module has ``make(size="tiny")`` and ``SIZES``. The list that the resolver reads is
``autotune.probe.workload.BUILTINS``; importing this package registers nothing and imports no torch.
"""

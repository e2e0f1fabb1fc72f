"""The Ray address a study joins (`session.check_ray_address`) is named as the user gave it
(review: a plain `127.0.0.1:PORT` was shown as `(ray://127.0.0.1:PORT)`, the Ray Client scheme,
which is not what was given nor what is tried)."""

from __future__ import annotations

import pytest
from assets.studies import free_port

from autotune.errors import ClusterError
from autotune.study.session import check_ray_address


def test_a_plain_address_is_named_as_given_and_a_ray_client_one_too() -> None:
    port = free_port()  # nothing listens on it
    with pytest.raises(ClusterError) as plain:
        check_ray_address(f"127.0.0.1:{port}")
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}: " in str(plain.value)
    assert "ray://" not in str(plain.value)
    with pytest.raises(ClusterError) as client:
        check_ray_address(f"ray://127.0.0.1:{port}")
    assert f"at 127.0.0.1:{port} (ray://127.0.0.1:{port}): " in str(client.value)

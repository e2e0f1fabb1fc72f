"""The unit suite's guard (tests/conftest.py): a unit test that starts a process fails, and so
does one whose fixture starts it, even a module-scoped fixture set up before the test's own."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent


@pytest.mark.integration  # the inner session's tests start a process on purpose
def test_a_process_started_by_a_module_fixture_fails_the_unit_test(
    pytester: pytest.Pytester,
) -> None:
    shutil.copy(HERE / "conftest.py", pytester.path / "conftest.py")
    pytester.makepyfile(
        test_inner=textwrap.dedent(
            """
            import subprocess
            import sys

            import pytest

            @pytest.fixture(scope="module")
            def started():
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                return True

            def test_unit_with_a_process_fixture(started):
                assert started

            def test_unit_without():
                assert True

            @pytest.mark.integration
            def test_marked_may(started):
                subprocess.run([sys.executable, "-c", "pass"], check=True)
            """
        )
    )
    pytester.makeini("[pytest]\nmarkers =\n    integration: starts processes\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    # the guard fails the unit test at its teardown (its call passed): an error, named
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_unit_with_a_process_fixture*"])
    result.stdout.fnmatch_lines(["*must be marked integration*subprocess.Popen*"])

"""tests/conftest.py `pytest_runtest_call`: a variable a test's body sets or changes does not
reach the tests after it (nor their subprocesses' zygote keys: tests/zygote.py). The two tests
run in this order, in one worker (whole files per worker: scripts/test_env.sh)."""
import os

import pytest

_NAME = "CONVBERT_TEST_ISOLATION_PROBE"


@pytest.fixture(scope="module")
def module_setting():
    """A module fixture's own setting stays for the module's tests, and goes at its teardown."""
    os.environ["CONVBERT_TEST_ISOLATION_MODULE"] = "1"
    yield
    del os.environ["CONVBERT_TEST_ISOLATION_MODULE"]


def test_a_body_sets_variables(module_setting):
    assert _NAME not in os.environ
    os.environ[_NAME] = "leaked"
    os.environ["PATH"] = "/nowhere"
    del os.environ["CONVBERT_TEST_ISOLATION_MODULE"]


def test_the_next_test_finds_them_as_they_were(module_setting):
    assert _NAME not in os.environ
    assert os.environ["PATH"] != "/nowhere"
    assert os.environ["CONVBERT_TEST_ISOLATION_MODULE"] == "1"

"""Shared fixtures for the dg end-to-end conformance tests.

Every test is parametrized over `mode`; only "interp" exists for now and
"compiled" will be added to the params below. A dg module is built once per
(source, mode) and shared by all tests that use it (util.load_src and
util.load_prog keep the cache).
"""
import pytest


@pytest.fixture(params=["interp"], scope="session")
def mode(request):
    return request.param
